#include "coordinator/prefix_index.h"

#include <algorithm>

namespace strata::coordinator {
namespace {

constexpr uint64_t kSeed = PrefixIndex::kSharedRoot;

// splitmix64's finaliser: a bijective mix.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

PrefixIndex::PrefixIndex(int capacity, int block_tokens)
    : block_tokens_(std::max(1, block_tokens)),
      slots_(static_cast<size_t>(std::max(0, capacity))) {
  for (uint32_t s = static_cast<uint32_t>(slots_.size()); s > 0; --s)
    free_.push_back(s - 1);
}

uint64_t PrefixIndex::root_key(std::string_view cache_salt) {
  if (cache_salt.empty()) return kSeed;
  uint64_t h = mix(kSeed ^ 0x5a17ull);
  for (unsigned char c : cache_salt) h = mix(h ^ c);
  return mix(h ^ cache_salt.size());
}

uint64_t PrefixIndex::chain_key(uint64_t parent,
                                std::span<const int32_t> block) const {
  uint64_t h = parent;
  for (int32_t t : block) h = mix(h ^ static_cast<uint32_t>(t));
  return mix(h ^ 0xb10cull);
}

std::vector<uint64_t> PrefixIndex::block_keys(
    std::span<const int32_t> tokens, uint64_t root) const {
  std::vector<uint64_t> keys;
  const size_t n = tokens.size() / static_cast<size_t>(block_tokens_);
  keys.reserve(n);
  uint64_t h = root;
  for (size_t b = 0; b < n; ++b) {
    h = chain_key(h, tokens.subspan(b * block_tokens_,
                                    static_cast<size_t>(block_tokens_)));
    keys.push_back(h);
  }
  return keys;
}

bool PrefixIndex::same(const Entry& e, std::span<const int32_t> tokens,
                       std::span<const uint64_t> keys, int b, uint64_t root) const {
  if (e.parent != (b == 0 ? root : keys[b - 1])) return false;
  return std::equal(e.tokens.begin(), e.tokens.end(),
                    tokens.begin() + static_cast<size_t>(b) * block_tokens_);
}

void PrefixIndex::touch(uint32_t slot) {
  lru_.splice(lru_.begin(), lru_, slots_[slot].lru);
}

std::vector<PrefixBlock> PrefixIndex::match(std::span<const int32_t> tokens,
                                            std::span<const uint64_t> keys,
                                            int max_blocks, uint64_t root) {
  std::vector<PrefixBlock> hits;
  const int n = std::min(max_blocks, static_cast<int>(keys.size()));
  for (int b = 0; b < n; ++b) {
    auto it = by_key_.find(keys[b]);
    if (it == by_key_.end() || !same(slots_[it->second], tokens, keys, b, root))
      break;
    hits.push_back(PrefixBlock{it->second, keys[b]});
  }
  // Most recent last-touched first: the prefix's first block ends up the
  // most recent, so a longer prefix loses its tail before its head.
  for (auto h = hits.rbegin(); h != hits.rend(); ++h) touch(h->slot);
  return hits;
}

std::optional<uint32_t> PrefixIndex::insert(std::span<const int32_t> tokens,
                                            std::span<const uint64_t> keys,
                                            int b, uint64_t root) {
  return insert_block(tokens.subspan(static_cast<size_t>(b) * block_tokens_,
                                     static_cast<size_t>(block_tokens_)),
                      b == 0 ? root : keys[b - 1], keys[b]);
}

std::optional<uint32_t> PrefixIndex::insert_block(
    std::span<const int32_t> block, uint64_t parent, uint64_t key) {
  if (slots_.empty()) return std::nullopt;
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    touch(it->second);
    return std::nullopt;  // cached (or a collision: then not cached)
  }
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = lru_.back();
    lru_.pop_back();
    by_key_.erase(slots_[slot].key);
    slots_[slot].used = false;
  }
  Entry& e = slots_[slot];
  e.used = true;
  e.key = key;
  e.parent = parent;
  e.tokens.assign(block.begin(), block.end());
  lru_.push_front(slot);
  e.lru = lru_.begin();
  by_key_[e.key] = slot;
  return slot;
}

void PrefixIndex::erase(uint32_t slot, uint64_t key) {
  if (slot >= slots_.size() || !slots_[slot].used || slots_[slot].key != key)
    return;
  Entry& e = slots_[slot];
  by_key_.erase(e.key);
  lru_.erase(e.lru);
  e.used = false;
  free_.push_back(slot);
}

void PrefixIndex::clear() {
  by_key_.clear();
  lru_.clear();
  free_.clear();
  for (Entry& e : slots_) e.used = false;
  for (uint32_t s = static_cast<uint32_t>(slots_.size()); s > 0; --s)
    free_.push_back(s - 1);
}

}  // namespace strata::coordinator
