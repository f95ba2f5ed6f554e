// The CUDA devices of this machine, as cudart reports them. cudart loads the
// driver (libcuda.so.1) itself at run time, so a binary linked with it starts
// on a machine without a GPU driver; there every call here returns an error
// carrying cudart's explanation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::worker {

struct CudaDevice {
  int ordinal = 0;
  std::string name;  // "NVIDIA H200"
  int cc_major = 0;  // compute capability 9.0: 9, 0
  int cc_minor = 0;
  uint64_t total_memory_bytes = 0;
  int multiprocessors = 0;
  // "GPU-8c4b1f2e-...": cudaDeviceProp.uuid as nvidia-smi writes it; the
  // same GPU under every process and ordinal (CUDA_VISIBLE_DEVICES).
  std::string uuid;
  // "compute_90": NVRTC's -arch for this device's PTX.
  std::string compute_arch() const;
};

// Every device, in ordinal order. FailedPrecondition
// "no CUDA device: cudaGetDeviceCount: <cudaGetErrorString>" when the driver or
// any device is absent (including a count of 0); Unimplemented in a build
// without CUDA.
absl::StatusOr<std::vector<CudaDevice>> list_cuda_devices();

// Device `ordinal`: FailedPrecondition "cuda:<ordinal>: ..." when there is no
// such device (naming how many there are) or none at all.
absl::StatusOr<CudaDevice> cuda_device(int ordinal);

// The driver's CUDA version (13000 for 13.0), 0 when no driver is loaded.
int cuda_driver_version();

}  // namespace strata::worker
