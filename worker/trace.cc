#include "worker/trace.h"

#include <bit>
#include <cstring>

namespace strata::worker {

namespace {
constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;
}  // namespace

uint64_t fnv1a64(const void* bytes, size_t n) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  uint64_t h = kFnvOffset;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

void append_row_hashes(const float* x, int n_rows, int64_t width,
                       std::vector<uint64_t>* out) {
  // The hash is over little-endian bytes; on a big-endian host the floats
  // would have to be swapped first (no such host is supported).
  static_assert(std::endian::native == std::endian::little);
  for (int r = 0; r < n_rows; ++r) {
    out->push_back(
        fnv1a64(x + r * width, static_cast<size_t>(width) * sizeof(float)));
  }
}

}  // namespace strata::worker
