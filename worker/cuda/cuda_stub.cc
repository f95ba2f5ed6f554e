// A build without CUDA (STRATA_CUDA=OFF, or AUTO without nvcc;
// cmake/cuda.cmake): the functions of worker/cuda/ say so, so that callers
// compile and link unconditionally.
#include "absl/status/status.h"
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/device_api.h"

namespace strata::worker {
namespace {

absl::Status without_cuda() {
  return absl::UnimplementedError(
      "strata was built without CUDA (STRATA_CUDA=OFF or no nvcc found)");
}

}  // namespace

std::string CudaDevice::compute_arch() const {
  return "compute_" + std::to_string(cc_major * 10 + cc_minor);
}

absl::StatusOr<std::vector<CudaDevice>> list_cuda_devices() {
  return without_cuda();
}

absl::StatusOr<CudaDevice> cuda_device(int ordinal) {
  (void)ordinal;
  return without_cuda();
}

int cuda_driver_version() { return 0; }

absl::StatusOr<std::unique_ptr<DeviceApi>> make_cuda_device_api(int ordinal,
                                                                std::string kernel_cache_dir) {
  (void)ordinal, (void)kernel_cache_dir;
  return without_cuda();
}

}  // namespace strata::worker
