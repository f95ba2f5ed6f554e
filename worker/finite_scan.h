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
// Eight independent integer lanes of and, add and or per step, which GCC's
// -O2 turns into vector ops (a plain isfinite loop stays scalar, about 9
// instructions a float); the index is then found by a second, short scan.
inline int64_t first_not_finite(const float* x, int64_t n) {
  uint32_t acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint32_t bits[8];
    std::memcpy(bits, x + i, sizeof bits);
    for (int l = 0; l < 8; ++l) acc[l] |= (bits[l] & 0x7F800000u) + 0x00800000u;
  }
  uint32_t bad = 0;
  for (int l = 0; l < 8; ++l) bad |= acc[l] >> 31;
  for (int64_t j = i; j < n; ++j) bad |= std::isfinite(x[j]) ? 0u : 1u;
  if (bad == 0) return n;
  int64_t k = 0;
  while (std::isfinite(x[k])) ++k;
  return k;
}

}  // namespace strata::worker
