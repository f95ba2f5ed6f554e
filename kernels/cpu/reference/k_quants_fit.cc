// The four steps of k_quants_fit.h. Step 1 ranks candidate grids by their
// squared error in closed form from sums accumulated in double (one pass per
// candidate); steps 2 to 4 measure the error of every candidate on the
// dequantized values, formed in f32 exactly as the dequantizer forms them. q is
// found by multiplying with the reciprocal step (a tie may then round either
// way; the error of what was chosen is still measured exactly).
#include "kernels/cpu/reference/k_quants_fit.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/reference/rounding.h"

namespace strata::reference {
namespace {

constexpr int kMaxSubLen = 32;
// Candidate steps for step 1: range / (qmax + k / 10), k = -10..10.
constexpr int kSweepHalfWidth = 10;
constexpr float kSweepStep = 0.1f;
// Alternating re-quantize / refit rounds, and step-3 refits, at most.
constexpr int kRefineRounds = 8;
constexpr int kSuperRefits = 4;

double square(double v) { return v * v; }

// The f16 nearest to v >= 0 from above. Rounding a super-block scale up keeps
// every sub-block's quotient within scale_max (no clipping), and keeps a
// tiny but nonzero scale from underflowing to 0 (an f16 subnormal with an
// integer sub-block scale still resolves steps down to 2^-24).
uint16_t f16_at_least(float v) {
  uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) < v) ++h;  // the next pattern is the next larger value
  return h;
}

// The f16 one step from positive finite `h` in direction `dir` (+1 / -1),
// or `h` itself at the ends of the positive finite range.
uint16_t f16_neighbour(uint16_t h, int dir) {
  if (dir < 0) return h > 0 ? static_cast<uint16_t>(h - 1) : h;
  return h < 0x7BFF ? static_cast<uint16_t>(h + 1) : h;
}

// ---------------------------------------------------------------------------
// Step 1, affine: x ~ scale * q - min with scale >= 0, min >= 0 (the grid
// always reaches down to or below zero, as ggml's K-quants require).

struct AffineScale {
  float scale;
  float min;
};

// Sums over a sub-block that do not depend on the grid.
struct Moments {
  int n;
  double sx, sxx;
};

Moments moments(const float* x, int n) {
  Moments m = {n, 0, 0};
  for (int e = 0; e < n; ++e) {
    m.sx += x[e];
    m.sxx += static_cast<double>(x[e]) * x[e];
  }
  return m;
}

// Sums over the integers q a grid chose for x: enough to refit the grid by
// least squares and to know its squared error in closed form, in one pass.
struct GridSums {
  double sq, sqq, sxq;
};

GridSums affine_grid_sums(const float* x, int n, int qmax, AffineScale s) {
  const float inv = s.scale > 0.0f ? 1.0f / s.scale : 0.0f;
  GridSums g = {0, 0, 0};
  for (int e = 0; e < n; ++e) {
    const int q = round_even_clamp((x[e] + s.min) * inv, 0, qmax);
    g.sq += q;
    g.sqq += static_cast<double>(q) * q;
    g.sxq += static_cast<double>(x[e]) * q;
  }
  return g;
}

// sum_e (a q_e + b - x_e)^2 from the sums.
double affine_sse(const Moments& m, const GridSums& g, double a, double b) {
  return m.sxx - 2 * a * g.sxq - 2 * b * m.sx + a * a * g.sqq +
         2 * a * b * g.sq + m.n * b * b;
}

// Least-squares (scale, min) for the grid's integers, under scale >= 0 and
// min >= 0, and its squared error. False when the integers are all equal
// (the fit is undetermined).
bool affine_refit(const Moments& m, const GridSums& g, AffineScale* s,
                  double* sse) {
  const double det = m.n * g.sqq - g.sq * g.sq;
  if (!(det > 0)) return false;
  double scale = (m.n * g.sxq - g.sq * m.sx) / det;
  double offset = (g.sqq * m.sx - g.sq * g.sxq) / det;  // x ~ scale*q + offset
  if (offset > 0) {  // min would be negative: pin the grid's bottom at 0
    offset = 0;
    scale = g.sxq / g.sqq;
  }
  if (!(scale >= 0)) return false;
  s->scale = static_cast<float>(scale);
  s->min = static_cast<float>(-offset);
  *sse = affine_sse(m, g, s->scale, -s->min);
  return true;
}

