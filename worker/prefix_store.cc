#include "worker/prefix_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace strata::worker {

PrefixStore::PrefixStore(int capacity, int block_tokens, int64_t row_bytes)
    : block_tokens_(std::max(1, block_tokens)),
      block_bytes_(row_bytes * std::max(1, block_tokens)),
      slots_(static_cast<size_t>(std::max(0, capacity))) {}

int64_t PrefixStore::allocated_bytes() const {
  int64_t n = 0;
  for (const Slot& s : slots_) n += static_cast<int64_t>(s.kv.capacity());
  return n;
}

absl::Status PrefixStore::check_id(uint64_t id,
                                   const std::string& field) const {
  if (slots_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": block ", id,
        ", but this shard has no prefix cache (prefix_cache_blocks 0)"));
  }
  if (id >= slots_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": block ", id, " is outside the prefix cache's [0, ",
        slots_.size(), ")"));
  }
  return absl::OkStatus();
}

absl::Status PrefixStore::check_restore(uint64_t id, uint64_t key,
                                        const std::string& field) const {
  if (absl::Status st = check_id(id, field); !st.ok()) return st;
  const Slot& s = slots_[id];
  if (!s.full) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": block ", id, " is empty on this stage"));
  }
  if (s.key != key) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": block ", id, " holds another prefix here (not key ",
                     absl::Hex(key), ")"));  // the held key is another prompt's: not said
  }
  return absl::OkStatus();
}

uint8_t* PrefixStore::begin_save(uint32_t id) {
  Slot& s = slots_[id];
  s.full = false;
  s.kv.resize(static_cast<size_t>(block_bytes_));
  return s.kv.data();
}

void PrefixStore::commit_save(uint32_t id, uint64_t key,
                              std::span<const int32_t> tokens) {
  Slot& s = slots_[id];
  s.tokens.assign(tokens.begin(), tokens.end());
  s.key = key;
  s.full = true;
}

void PrefixStore::clear_all() {
  for (Slot& s : slots_) s.full = false;
}

int PrefixStore::full_slots() const {
  return static_cast<int>(std::count_if(slots_.begin(), slots_.end(),
                                        [](const Slot& s) { return s.full; }));
}

}  // namespace strata::worker
