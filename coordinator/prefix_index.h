// PrefixIndex: the coordinator's half of prefix caching, the single decider
// of what every stage's block store (worker/prefix_store.h) holds.
//
// A prompt is cut into blocks of block_tokens tokens (16 by default: a
// finer grain reuses more of a chat whose turns end anywhere, and a block
// of 16 rows is still one memcpy per layer on a stage; the last partial
// block is never cached). Block b's key chains the previous block's key
// with its tokens, key(b) = mix(key(b - 1), tokens of b), key(-1) a fixed
// seed, so one key names the whole prefix up to its block. A cache salt (a
// request's cache_salt, vLLM's name) gives another key(-1): only requests
// of one salt share their blocks, so a tenant cannot learn from cache hits
// which prompts another sent (the index checks a block's parent, so the
// first block of one root never matches another's). The index maps
// key -> slot (0 .. capacity - 1, the slot ids of every stage's store) and
// keeps each entry's parent key and tokens, so a 64-bit collision is a
// miss, never a wrong restore. Slots are recycled least recently used
// first; a match or an insert of an existing block makes it most recent.
//
// Ownership: plain value; not thread-safe (the StepScheduler's thread).
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata::coordinator {

inline constexpr int kDefaultPrefixBlockTokens = 16;

struct PrefixBlock {
  uint32_t slot = 0;
  uint64_t key = 0;
};

class PrefixIndex {
 public:
  // capacity 0: off (match finds nothing, insert gives nothing).
  PrefixIndex(int capacity, int block_tokens);

  int capacity() const { return static_cast<int>(slots_.size()); }
  int block_tokens() const { return block_tokens_; }
  int used() const { return static_cast<int>(by_key_.size()); }

  // key(-1) of the shared cache (an empty salt).
  static constexpr uint64_t kSharedRoot = 0x7072656669782d31ull;  // "prefix-1"

  // The chained keys of the full blocks of `tokens`, from `root`.
  std::vector<uint64_t> block_keys(std::span<const int32_t> tokens,
                                   uint64_t root = kSharedRoot) const;
  // key(-1): the shared cache's for an empty salt, else one of the salt's.
  static uint64_t root_key(std::string_view cache_salt = {});
  // The key of a block (block_tokens ids) after the block keyed `parent`
  // (root_key(salt) for the first block).
  uint64_t chain_key(uint64_t parent, std::span<const int32_t> block) const;

  // The cached blocks that start `tokens` (keys from block_keys), in order,
  // at most max_blocks; each becomes most recently used.
  std::vector<PrefixBlock> match(std::span<const int32_t> tokens,
                                 std::span<const uint64_t> keys,
                                 int max_blocks, uint64_t root = kSharedRoot);
  // A slot for block b of `tokens` (recycling the least recently used
  // one), to be saved there by the caller; nullopt when the block is
  // already cached (it becomes most recent), or the index is off.
  std::optional<uint32_t> insert(std::span<const int32_t> tokens,
                                 std::span<const uint64_t> keys, int b,
                                 uint64_t root = kSharedRoot);
  // The same for one block given by its tokens, its parent's key and its.
  std::optional<uint32_t> insert_block(std::span<const int32_t> block,
                                       uint64_t parent, uint64_t key);
  // Forgets block `key` if slot `slot` still holds it (a save that failed).
  void erase(uint32_t slot, uint64_t key);
  // Forgets everything (the stages' stores were reloaded).
  void clear();

 private:
  struct Entry {
    bool used = false;
    uint64_t key = 0;
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    std::list<uint32_t>::iterator lru;
  };
  bool same(const Entry& e, std::span<const int32_t> tokens,
            std::span<const uint64_t> keys, int b, uint64_t root) const;
  void touch(uint32_t slot);

  int block_tokens_;
  std::vector<Entry> slots_;
  std::unordered_map<uint64_t, uint32_t> by_key_;
  std::list<uint32_t> lru_;  // front: most recently used
  std::vector<uint32_t> free_;
};

}  // namespace strata::coordinator