AffineScale fit_affine_sub_block(const float* x, int n, int qmax) {
  float lo = 0.0f;
  float hi = -INFINITY;
  for (int e = 0; e < n; ++e) {
    lo = std::min(lo, x[e]);
    hi = std::max(hi, x[e]);
  }
  // A constant sub-block (or one without a finite maximum) is its min.
  if (!(hi > lo)) return {0.0f, -lo};

  const Moments m = moments(x, n);
  // The min-max grid is the baseline every candidate must beat.
  AffineScale best = {(hi - lo) / static_cast<float>(qmax), -lo};
  double best_sse =
      affine_sse(m, affine_grid_sums(x, n, qmax, best), best.scale, lo);
  for (int k = -kSweepHalfWidth; k <= kSweepHalfWidth; ++k) {
    const float steps = static_cast<float>(qmax) + kSweepStep * k;
    if (!(steps > 0.0f)) continue;
    AffineScale s = {(hi - lo) / steps, -lo};
    double sse;
    if (!affine_refit(m, affine_grid_sums(x, n, qmax, s), &s, &sse)) continue;
    if (sse < best_sse) {
      best_sse = sse;
      best = s;
    }
  }
  for (int round = 0; round < kRefineRounds; ++round) {
    AffineScale s = best;
    double sse;
    if (!affine_refit(m, affine_grid_sums(x, n, qmax, s), &s, &sse)) break;
    if (!(sse < best_sse)) break;
    best_sse = sse;
    best = s;
  }
  return best;
}

// ---------------------------------------------------------------------------
// Step 1, symmetric: x ~ scale * q, scale of either sign.

GridSums symmetric_grid_sums(const float* x, int n, int qmin, int qmax,
                             float scale) {
  const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  GridSums g = {0, 0, 0};
  for (int e = 0; e < n; ++e) {
    const int q = round_even_clamp(x[e] * inv, qmin, qmax);
    g.sqq += static_cast<double>(q) * q;
    g.sxq += static_cast<double>(x[e]) * q;
  }
  return g;
}

// Least-squares scale for the grid's integers and its squared error.
bool symmetric_refit(const Moments& m, const GridSums& g, float* scale,
                     double* sse) {
  if (!(g.sqq > 0)) return false;
  *scale = static_cast<float>(g.sxq / g.sqq);
  *sse =
      m.sxx - 2 * *scale * g.sxq + static_cast<double>(*scale) * *scale * g.sqq;
  return true;
}

float fit_symmetric_sub_block(const float* x, int n, int qmin, int qmax) {
  float vmax = 0.0f;  // the largest-magnitude value, with its sign
  for (int e = 0; e < n; ++e) {
    if (std::fabs(x[e]) > std::fabs(vmax)) vmax = x[e];
  }
  if (vmax == 0.0f) return 0.0f;

  const Moments m = moments(x, n);
  float best = vmax / static_cast<float>(qmax);  // vmax exactly on the grid
  double best_sse;
  if (!symmetric_refit(m, symmetric_grid_sums(x, n, qmin, qmax, best), &best,
                       &best_sse)) {
    return best;
  }
  // vmax may land near either end of the grid: near qmin (the longer side,
  // with a scale of the opposite sign) or near qmax.
  for (const int end : {qmin, qmax}) {
    for (int k = -kSweepHalfWidth; k <= kSweepHalfWidth; ++k) {
      const float steps = static_cast<float>(std::abs(end)) + kSweepStep * k;
      if (!(steps > 0.0f)) continue;
      float scale = vmax / (end < 0 ? -steps : steps);
      double sse;
      if (!symmetric_refit(m, symmetric_grid_sums(x, n, qmin, qmax, scale),
                           &scale, &sse)) {
        continue;
      }
      if (sse < best_sse) {
        best_sse = sse;
        best = scale;
      }
    }
  }
  for (int round = 0; round < kRefineRounds; ++round) {
    float scale = best;
    double sse;
    if (!symmetric_refit(m, symmetric_grid_sums(x, n, qmin, qmax, scale),
                         &scale, &sse) ||
        !(sse < best_sse)) {
      break;
    }
    best_sse = sse;
    best = scale;
  }
  return best;
}

// ---------------------------------------------------------------------------
// Step 2: integers for fixed f16 super-scales; returns the total error.

