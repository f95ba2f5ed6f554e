// The kernels the device backend (device_backend.h) launches: each source of
// worker/cuda/kernels with the compile options it is built with, and the
// thread counts its launches use. One list, so that the emulation
// (tests/cuda/emulated_step_kernels.h) registers exactly these builds.
//
// The matrix x columns kernel is built for 1, 2, 4, 8 and 16 columns: a step
// of n rows runs as chunks of 16, then one chunk of each power of two in
// what is left (n = 21: 16 + 4 + 1), so every weight is read
// ceil(n / 16) + popcount(n % 16) times. Each is built for 1, 2 and 4 warps
// a row (split-K, matvec_source.h); the tuner (kernel_tuner.h) picks one
// per matrix.
#pragma once

#include <array>

#include "model/ggml_type.h"
#include "worker/cuda/device_api.h"

namespace strata::worker::cuda_kernels {

inline constexpr std::array<int, 5> kStepMatvecColumns = {1, 2, 4, 8, 16};
inline constexpr std::array<int, 3> kStepRowWarps = {1, 2, 4};
// The matrix types, each built alone (-DSTRATA_ONE_TYPE: NVRTC compiles
// only what a model uses).
inline constexpr std::array<GgmlType, 11> kStepMatvecTypes = {
    GgmlType::kF32,  GgmlType::kF16,   GgmlType::kQ4_0, GgmlType::kQ4_1,
    GgmlType::kQ5_0, GgmlType::kQ5_1,  GgmlType::kQ8_0, GgmlType::kMXFP4,
    GgmlType::kQ4_K, GgmlType::kQ5_K,  GgmlType::kQ6_K};
// The index of `type` in kStepMatvecTypes, or kStepMatvecTypes.size().
size_t step_matvec_type_index(GgmlType type);
// The matrix kernel's builds take blocks of up to kStepMatvecThreads;
// kStepMatvecBlocks are the block sizes a launch may choose (the rows a
// block: threads / 32 / ROW_WARPS; the same sums whatever the choice), the
// tuner picking one per matrix with its split; kStepMatvecBlock without it.
inline constexpr int kStepMatvecThreads = 256;
inline constexpr std::array<int, 3> kStepMatvecBlocks = {64, 128, 256};
inline constexpr int kStepMatvecBlock = 128;
static_assert([] {
  for (const int t : kStepMatvecBlocks) {
    if (t % 32 != 0 || t > kStepMatvecThreads) return false;
  }
  return kStepMatvecBlock % 32 == 0 && kStepMatvecBlock <= kStepMatvecThreads;
}(), "a launch's block is a multiple of 32 within the builds' THREADS (matvec.cuh)");
inline constexpr int kStepRmsNormThreads = 256;
inline constexpr int kStepMmaThreads = 128;
inline constexpr int kStepWgmmaThreads = 256;
// The head sizes the flash-attention kernel is built for (dk = dv; one build
// each, -DHEAD_DIM); a model of another head size attends with the
// attention.cuh kernels only.
inline constexpr std::array<int, 6> kStepFlashHeadDims = {32, 64, 80, 96, 128, 256};
// The strata_round_rows kind (sources.h) of the activations `weight`
// pairs with, as the cpu backend rounds them before a product
// (reference::ops::activation_type): F16 -> kRoundF16, Q4_0, Q5_0, Q8_0 and
// MXFP4 -> kRoundQ8_0, Q4_1 and Q5_1 -> kRoundQ8_1, the K-quants ->
// kRoundQ8_K, F32 -> kRoundNone.
int round_kind(GgmlType weight);
// The index of `head_dim` in kStepFlashHeadDims, or kStepFlashHeadDims.size().
size_t step_flash_index(int head_dim);
inline constexpr int kStepAttentionThreads = 128;
inline constexpr int kStepElementwiseThreads = 256;
inline constexpr int kStepSampleThreads = 256;

struct StepSources {
  // [t][w][i]: the type kStepMatvecTypes[t] alone, ROW_WARPS =
  // kStepRowWarps[w], NCOLS = kStepMatvecColumns[i]; get_rows is in [t][0][0].
  std::array<std::array<std::array<KernelSource, kStepMatvecColumns.size()>,
                        kStepRowWarps.size()>,
             kStepMatvecTypes.size()>
      matvec;
  // [t]: the tensor-core kernel of kStepMatvecTypes[t] alone (mma_source.h;
  // empty for F32 and F16, which have none).
  std::array<KernelSource, kStepMatvecTypes.size()> mma;
  // [t]: the same on sm_90's warpgroup instructions (wgmma_source.h; built
  // for compute capability 9.0 only; empty for F32 and F16).
  std::array<KernelSource, kStepMatvecTypes.size()> wgmma;
  // [i]: flash attention of prompt chunks (flash_attention_source.h) for
  // HEAD_DIM kStepFlashHeadDims[i].
  std::array<KernelSource, kStepFlashHeadDims.size()> flash;
  KernelSource rms_norm;
  KernelSource elementwise;
  KernelSource attention;
  KernelSource sample;  // the greedy picks (sample.cuh)
};

// The sources with their options (built once, alive for the process).
const StepSources& step_sources();

}  // namespace strata::worker::cuda_kernels
