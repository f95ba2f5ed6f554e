// make_cuda_backend (worker/cuda/cuda_backend.h): the forward pass on the
// DeviceApi seam (device_backend.h) over device `options.device` through
// cudart (make_cuda_device_api; in a build without CUDA its error says so).
#include "worker/cuda/cuda_backend.h"

#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "worker/cuda/device_api.h"
#include "worker/cuda/device_backend.h"

namespace strata::worker {
namespace {

// Whether the environment variable `name` is set to exactly `value`.
bool switched(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string_view(v) == value;
}

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
  device.tune = !options.no_tune && !switched("STRATA_NO_TUNE", "1");
  // NAME=0 switches a kernel form off: the comparisons gpu-check.sh times,
  // and its fallbacks when a form's device tests fail (docs/gpu.md).
  // STRATA_MMA=0: every row on the matvec kernels, no tensor cores for
  // prompt slices (and no flash attention, which goes with them).
  if (switched("STRATA_MMA", "0")) device.mma_min_rows = 0;
  // STRATA_MMA_INT8=0: prompt slices on the f16 tensor-core kernel only.
  device.mma_int8 = !switched("STRATA_MMA_INT8", "0");
  // STRATA_WGMMA=0: those f16 slices on mma.sync's kernel on an sm_90
  // device too.
  device.wgmma = !switched("STRATA_WGMMA", "0");
  // STRATA_MATVEC_INT8=0: the other products on the float matvec kernel.
  device.matvec_int8 = !switched("STRATA_MATVEC_INT8", "0");
  // STRATA_MATVEC_MMA=0: its 8- and 16-column chunks on dp4a, not the
  // tensor cores.
  device.matvec_mma = !switched("STRATA_MATVEC_MMA", "0");
  // STRATA_ATTENTION_QUANTIZES=0: o's rows quantized by a launch of their
  // own (the fused launch's cross-block handoff runs only on a GPU).
  device.attention_quantizes = !switched("STRATA_ATTENTION_QUANTIZES", "0");
  // STRATA_ATTENTION_SPLIT=0: decode attention never split over blocks
  // (long contexts one block a head).
  if (switched("STRATA_ATTENTION_SPLIT", "0")) device.attention_splits = 1;
  // STRATA_MOE_SLOTS=0: a mixture's decode steps gather each used expert's
  // rows, one launch an expert, as prompt chunks do.
  device.moe_slots = !switched("STRATA_MOE_SLOTS", "0");
  // STRATA_FLASH_ATTENTION=0: prompt slices attend with the decode rows'
  // kernels.
  device.flash_attention = !switched("STRATA_FLASH_ATTENTION", "0");
  // STRATA_GRAPHS=0: decode steps launched one by one, never replayed from
  // a captured graph.
  device.graphs = !switched("STRATA_GRAPHS", "0");
  device.kernel_profile_path = options.kernel_profile_path;
  if (const char* profile = std::getenv("STRATA_KERNEL_PROFILE");
      device.kernel_profile_path.empty() && profile != nullptr) {
    device.kernel_profile_path = profile;
  }
  return make_device_backend(std::move(model), hp, range, device, *std::move(api));
}

}  // namespace strata::worker
