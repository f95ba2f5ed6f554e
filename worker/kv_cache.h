// KvCache: the keys and values of one sequence for the layers of one shard.
//
// Layout per layer (row-major, one row per position of the sequence):
//   K [n_ctx][n_head_kv][head_dim_k]   f16 (default) or f32
//   V [n_ctx][n_head_kv][head_dim_v]
// Keys are stored after RoPE. Memory is reserved for n_ctx positions at
// creation in one anonymous mapping of the address space (mmap, no swap
// reserved), of which pages are only touched as positions are written, so
// a long context costs what is used; the mapping goes back to the system
// when the cache is destroyed, so a finished sequence leaves nothing
// resident (a heap block would stay with the allocator for reuse). Each
// layer's K and V start on a page boundary.
//
// Ownership: owns its mapping. Threads: one forward pass at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/base/op_types.h"
#include "model/ggml_type.h"

namespace strata::worker {

struct KvCacheShape {
  int n_layer = 0;     // layers of the shard
  int n_ctx = 0;       // positions
  int n_head_kv = 0;
  int head_dim_k = 0;
  int head_dim_v = 0;
  GgmlType type = GgmlType::kF16;  // kF16 or kF32
};

// The cache element type a name gives: "f16" or "f32", as the --kv-type
// flags, the cluster config's kv_type key and LoadShard's kv_type field
// spell it; nullopt for any other text.
std::optional<GgmlType> parse_kv_type(std::string_view name);
// The inverse: "f16" for kF16, "f32" for kF32 (and any other type).
const char* kv_type_name(GgmlType type);

class KvCache {
 public:
  // Errors: InvalidArgument for a non-positive size, a type other than
  // F16/F32, or a cache over 2^40 bytes; ResourceExhausted when the memory
  // cannot be reserved.
  static absl::StatusOr<std::unique_ptr<KvCache>> create(
      const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  int n_ctx() const { return shape_.n_ctx; }
  // Positions 0..length()-1 hold keys and values for every layer.
  int length() const { return length_; }
  // Drops positions >= n (n <= length()).
  void truncate(int n);
  // Marks n more positions as filled (after every layer stored them).
  void advance(int n) { length_ += n; }

  // Writes rows [pos, pos + n) of `layer` from f32 k [n][n_head_kv][dk]
  // and v [n][n_head_kv][dv], converting to the cache type. Requires
  // pos + n <= n_ctx (asserted).
  void store(int layer, int pos, int n, const float* k, const float* v);

  // The layer's cache with positions 0..n_kv-1 valid.
  kernels::KvView view(int layer, int64_t n_kv) const;

  // Asks the memory system for the K and V rows [begin, end) of `layer`
  // (software prefetch into L2, at most max_bytes of each, from `begin`
  // on), so that a decode step's attention finds them on chip: issued
  // before the step's q/k/v matmul, their misses overlap its weight
  // stream instead of following the attention's loads. A hint only.
  void prefetch(int layer, int64_t begin, int64_t end, int64_t max_bytes) const;

  // Raw rows (prefix caching): bytes of one position over every layer,
  // K then V of layer 0, then layer 1, ...; read_rows copies positions
  // [pos, pos + n) out, write_rows writes them (pos + n <= n_ctx,
  // asserted; the caller advances the length).
  int64_t row_bytes() const {
    return static_cast<int64_t>(shape_.n_layer) * (k_row_ + v_row_) *
           static_cast<int64_t>(elem_);
  }
  void read_rows(int pos, int n, uint8_t* out) const;
  void write_rows(int pos, int n, const uint8_t* in);

  // Bytes of the rows reserved (not necessarily touched; the mapping
  // rounds each layer's K and V up to a page).
  int64_t reserved_bytes() const;

 private:
  explicit KvCache(const KvCacheShape& shape) : shape_(shape) {}
  // Bytes of one layer's K (V) region: n_ctx rows, rounded up to a page.
  size_t region_bytes(int64_t row) const;

  KvCacheShape shape_;
  int length_ = 0;
  int64_t k_row_ = 0;  // elements per position: n_head_kv * head_dim_k
  int64_t v_row_ = 0;
  size_t elem_ = 2;    // bytes per element
  struct Unmap {
    size_t bytes;
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Unmap> mapping_;  // every layer's K and V
  std::vector<uint8_t*> k_;  // [n_layer], into mapping_
  std::vector<uint8_t*> v_;
};

}  // namespace strata::worker