// Squared error of one affine sub-block for integer scale `sc` and min `m`;
// writes the nearest q. Uses the dequantizer's own arithmetic:
// (d * sc) * q - (dmin * m).
double affine_sub_block_error(const float* xs, int n, int qmax, float d,
                              float dmin, int sc, int m, uint8_t* q) {
  const float step = d * static_cast<float>(sc);
  const float offset = dmin * static_cast<float>(m);
  const float inv = step > 0.0f ? 1.0f / step : 0.0f;
  double err = 0.0;
  for (int e = 0; e < n; ++e) {
    const int qe = round_even_clamp((xs[e] + offset) * inv, 0, qmax);
    q[e] = static_cast<uint8_t>(qe);
    err += square(static_cast<double>(xs[e]) -
                  (step * static_cast<float>(qe) - offset));
  }
  return err;
}

// Per sub-block, searches sc around its ideal quotient (+-1), then m around
// its own (+-1) with the best sc.
double choose_affine_integers(const float* x, const AffineKQuantShape& shape,
                              const float* scales, const float* mins,
                              AffineKQuant* out) {
  const float d = f16_to_f32(out->d);
  const float dmin = f16_to_f32(out->dmin);
  const int n = shape.sub_len;
  double total = 0.0;
  for (int j = 0; j < shape.sub_blocks; ++j) {
    const float* xs = x + j * n;
    uint8_t* q = out->q + j * n;
    const int sc0 =
        d > 0.0f ? round_even_clamp(scales[j] / d, 0, shape.scale_max) : 0;
    const int m0 =
        dmin > 0.0f ? round_even_clamp(mins[j] / dmin, 0, shape.scale_max) : 0;
    int best_sc = sc0, best_m = m0;
    double best_err =
        affine_sub_block_error(xs, n, shape.qmax, d, dmin, sc0, m0, q);
    uint8_t trial[kMaxSubLen];
    auto consider = [&](int sc, int m) {
      if (sc < 0 || sc > shape.scale_max || m < 0 || m > shape.scale_max) {
        return;
      }
      const double err =
          affine_sub_block_error(xs, n, shape.qmax, d, dmin, sc, m, trial);
      if (err < best_err) {
        best_err = err;
        best_sc = sc;
        best_m = m;
        std::memcpy(q, trial, n);
      }
    };
    consider(sc0 - 1, m0);
    consider(sc0 + 1, m0);
    const int sc1 = best_sc;
    consider(sc1, m0 - 1);
    consider(sc1, m0 + 1);
    out->sc[j] = static_cast<uint8_t>(best_sc);
    out->m[j] = static_cast<uint8_t>(best_m);
    total += best_err;
  }
  return total;
}

double choose_symmetric_integers(const float* x,
                                 const SymmetricKQuantShape& shape,
                                 const float* scales, SymmetricKQuant* out) {
  const float d = f16_to_f32(out->d);
  double total = 0.0;
  for (int j = 0; j < shape.sub_blocks; ++j) {
    const float* xs = x + j * shape.sub_len;
    const int sc0 = d > 0.0f ? round_even_clamp(scales[j] / d, -shape.scale_max,
                                                shape.scale_max)
                             : 0;
    double best_err = INFINITY;
    for (int dsc = -1; dsc <= 1; ++dsc) {
      const int sc = std::clamp(sc0 + dsc, -shape.scale_max, shape.scale_max);
      const float step = d * static_cast<float>(sc);  // (d * sc) * q
      const float inv = step != 0.0f ? 1.0f / step : 0.0f;
      int8_t q[kMaxSubLen];
      double err = 0.0;
      for (int e = 0; e < shape.sub_len; ++e) {
        const int qe = round_even_clamp(xs[e] * inv, shape.qmin, shape.qmax);
        q[e] = static_cast<int8_t>(qe);
        err +=
            square(static_cast<double>(xs[e]) - step * static_cast<float>(qe));
      }
      if (err < best_err || dsc == -1) {
        best_err = err;
        out->sc[j] = static_cast<int8_t>(sc);
        std::memcpy(out->q + j * shape.sub_len, q, shape.sub_len);
      }
    }
    total += best_err;
  }
  return total;
}

}  // namespace

