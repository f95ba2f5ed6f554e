#include "worker/kv_cache.h"

#include <immintrin.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/reference/fp16.h"

namespace strata::worker {

std::optional<GgmlType> parse_kv_type(std::string_view name) {
  if (name == "f16") return GgmlType::kF16;
  if (name == "f32") return GgmlType::kF32;
  return std::nullopt;
}

const char* kv_type_name(GgmlType type) { return type == GgmlType::kF16 ? "f16" : "f32"; }

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::create(
    const KvCacheShape& s) {
  if (s.n_layer < 0 || s.n_ctx <= 0 || s.n_head_kv <= 0 ||
      s.head_dim_k <= 0 || s.head_dim_v <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache: non-positive size (n_ctx ", s.n_ctx, ", n_head_kv ",
        s.n_head_kv, ", head dims ", s.head_dim_k, "/", s.head_dim_v, ")"));
  }
  if (s.type != GgmlType::kF16 && s.type != GgmlType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache: type ", std::string(ggml_type_info(s.type).name),
                     " is not supported (F16, F32)"));
  }
  std::unique_ptr<KvCache> cache(new KvCache(s));
  cache->elem_ = s.type == GgmlType::kF16 ? 2 : 4;
  cache->k_row_ = static_cast<int64_t>(s.n_head_kv) * s.head_dim_k;
  cache->v_row_ = static_cast<int64_t>(s.n_head_kv) * s.head_dim_v;
  if (cache->reserved_bytes() > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache: ", cache->reserved_bytes(),
                     " bytes for n_ctx ", s.n_ctx, " is over 1 TiB"));
  }
  const size_t k_bytes = cache->region_bytes(cache->k_row_);
  const size_t v_bytes = cache->region_bytes(cache->v_row_);
  const size_t total = static_cast<size_t>(s.n_layer) * (k_bytes + v_bytes);
  if (total == 0) return cache;
  // MAP_NORESERVE: untouched rows take neither memory nor swap; the kernel
  // supplies zeroed pages as positions are written.
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache: cannot reserve ", total, " bytes of address space"));
  }
  cache->mapping_ = std::unique_ptr<uint8_t, Unmap>(static_cast<uint8_t*>(base),
                                                    Unmap{total});
  uint8_t* at = cache->mapping_.get();
  for (int l = 0; l < s.n_layer; ++l) {
    cache->k_.push_back(at);
    at += k_bytes;
    cache->v_.push_back(at);
    at += v_bytes;
  }
  return cache;
}

void KvCache::Unmap::operator()(uint8_t* p) const { munmap(p, bytes); }

size_t KvCache::region_bytes(int64_t row) const {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = static_cast<size_t>(shape_.n_ctx) * row * elem_;
  return (bytes + page - 1) / page * page;
}

int64_t KvCache::reserved_bytes() const {
  return static_cast<int64_t>(shape_.n_layer) * shape_.n_ctx *
         (k_row_ + v_row_) * static_cast<int64_t>(elem_);
}

void KvCache::truncate(int n) {
  assert(n >= 0 && n <= length_);
  length_ = n;
}

void KvCache::store(int layer, int pos, int n, const float* k,
                    const float* v) {
  assert(layer >= 0 && layer < shape_.n_layer);
  assert(pos >= 0 && pos + n <= shape_.n_ctx);
  auto put = [&](uint8_t* base, int64_t row, const float* src) {
    const int64_t count = static_cast<int64_t>(n) * row;
    if (shape_.type == GgmlType::kF32) {
      std::memcpy(base + static_cast<size_t>(pos) * row * 4, src,
                  static_cast<size_t>(count) * 4);
      return;
    }
    uint16_t* dst = reinterpret_cast<uint16_t*>(base) +
                    static_cast<size_t>(pos) * row;
    reference::f32_to_f16_row(src, dst, count);
  };
  put(k_[layer], k_row_, k);
  put(v_[layer], v_row_, v);
}

void KvCache::prefetch(int layer, int64_t begin, int64_t end, int64_t max_bytes) const {
  assert(layer >= 0 && layer < shape_.n_layer);
  begin = std::max<int64_t>(begin, 0);
  end = std::min<int64_t>(end, shape_.n_ctx);
  if (begin >= end) return;
  auto ask = [&](const uint8_t* base, int64_t row) {
    const int64_t bytes = row * static_cast<int64_t>(elem_);
    const char* from = reinterpret_cast<const char*>(base) + begin * bytes;
    const int64_t n = std::min((end - begin) * bytes, max_bytes);
    for (int64_t o = 0; o < n; o += 64) _mm_prefetch(from + o, _MM_HINT_T1);
  };
  ask(k_[layer], k_row_);
  ask(v_[layer], v_row_);
}

void KvCache::read_rows(int pos, int n, uint8_t* out) const {
  assert(pos >= 0 && n >= 0 && pos + n <= shape_.n_ctx);
  const size_t kb = static_cast<size_t>(k_row_) * elem_;
  const size_t vb = static_cast<size_t>(v_row_) * elem_;
  for (int l = 0; l < shape_.n_layer; ++l) {
    std::memcpy(out, k_[l] + pos * kb, n * kb);
    out += n * kb;
    std::memcpy(out, v_[l] + pos * vb, n * vb);
    out += n * vb;
  }
}

void KvCache::write_rows(int pos, int n, const uint8_t* in) {
  assert(pos >= 0 && n >= 0 && pos + n <= shape_.n_ctx);
  const size_t kb = static_cast<size_t>(k_row_) * elem_;
  const size_t vb = static_cast<size_t>(v_row_) * elem_;
  for (int l = 0; l < shape_.n_layer; ++l) {
    std::memcpy(k_[l] + pos * kb, in, n * kb);
    in += n * kb;
    std::memcpy(v_[l] + pos * vb, in, n * vb);
    in += n * vb;
  }
}

kernels::KvView KvCache::view(int layer, int64_t n_kv) const {
  return kernels::KvView{shape_.type, k_[layer], v_[layer], n_kv};
}

}  // namespace strata::worker
