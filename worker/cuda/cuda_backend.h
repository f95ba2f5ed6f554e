// The cuda implementation of Backend (worker/backend.h), issue 32: one
// shard of a model on one GPU, its weights and KV caches in device memory,
// its kernels NVRTC sources compiled at load for the device
// (worker/cuda/nvrtc_compiler.h, cached on disk). The forward pass is
// make_device_backend's (device_backend.h: what it runs and refuses) on
// cudart's DeviceApi (make_cuda_device_api). Built without CUDA
// (STRATA_CUDA=OFF, or AUTO without nvcc, cmake/cuda.cmake), it returns
// Unimplemented saying that, so callers compile and link either way.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "worker/backend.h"

namespace strata::worker {

struct CudaBackendOptions {
  int device = 0;       // CUDA device ordinal (`backend: cuda:N`)
  int max_batch = 512;  // rows per forward()
  // Where compiled kernels (PTX) are cached; empty:
  // $HOME/.cache/strata/cuda-kernels (NvrtcCompiler).
  std::string kernel_cache_dir;
  // True: the matrix kernels' defaults, no tuning (as the cpu backend's
  // no_tune); false tunes (worker/cuda/kernel_tuner.h) unless
  // STRATA_NO_TUNE=1.
  bool no_tune = false;
  // DeviceBackendOptions::kernel_profile_path (diagnostics); empty: the
  // environment's STRATA_KERNEL_PROFILE, if any (how `strata speed` asks).
  std::string kernel_profile_path;
};

// Errors: Unimplemented "strata was built without CUDA (STRATA_CUDA=OFF or no
// nvcc found)" in a build without CUDA; FailedPrecondition naming the device
// and cudart's error when device `options.device` cannot be used ("cuda:1:
// no CUDA device: ..."); then make_device_backend's (a family, recipe step
// or matrix type the kernels do not run yet: Unimplemented naming it).
absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(
    std::shared_ptr<const gguf::GgufModel> model,
    const arch::Hyperparameters& hp, BlockRange range,
    const CudaBackendOptions& options);

// A backend name of the worker config and `strata run --backend`: "cpu",
// "cuda" (= device 0) or "cuda:N" (N a device ordinal, 0 to 1023).
struct BackendChoice {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int device = 0;  // kCuda only
};
// InvalidArgument quoting the text for anything else ("cuda:", "cuda:x",
// "cuda:-1", "gpu").
absl::StatusOr<BackendChoice> parse_backend_choice(std::string_view text);

}  // namespace strata::worker
