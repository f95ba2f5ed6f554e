// PrefixStore: a stage's half of prefix caching. The coordinator keeps the
// index (coordinator/prefix_index.h: which prompt prefix is in which slot,
// LRU) and tells every stage, in the micro-batch, which slots to copy into
// a new sequence and which of a sequence's blocks to save into which slot;
// this store holds the slots. A slot is one block: the KV rows of the
// shard's layers for block_tokens consecutive positions (the backend's raw
// rows, Backend::read_kv), the block's token ids (the last stage's sampler
// counts them for its penalties) and the key the coordinator saved it under
// (the chained hash of the prefix up to the block). A restore names the key
// it expects, so an empty slot, a slot since rewritten or a hostile id is
// refused, never restored.
//
// Memory: a slot is allocated when first written and reused after; at most
// capacity x block_tokens x row_bytes bytes, beside the sequences' KV.
//
// Threads: one at a time (the stage's run() holds it).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace strata::worker {

class PrefixStore {
 public:
  PrefixStore(int capacity, int block_tokens, int64_t row_bytes);

  int capacity() const { return static_cast<int>(slots_.size()); }
  int block_tokens() const { return block_tokens_; }
  int64_t block_bytes() const { return block_bytes_; }
  int64_t allocated_bytes() const;

  // INVALID_ARGUMENT naming `field` unless `id` is a slot.
  absl::Status check_id(uint64_t id, const std::string& field) const;
  // INVALID_ARGUMENT naming `field` unless slot `id` holds a block saved
  // under `key`.
  absl::Status check_restore(uint64_t id, uint64_t key,
                             const std::string& field) const;

  // The slot's KV bytes (block_bytes()) and tokens (block_tokens()); only
  // after check_restore passed.
  const uint8_t* kv(uint32_t id) const { return slots_[id].kv.data(); }
  std::span<const int32_t> tokens(uint32_t id) const {
    return slots_[id].tokens;
  }

  // Saving: begin_save empties the slot and returns its KV buffer to fill;
  // commit_save then makes it hold `key` and `tokens` (block_tokens ids).
  uint8_t* begin_save(uint32_t id);
  void commit_save(uint32_t id, uint64_t key, std::span<const int32_t> tokens);
  // Empties the slot (a save that did not happen must not leave old rows
  // under a key someone may restore).
  void clear(uint32_t id) { slots_[id].full = false; }
  void clear_all();
  int full_slots() const;

 private:
  struct Slot {
    bool full = false;
    uint64_t key = 0;
    std::vector<uint8_t> kv;
    std::vector<int32_t> tokens;
  };
  int block_tokens_;
  int64_t block_bytes_;
  std::vector<Slot> slots_;
};

}  // namespace strata::worker
