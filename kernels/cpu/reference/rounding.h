// Float -> integer helpers for the reference quantizers (internal).
//
// Each clamps in the float domain before converting, so NaN and inf inputs
// give a defined value (`lo`) instead of undefined behaviour; for inputs in
// range they equal the C expression named in their comment, which is what
// ggml-quants.c uses, so results match ggml bit for bit.
#pragma once

#include <cmath>

namespace strata::reference {

// Round half to even (ggml's nearest_int, i.e. lrintf in the default
// rounding mode), clamped to [lo, hi]. |lo|, |hi| must be below 2^22: the
// value is clamped first, then rounded by adding and removing 1.5 * 2^23
// (the sum's ulp is 1, so the FPU rounds to an integer, ties to even);
// this avoids a libm call where the CPU baseline lacks SSE4.1's roundss.
inline int round_even_clamp(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;  // also NaN
  if (v >= static_cast<float>(hi)) return hi;
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  const float r = (v + kMagic) - kMagic;
  return static_cast<int>(r);
}

// Round half away from zero (C roundf), clamped to [lo, hi].
inline int round_away_clamp(float v, int lo, int hi) {
  const float r = std::round(v);
  if (!(r >= static_cast<float>(lo))) return lo;
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

// Truncate toward zero (a C cast), clamped to [lo, hi].
inline int trunc_clamp(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;  // also NaN
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);  // in range: the cast truncates
}

}  // namespace strata::reference
