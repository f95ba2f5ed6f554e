// The fixture of the device backend's tests (device_backend_test.cc: the
// forward pass against the cpu backend, batches, splits, refusals;
// device_backend_steps_test.cc: decode steps from graphs, picks on the
// device; top-k candidates there; device_backend_tuner_test.cc: the tuner;
// device_backend_launches_test.cc: what a step launches, on the emulation
// alone): every case twice, on the CPU emulation of the device
// (tests/cuda/emulated_step_kernels.h: the kernel sources compiled for the
// host), which runs everywhere, and on a GPU (make_cuda_device_api(0):
// NVRTC, cudart), which skips, saying "no CUDA device: ...", without one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "tests/model/gguf_test_util.h"
#include "worker/backend.h"
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/device_api.h"
#include "worker/cuda/device_backend.h"

namespace strata::worker::device_test {

// A model and its hyperparameters (both empty after a failure, which the
// test has been told of).
struct Loaded {
  std::shared_ptr<const gguf::GgufModel> model;
  arch::Hyperparameters hp;
};
Loaded open_model(const std::string& path);

// "emulated" or "cuda": the device the backends of a test run on.
extern std::string device_kind;

// A DeviceApi of device_kind (the test has checked a GPU exists for "cuda").
std::unique_ptr<DeviceApi> new_api();

// The compute capability new_api()'s emulated apis report (80: mma.sync's
// kernels; 90: a backend takes sm_90's wgmma kernels too). A GPU reports
// its own.
extern int emulated_compute_capability;
// Sets emulated_compute_capability for a scope.
class EmulatedComputeCapability {
 public:
  explicit EmulatedComputeCapability(int cc) : saved_(emulated_compute_capability) {
    emulated_compute_capability = cc;
  }
  ~EmulatedComputeCapability() { emulated_compute_capability = saved_; }
  EmulatedComputeCapability(const EmulatedComputeCapability&) = delete;
  EmulatedComputeCapability& operator=(const EmulatedComputeCapability&) = delete;

 private:
  int saved_;
};

// Sets device_kind; on "cuda" without a device, skips saying why.
#define STRATA_ON_DEVICE(kind)                                                \
  do {                                                                        \
    device_kind = (kind);                                                     \
    if (device_kind == "cuda") {                                              \
      auto devices_ = list_cuda_devices();                                    \
      if (!devices_.ok()) GTEST_SKIP() << devices_.status().message();        \
    }                                                                         \
  } while (0)

// The options of the tests: one warp a row (or row_warps for every
// matrix), no tuning; slices of mma_min_rows rows or more on the tensor
// cores.
DeviceBackendOptions test_options(int max_batch = 32, int row_warps = 0,
                                  int mma_min_rows = 64);

// Backends of blocks `range` of m (nullptr after a failure the test has
// been told of): on device_kind, and the cpu backend untuned.
std::unique_ptr<Backend> device_backend(const Loaded& m, BlockRange range,
                                        const DeviceBackendOptions& o);
std::unique_ptr<Backend> device_backend(const Loaded& m, BlockRange range, int max_batch = 32,
                                        int row_warps = 0);
std::unique_ptr<Backend> cpu_backend(const Loaded& m, BlockRange range, int max_batch = 32);

// Runs `prompt` then the tokens `next` for one sequence `seq` alone on b
// (added with a context of n_ctx); returns every step's logits (the test is
// told of a failure).
std::vector<std::vector<float>> logits_alone(Backend& b, int seq, std::vector<int32_t> prompt,
                                             const std::vector<int32_t>& next, int n_ctx = 64);

// The logits of one forward step of `slices` (the test is told of a
// failure).
std::vector<float> forward_logits(Backend& b, const std::vector<int32_t>& tokens,
                                  const std::vector<ForwardSlice>& slices);

// ../shared/models/stories260K.gguf.
std::string stories_path();
// The tiny random-weight model of `name` ("mixtral", "gpt-oss", ...) that
// scripts/make-test-models.sh makes: models_dir()/tiny/tiny-NAME.gguf
// (absent when it was not made).
std::string tiny_model_path(const std::string& name);
// Declares `path` = tiny_model_path(name), or skips the test saying the
// model is absent.
#define STRATA_TINY_MODEL_OR_SKIP(path, name)                                        \
  const std::string path = tiny_model_path(name);                                    \
  if (!std::filesystem::exists(path)) {                                              \
    GTEST_SKIP() << path << " absent (scripts/make-test-models.sh makes it)";        \
  }

// Parameterized by the device kind; instantiated on "emulated" and "cuda".
class DeviceBackend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { STRATA_ON_DEVICE(GetParam()); }
};

// A copy of the GGUF at `in` whose tensors are converted to the type
// `type_of` gives each (its own: copied as they are), through f32
// (reference dequantize_row, then quantize_row); `edit`, when given, then
// changes each tensor's bytes.
using TensorEdit = std::function<void(const gguf::TensorInfo&, std::span<uint8_t>)>;
absl::Status write_converted_copy(const std::string& in, const std::string& out,
                                  const std::function<GgmlType(const gguf::TensorInfo&)>& type_of,
                                  const TensorEdit& edit = nullptr);

// Every matrix (a 2-D tensor of several rows, or experts' 3-D one) as
// `type` where its rows are whole blocks of it; the rest as they are.
std::function<GgmlType(const gguf::TensorInfo&)> matrices_as(GgmlType type);

// stories260K with blk.1.attn_k.weight as BF16 (a type the kernels do not
// read), written in `dir`; its path.
std::string stories_with_a_bf16_matrix(gguf::testing::TempDir& dir);

// A random-weight tiny llama (model/synthetic_model.h, 256 wide) written in
// `dir` with its matrices in `type_name` ("F32", "Q4_K_M": the
// synthesizer's mix of Q4_K and Q6_K, or a type the F32 matrices are
// converted to); its path.
std::string tiny_llama(gguf::testing::TempDir& dir, const std::string& type_name);

}  // namespace strata::worker::device_test
