// list_cuda_devices over cudart (worker/cuda/cuda_device.h).
#include "worker/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strata::worker {

namespace {

// nvidia-smi's form: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (16 bytes).
std::string format_gpu_uuid(const unsigned char* b) {
  std::string out = "GPU-";
  static const char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[b[i] >> 4];
    out += kHex[b[i] & 15];
  }
  return out;
}

}  // namespace

std::string CudaDevice::compute_arch() const {
  return absl::StrCat("compute_", cc_major * 10 + cc_minor);
}

absl::StatusOr<std::vector<CudaDevice>> list_cuda_devices() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device: cudaGetDeviceCount: ", cudaGetErrorString(e)));
  }
  if (n <= 0) {
    return absl::FailedPreconditionError(
        "no CUDA device: cudaGetDeviceCount found 0");
  }
  std::vector<CudaDevice> devices;
  devices.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    const cudaError_t pe = cudaGetDeviceProperties(&p, i);
    if (pe != cudaSuccess) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cuda:", i, ": cudaGetDeviceProperties: ", cudaGetErrorString(pe)));
    }
    CudaDevice d;
    d.ordinal = i;
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.total_memory_bytes = p.totalGlobalMem;
    d.multiprocessors = p.multiProcessorCount;
    d.uuid = format_gpu_uuid(reinterpret_cast<const unsigned char*>(p.uuid.bytes));
    devices.push_back(std::move(d));
  }
  return devices;
}

absl::StatusOr<CudaDevice> cuda_device(int ordinal) {
  absl::StatusOr<std::vector<CudaDevice>> all = list_cuda_devices();
  if (!all.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda:", ordinal, ": ", all.status().message()));
  }
  if (ordinal < 0 || ordinal >= static_cast<int>(all->size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda:", ordinal, ": no such device (this machine has ", all->size(),
        all->size() == 1 ? " CUDA device, cuda:0)" : " CUDA devices)"));
  }
  return (*all)[static_cast<size_t>(ordinal)];
}

int cuda_driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) return 0;
  return v;
}

}  // namespace strata::worker
