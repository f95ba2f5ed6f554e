#include "worker/make_backend.h"

#include <utility>

namespace strata::worker {

absl::StatusOr<std::unique_ptr<Backend>> make_backend(
    const BackendChoice& choice, std::shared_ptr<const gguf::GgufModel> model,
    const arch::Hyperparameters& hp, BlockRange range,
    const CpuBackendOptions& options) {
  if (choice.kind == BackendChoice::Kind::kCuda) {
    CudaBackendOptions cuda;
    cuda.device = choice.device;
    cuda.max_batch = options.max_batch;
    cuda.no_tune = options.no_tune;
    return make_cuda_backend(std::move(model), hp, range, cuda);
  }
  return make_cpu_backend(std::move(model), hp, range, options);
}

}  // namespace strata::worker
