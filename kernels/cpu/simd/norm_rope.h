// RMSNorm and the RoPE rotation vectorised for AVX2, the same ops as
// reference::ops::rms_norm and reference::ops::rope_rotate
// (kernels/cpu/reference/ops/elementwise.h: formulas, layouts, sources).
//
//   rms_norm     y = x / sqrt(mean(x^2) + eps) * weight. The squares are
//                f32 products summed in double as ggml's rms_norm sums them,
//                but in 4 double lanes x 2 accumulators instead of one
//                running sum; a different summation order in double moves
//                the f32 mean by at most an ulp, and in practice not at all
//                (tests/kernels/simd hold it to 1 ulp of the reference).
//                The scaling is the reference's two f32 products, so equal
//                means give bit-equal outputs.
//   add_rms_norm the residual add x += delta (reference::ops::add) and, when
//                y is given, rms_norm of the sum, in one pass over each row.
//   rope_rotate  bit for bit the reference: the same products and sums per
//                pair (no fused multiply-add: this file is compiled with
//                -ffp-contract=off), 8 pairs per vector for both pair orders.
//
// Threads: rows (tokens) split over `pool`; a decode step's single row runs
// on the caller. Requires norm_rope_supported() (AVX2).
#pragma once

#include <cstdint>

#include "kernels/cpu/base/op_types.h"
#include "kernels/cpu/base/thread_pool.h"

namespace strata::kernels::simd {

bool norm_rope_supported();

// As reference::ops::rms_norm: x, y [n_rows][dim] (y may alias x),
// weight [dim] or nullptr.
void rms_norm(const float* x, const float* weight, int64_t n_rows, int64_t dim,
              float eps, float* y, ThreadPool& pool);

// x += delta, then y = rms_norm(x) (as above) unless y is nullptr: x,
// delta, y [n_rows][dim] (delta may not alias x or y; y may not alias x),
// weight [dim] or nullptr. The sums are bit for bit reference::ops::add.
void add_rms_norm(float* x, const float* delta, const float* weight, int64_t n_rows,
                  int64_t dim, float eps, float* y, ThreadPool& pool);

// As reference::ops::rope_rotate: x [n_tokens][n_heads][head_dim] in
// place, cs [n_tokens][n_rot/2][2] from reference::ops::rope_angles.
void rope_rotate(float* x, int64_t n_tokens, int n_heads, int head_dim,
                 RopeOrder order, int n_rot, const float* cs, ThreadPool& pool);

}  // namespace strata::kernels::simd
