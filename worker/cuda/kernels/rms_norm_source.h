// NVRTC source of the RMSNorm kernel (worker/cuda/nvrtc_compiler.h compiles
// it at load): y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, one block
// per row, as kernels/cpu/reference/ops/elementwise.h's rms_norm (which sums
// the squares in double; this sums in float per thread, then across the
// block, so results agree to about 1e-6 relative).
//
// Launch: grid (n_rows), block (kRmsNormThreads); arguments
// (const float* x [n_rows][dim], const float* weight [dim],
//  float* y [n_rows][dim], int dim, float eps). y may equal x.
#pragma once

namespace strata::worker::cuda_kernels {

inline constexpr const char* kRmsNormEntry = "strata_rms_norm";
// x += delta, then y = RMSNorm(x) * weight (arguments (float* x, const
// float* delta, const float* weight, float* y, int dim, float eps)): the
// bits of strata_add then strata_rms_norm, one pass.
inline constexpr const char* kAddRmsNormEntry = "strata_add_rms_norm";
// The same two, then y as elementwise.cuh's strata_quantize_rows makes it
// (quantize.cuh: the rows the int8 kernels take), in the same launch:
// arguments theirs, then (signed char* q, float* d, float* sums, int kind),
// kind 2, 3 or 4, dim whole units of it.
inline constexpr const char* kRmsNormQuantizeEntry = "strata_rms_norm_quantize";
inline constexpr const char* kAddRmsNormQuantizeEntry = "strata_add_rms_norm_quantize";
inline constexpr int kRmsNormThreads = 256;  // -DTHREADS, a multiple of 32

// The source: worker/cuda/kernels/quantize.cuh and rms_norm.cuh, embedded
// at build time (cmake/embed_source.cmake); tests/cuda/
// emulated_step_kernels.cc also compiles them for the CPU.
inline constexpr const char* kRmsNormSource =
#include "worker/cuda/kernels/grid.cuh.inc"
#include "worker/cuda/kernels/quantize.cuh.inc"
#include "worker/cuda/kernels/rms_norm.cuh.inc"
    ;

}  // namespace strata::worker::cuda_kernels
