#include "worker/cuda/step_kernels.h"

#include "kernels/cpu/reference/ops/matmul.h"

#include <string>
#include <string_view>

#include "worker/cuda/kernels/flash_attention_source.h"
#include "worker/cuda/kernels/matvec_source.h"
#include "worker/cuda/kernels/mma_source.h"
#include "worker/cuda/kernels/rms_norm_source.h"
#include "worker/cuda/kernels/wgmma_source.h"
#include "worker/backend.h"
#include "worker/cuda/kernels/sources.h"

namespace strata::worker::cuda_kernels {

static_assert(kStepMmaThreads == kMmaThreads, "mma.cuh is written for 4 warps a block");
static_assert(kStepWgmmaThreads == kWgmmaThreads, "wgmma.cuh is written for 2 warpgroups a block");

size_t step_matvec_type_index(GgmlType type) {
  size_t t = 0;
  while (t < kStepMatvecTypes.size() && kStepMatvecTypes[t] != type) ++t;
  return t;
}

int round_kind(GgmlType weight) {
  switch (reference::ops::activation_type(weight)) {
    case GgmlType::kF16: return kRoundF16;
    case GgmlType::kQ8_0: return kRoundQ8_0;
    case GgmlType::kQ8_1: return kRoundQ8_1;
    case GgmlType::kQ8_K: return kRoundQ8_K;
    default: return kRoundNone;
  }
}

size_t step_flash_index(int head_dim) {
  size_t i = 0;
  while (i < kStepFlashHeadDims.size() && kStepFlashHeadDims[i] != head_dim) ++i;
  return i;
}

const StepSources& step_sources() {
  static const StepSources* sources = [] {
    auto* s = new StepSources;
    const std::string threads = "-DTHREADS=" + std::to_string(kStepMatvecThreads);
    for (size_t t = 0; t < kStepMatvecTypes.size(); ++t) {
      // "strata_matvec_q4_k" -> -DSTRATA_TYPE_q4_k
      const std::string type(
          matvec_entry(kStepMatvecTypes[t]).substr(std::string_view("strata_matvec_").size()));
      for (size_t w = 0; w < kStepRowWarps.size(); ++w) {
        for (size_t i = 0; i < kStepMatvecColumns.size(); ++i) {
          s->matvec[t][w][i] = KernelSource{
              "matvec.cu",
              matvec_program(),
              {threads, "-DNCOLS=" + std::to_string(kStepMatvecColumns[i]),
               "-DROW_WARPS=" + std::to_string(kStepRowWarps[w]),
               "-DWARP_ROWS=" + std::to_string(matvec_i8_warp_rows(kStepMatvecColumns[i])),
               "-DSTRATA_ONE_TYPE",
               "-DSTRATA_TYPE_" + type, "--std=c++17", "--fmad=false"}};
        }
      }
    }
    for (size_t t = 0; t < kStepMatvecTypes.size(); ++t) {
      if (mma3_entry(kStepMatvecTypes[t]).empty()) continue;
      const std::string type(
          matvec_entry(kStepMatvecTypes[t]).substr(std::string_view("strata_matvec_").size()));
      s->mma[t] = KernelSource{"mma.cu",
                               mma_program(),
                               {"-DTHREADS=" + std::to_string(kStepMmaThreads),
                                "-DSTRATA_MATVEC_NO_ENTRIES", "-DSTRATA_ONE_TYPE",
                                "-DSTRATA_TYPE_" + type, "--std=c++17", "--fmad=false"}};
      s->wgmma[t] = KernelSource{"wgmma.cu",
                                 wgmma_program(),
                                 {"-DTHREADS=" + std::to_string(kStepWgmmaThreads),
                                  "-DSTRATA_MATVEC_NO_ENTRIES", "-DSTRATA_ONE_TYPE",
                                  "-DSTRATA_TYPE_" + type, "--std=c++17", "--fmad=false"}};
    }
    static_assert(kStepMmaThreads == kFlashAttentionThreads);
    for (size_t i = 0; i < kStepFlashHeadDims.size(); ++i) {
      s->flash[i] = KernelSource{"flash_attention.cu",
                                 flash_attention_program(),
                                 {"-DTHREADS=" + std::to_string(kFlashAttentionThreads),
                                  "-DHEAD_DIM=" + std::to_string(kStepFlashHeadDims[i]),
                                  "--std=c++17"}};
    }
    s->rms_norm = KernelSource{"rms_norm.cu", kRmsNormSource,
                               {"-DTHREADS=" + std::to_string(kStepRmsNormThreads)}};
    s->elementwise = KernelSource{"elementwise.cu", kElementwiseSource, {}};
    // --fmad=false: strata_moe_route's softmax and sigmoid round each
    // product as the reference does (no multiply-add contracted).
    s->sample = KernelSource{"sample.cu", kSampleSource,
                             {"-DTHREADS=" + std::to_string(kStepSampleThreads),
                              "-DSTRATA_TOP_K_MAX=" + std::to_string(kMaxTopK), "--fmad=false"}};
    s->attention = KernelSource{"attention.cu", kAttentionSource,
                                {"-DTHREADS=" + std::to_string(kStepAttentionThreads)}};
    return s;
  }();
  return *sources;
}

}  // namespace strata::worker::cuda_kernels
