// make_backend: the Backend a BackendChoice names (worker/cuda/cuda_backend.h:
// "cpu", "cuda", "cuda:N"), for blocks `range` of `model`. The one place the
// worker's stage, `strata run` and `strata speed` turn a choice into a
// backend.
//   cpu:  make_cpu_backend(model, hp, range, options);
//   cuda: make_cuda_backend on choice.device, with options.max_batch rows a
//         forward() (the CPU-only options, threads, ISA, KV type, are not
//         the cuda backend's).
// Errors: those of the backend made.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "worker/backend.h"
#include "worker/cuda/cuda_backend.h"

namespace strata::worker {

absl::StatusOr<std::unique_ptr<Backend>> make_backend(
    const BackendChoice& choice, std::shared_ptr<const gguf::GgufModel> model,
    const arch::Hyperparameters& hp, BlockRange range,
    const CpuBackendOptions& options);

}  // namespace strata::worker
