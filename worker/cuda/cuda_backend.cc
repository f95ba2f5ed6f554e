// make_cuda_backend (worker/cuda/cuda_backend.h): the forward pass on the
// DeviceApi seam (device_backend.h) over device `options.device` through
// cudart (make_cuda_device_api; in a build without CUDA its error says so).
#include "worker/cuda/cuda_backend.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "kernels/cpu/env_switch.h"
#include "worker/cuda/device_api.h"
#include "worker/cuda/device_backend.h"

namespace strata::worker {
namespace {

// Whether the environment turns the switch `name` off (0, false, no, off:
// kernels::env_switch).
bool off(const char* name) { return kernels::env_switch(name) == false; }

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(
    std::shared_ptr<const gguf::GgufModel> model,
    const arch::Hyperparameters& hp, BlockRange range,
    const CudaBackendOptions& options) {
  absl::StatusOr<std::unique_ptr<DeviceApi>> api =
      make_cuda_device_api(options.device, options.kernel_cache_dir);
  if (!api.ok()) return api.status();
  DeviceBackendOptions device;
  device.max_batch = options.max_batch;
  device.tune = !options.no_tune && kernels::env_switch("STRATA_NO_TUNE") != true;
  // NAME=0 (or false, no, off) switches a kernel form off: the comparisons
  // gpu-check.sh times, and its fallbacks when a form's device tests fail
  // (docs/gpu.md).
  // STRATA_MMA=0: every row on the matvec kernels, no tensor cores for
  // prompt slices (and no flash attention, which goes with them).
  if (off("STRATA_MMA")) device.mma_min_rows = 0;
  // STRATA_MMA_INT8=0: prompt slices on the f16 tensor-core kernel only.
  device.mma_int8 = !off("STRATA_MMA_INT8");
  // STRATA_WGMMA=0: those f16 slices on mma.sync's kernel on an sm_90
  // device too.
  device.wgmma = !off("STRATA_WGMMA");
  // STRATA_MATVEC_INT8=0: the other products on the float matvec kernel.
  device.matvec_int8 = !off("STRATA_MATVEC_INT8");
  // STRATA_MATVEC_MMA=0: its 8- and 16-column chunks on dp4a, not the
  // tensor cores.
  device.matvec_mma = !off("STRATA_MATVEC_MMA");
  // STRATA_ATTENTION_QUANTIZES=0: o's rows quantized by a launch of their
  // own (the fused launch's cross-block handoff runs only on a GPU).
  device.attention_quantizes = !off("STRATA_ATTENTION_QUANTIZES");
  // STRATA_ATTENTION_SPLIT=0: decode attention never split over blocks
  // (long contexts one block a head).
  if (off("STRATA_ATTENTION_SPLIT")) device.attention_splits = 1;
  // STRATA_MOE_SLOTS=0: a mixture's decode steps gather each used expert's
  // rows, one launch an expert, as prompt chunks do.
  device.moe_slots = !off("STRATA_MOE_SLOTS");
  // STRATA_FLASH_ATTENTION=0: prompt slices attend with the decode rows'
  // kernels.
  device.flash_attention = !off("STRATA_FLASH_ATTENTION");
  // STRATA_GRAPHS=0: decode steps launched one by one, never replayed from
  // a captured graph.
  device.graphs = !off("STRATA_GRAPHS");
  device.kernel_profile_path = options.kernel_profile_path;
  if (const char* profile = std::getenv("STRATA_KERNEL_PROFILE");
      device.kernel_profile_path.empty() && profile != nullptr) {
    device.kernel_profile_path = profile;
  }
  return make_device_backend(std::move(model), hp, range, device, *std::move(api));
}

}  // namespace strata::worker
