#include "kernels/cpu/reference/fp16.h"

#include <cpuid.h>
#include <immintrin.h>

#include <bit>
#include <cstdint>

namespace strata::reference {
namespace {

constexpr uint32_t kF32SignMask = 0x80000000u;
constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;
constexpr uint32_t kF32Inf = 0x7F800000u;
constexpr uint16_t kF16Inf = 0x7C00u;
constexpr uint16_t kF16QuietNan = 0x7E00u;  // exponent all ones + bit 9

// Shifts `value` right by `shift` bits (1..31) and rounds the result to
// nearest, ties to even, on the bits shifted out.
uint32_t shift_right_round_even(uint32_t value, int shift) {
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (kept & 1u) != 0)) return kept + 1;
  return kept;
}

}  // namespace

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) {  // inf or NaN: keep the payload
    return std::bit_cast<float>(sign | kF32Inf | (mantissa << 13));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in f32
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  // Normal: rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) |
                              (mantissa << 13));
}

uint16_t f32_to_f16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((bits & kF32SignMask) >> 16);
  const uint32_t magnitude = bits & kF32AbsMask;
  if (magnitude > kF32Inf) {  // NaN: quiet, top payload bits kept
    return static_cast<uint16_t>(sign | kF16QuietNan |
                                 ((magnitude >> 13) & 0x3FFu));
  }
  if (magnitude == kF32Inf) return static_cast<uint16_t>(sign | kF16Inf);

  // f16 biased exponent this value would have if it were normal in f16.
  const int exponent = static_cast<int>(magnitude >> 23) - 127 + 15;
  const uint32_t mantissa = magnitude & 0x7FFFFFu;
  if (exponent >= 31) return static_cast<uint16_t>(sign | kF16Inf);
  if (exponent >= 1) {
    // Normal f16: keep 10 mantissa bits. A carry out of the mantissa bumps
    // the exponent, which is the correct encoding (up to inf at 65520).
    const uint32_t half = (static_cast<uint32_t>(exponent) << 23 | mantissa);
    return static_cast<uint16_t>(sign | shift_right_round_even(half, 13));
  }
  // Subnormal or zero in f16: count units of 2^-24. The significand with its
  // hidden bit is m * 2^(e - 23); shifting right by 14 - exponent gives units.
  // Below 2^-25 everything rounds to zero (shift > 24).
  if (exponent < -10) return sign;
  const uint32_t significand = mantissa | 0x800000u;
  return static_cast<uint16_t>(
      sign | shift_right_round_even(significand, 14 - exponent));
}

namespace {
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* src,
                                                        uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

// CPUID leaf 1 (Intel SDM vol. 2A, CPUID): AVX and F16C, and the OS saves
// the YMM registers (OSXSAVE, then XCR0 bits 1 and 2). Written out because
// clang's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
  if ((c & bit_OSXSAVE) == 0 || (c & bit_AVX) == 0 || (c & bit_F16C) == 0) return false;
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 6u) == 6u;
}

}  // namespace

void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n) {
  static const bool f16c = cpu_has_f16c();
  if (f16c) {
    f32_to_f16_f16c(src, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

uint16_t f32_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & kF32AbsMask) > kF32Inf) {  // NaN: truncate, force quiet bit
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  // Round to nearest even on the low 16 bits; carries reach inf correctly.
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float e8m0_to_f32(uint8_t e) {
  const uint32_t bits = e == 0 ? 0x00400000u : static_cast<uint32_t>(e) << 23;
  return std::bit_cast<float>(bits);
}

float e8m0_to_f32_half(uint8_t e) {
  const uint32_t bits =
      e < 2 ? (0x00200000u << e) : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

}  // namespace strata::reference
