// first_not_finite(): where a float buffer first holds an Inf or NaN. Used
// on the activation path (hidden rows received from another stage, each
// stage's output rows, the last stage's logits) once per step, so the scan
// is written to vectorize at -O2.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace strata::worker {

// The index of the first Inf or NaN in x[0, n), or n when every value is
// finite. A value is not finite when its exponent bits are all ones: the
// one case in which adding 1 to the masked exponent carries into bit 31.
// Two 4-lane vectors (GCC / clang vector extensions: SSE2 at the baseline
// ISA) of and, add and or per 8 floats; the index is then found by a
// second, short scan. (An array of 8 lanes, as this was written first, kept
// its sums on the stack: a store and a reload per step, 0.8 % of a Gemma 3
// decode profile for its 262,144 logits; bench/finite_scan_bench.cc.)
inline int64_t first_not_finite(const float* x, int64_t n) {
  using U32x4 = uint32_t __attribute__((vector_size(16)));
  U32x4 acc0 = {}, acc1 = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    U32x4 b0, b1;
    std::memcpy(&b0, x + i, sizeof b0);
    std::memcpy(&b1, x + i + 4, sizeof b1);
    acc0 |= (b0 & 0x7F800000u) + 0x00800000u;
    acc1 |= (b1 & 0x7F800000u) + 0x00800000u;
  }
  const U32x4 acc = acc0 | acc1;
  uint32_t bad = 0;
  for (int l = 0; l < 4; ++l) bad |= acc[l] >> 31;
  for (int64_t j = i; j < n; ++j) bad |= std::isfinite(x[j]) ? 0u : 1u;
  if (bad == 0) return n;
  int64_t k = 0;
  while (std::isfinite(x[k])) ++k;
  return k;
}

}  // namespace strata::worker
