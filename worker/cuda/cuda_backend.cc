// make_cuda_backend with CUDA built (worker/cuda/cuda_backend.h): the device
// check, and an honest error until the forward pass exists.
#include "worker/cuda/cuda_backend.h"

#include "absl/status/status.h"
#include "worker/cuda/cuda_device.h"

namespace strata::worker {

absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(
    std::shared_ptr<const gguf::GgufModel> model,
    const arch::Hyperparameters& hp, BlockRange range,
    const CudaBackendOptions& options) {
  (void)model, (void)hp, (void)range;
  absl::StatusOr<CudaDevice> device = cuda_device(options.device);
  if (!device.ok()) return device.status();
  return absl::UnimplementedError(
      "the cuda backend's forward pass is not written yet (issue 32)");
}

}  // namespace strata::worker