void fit_affine_k_quant(const float* x, const AffineKQuantShape& shape,
                        AffineKQuant* out) {
  // Step 1.
  float scales[16];
  float mins[16];
  float max_scale = 0.0f;
  float max_min = 0.0f;
  for (int j = 0; j < shape.sub_blocks; ++j) {
    const AffineScale s =
        fit_affine_sub_block(x + j * shape.sub_len, shape.sub_len, shape.qmax);
    scales[j] = s.scale;
    mins[j] = s.min;
    max_scale = std::max(max_scale, s.scale);
    max_min = std::max(max_min, s.min);
  }
  // Step 2.
  const auto scale_max = static_cast<float>(shape.scale_max);
  out->d = f16_at_least(max_scale / scale_max);
  out->dmin = f16_at_least(max_min / scale_max);
  double err = choose_affine_integers(x, shape, scales, mins, out);

  // Step 3: x ~ D * u - Dmin * v with u = sc * q and v = m, by least squares.
  for (int refit = 0; refit < kSuperRefits; ++refit) {
    double suu = 0, suv = 0, svv = 0, sxu = 0, sxv = 0;
    for (int e = 0; e < 256; ++e) {
      const int j = e / shape.sub_len;
      const double u = static_cast<double>(out->sc[j]) * out->q[e];
      const double v = out->m[j];
      suu += u * u;
      suv += u * v;
      svv += v * v;
      sxu += x[e] * u;
      sxv += x[e] * v;
    }
    double d = 0.0;
    double dmin = f16_to_f32(out->dmin);
    const double det = suu * svv - suv * suv;
    if (svv > 0 && det > 0) {
      d = (sxu * svv - sxv * suv) / det;
      dmin = (sxu * suv - sxv * suu) / det;  // the coefficient of -v
      if (dmin < 0) {
        dmin = 0;
        d = sxu / suu;
      }
    } else if (suu > 0) {
      d = (sxu + dmin * suv) / suu;  // mins fixed (all zero or collinear)
    } else if (svv > 0) {
      dmin = -sxv / svv;  // no scales in use: only the mins matter
    } else {
      break;
    }
    if (!(d >= 0) || !(dmin >= 0)) break;
    AffineKQuant candidate = *out;
    candidate.d = f32_to_f16(static_cast<float>(d));
    candidate.dmin = f32_to_f16(static_cast<float>(dmin));
    if (candidate.d == out->d && candidate.dmin == out->dmin) break;
    const double candidate_err =
        choose_affine_integers(x, shape, scales, mins, &candidate);
    if (!(candidate_err < err)) break;
    err = candidate_err;
    *out = candidate;
  }
  // Step 4: rounding to f16 may have landed one value off the best.
  for (const bool which_d : {true, false}) {
    for (const int dir : {-1, 1}) {
      AffineKQuant candidate = *out;
      uint16_t& h = which_d ? candidate.d : candidate.dmin;
      h = f16_neighbour(h, dir);
      const double candidate_err =
          choose_affine_integers(x, shape, scales, mins, &candidate);
      if (candidate_err < err) {
        err = candidate_err;
        *out = candidate;
      }
    }
  }
}

void fit_symmetric_k_quant(const float* x, const SymmetricKQuantShape& shape,
                           SymmetricKQuant* out) {
  // Step 1.
  float scales[16];
  float max_abs_scale = 0.0f;
  for (int j = 0; j < shape.sub_blocks; ++j) {
    scales[j] = fit_symmetric_sub_block(x + j * shape.sub_len, shape.sub_len,
                                        shape.qmin, shape.qmax);
    max_abs_scale = std::max(max_abs_scale, std::fabs(scales[j]));
  }
  // Step 2.
  out->d = f16_at_least(max_abs_scale / static_cast<float>(shape.scale_max));
  double err = choose_symmetric_integers(x, shape, scales, out);

  // Step 3: x ~ D * u with u = sc * q.
  for (int refit = 0; refit < kSuperRefits; ++refit) {
    double suu = 0, sxu = 0;
    for (int e = 0; e < 256; ++e) {
      const double u =
          static_cast<double>(out->sc[e / shape.sub_len]) * out->q[e];
      suu += u * u;
      sxu += x[e] * u;
    }
    if (!(suu > 0)) break;
    const double d = sxu / suu;
    if (!(d > 0)) break;
    SymmetricKQuant candidate = *out;
    candidate.d = f32_to_f16(static_cast<float>(d));
    if (candidate.d == out->d) break;
    const double candidate_err =
        choose_symmetric_integers(x, shape, scales, &candidate);
    if (!(candidate_err < err)) break;
    err = candidate_err;
    *out = candidate;
  }
  // Step 4: rounding to f16 may have landed one value off the best.
  for (const int dir : {-1, 1}) {
    SymmetricKQuant candidate = *out;
    candidate.d = f16_neighbour(candidate.d, dir);
    const double candidate_err =
        choose_symmetric_integers(x, shape, scales, &candidate);
    if (candidate_err < err) {
      err = candidate_err;
      *out = candidate;
    }
  }
}

}  // namespace strata::reference
