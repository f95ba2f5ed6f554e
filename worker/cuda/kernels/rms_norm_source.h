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
inline constexpr int kRmsNormThreads = 256;  // -DTHREADS, a multiple of 32

// The source: worker/cuda/kernels/rms_norm.cuh, embedded at build time
// (cmake/embed_source.cmake); tests/cuda/rms_norm_emulation_test.cc also
// compiles it for the CPU.
inline constexpr const char* kRmsNormSource =
#include "worker/cuda/kernels/rms_norm.cuh.inc"
    ;

}  // namespace strata::worker::cuda_kernels
