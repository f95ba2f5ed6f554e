// make_cuda_backend (worker/cuda/cuda_backend.h): the forward pass on the
// DeviceApi seam (device_backend.h) over device `options.device` through
// cudart (make_cuda_device_api; in a build without CUDA its error says so).
#include "worker/cuda/cuda_backend.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "worker/cuda/device_api.h"
#include "worker/cuda/device_backend.h"

namespace strata::worker {

absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(
    std::shared_ptr<const gguf::GgufModel> model,
    const arch::Hyperparameters& hp, BlockRange range,
    const CudaBackendOptions& options) {
  absl::StatusOr<std::unique_ptr<DeviceApi>> api =
      make_cuda_device_api(options.device, options.kernel_cache_dir);
  if (!api.ok()) return api.status();
  DeviceBackendOptions device;
  device.max_batch = options.max_batch;
  const char* no_tune = std::getenv("STRATA_NO_TUNE");
  device.tune = !options.no_tune && !(no_tune != nullptr && std::string(no_tune) == "1");
  // STRATA_MMA_INT8=0: prompt slices on the f16 tensor-core kernel only
  // (the comparison gpu-check.sh times).
  const char* int8 = std::getenv("STRATA_MMA_INT8");
  device.mma_int8 = !(int8 != nullptr && std::string(int8) == "0");
  // STRATA_WGMMA=0: those f16 slices on mma.sync's kernel on an sm_90
  // device too (the comparison gpu-check.sh times).
  const char* wgmma = std::getenv("STRATA_WGMMA");
  device.wgmma = !(wgmma != nullptr && std::string(wgmma) == "0");
  // STRATA_MATVEC_INT8=0: the other products on the float matvec kernel
  // (the decode comparison gpu-check.sh times).
  const char* matvec_int8 = std::getenv("STRATA_MATVEC_INT8");
  device.matvec_int8 = !(matvec_int8 != nullptr && std::string(matvec_int8) == "0");
  // STRATA_MATVEC_MMA=0: its 8- and 16-column chunks on dp4a, not the
  // tensor cores (the batched-decode comparison gpu-check.sh times).
  const char* matvec_mma = std::getenv("STRATA_MATVEC_MMA");
  device.matvec_mma = !(matvec_mma != nullptr && std::string(matvec_mma) == "0");
  // STRATA_ATTENTION_QUANTIZES=0: o's rows quantized by a launch of their
  // own (the fused launch's cross-block handoff runs only on a GPU).
  const char* attention_q = std::getenv("STRATA_ATTENTION_QUANTIZES");
  device.attention_quantizes = !(attention_q != nullptr && std::string(attention_q) == "0");
  device.kernel_profile_path = options.kernel_profile_path;
  if (const char* profile = std::getenv("STRATA_KERNEL_PROFILE");
      device.kernel_profile_path.empty() && profile != nullptr) {
    device.kernel_profile_path = profile;
  }
  return make_device_backend(std::move(model), hp, range, device, *std::move(api));
}

}  // namespace strata::worker
