// The fixture of the kernel tests (kernels_matrix_test.cc: the matrix
// kernels; kernels_test.cc: the rest): the kernels of worker/cuda/kernels
// through the DeviceApi seam (worker/cuda/device_api.h), every case twice:
// on the CPU emulation (tests/cuda/emulated_device_api.h: the same sources
// compiled for the host, a coroutine a CUDA thread), which runs everywhere,
// and on the GPU (make_cuda_device_api(0): NVRTC, cudart), which skips,
// saying "no CUDA device: ...", without one (kernels_test.cc instantiates
// both). Each against kernels/cpu/reference, with the bound its comment
// gives.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/base/op_types.h"
#include "kernels/cpu/base/thread_pool.h"
#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/reference/ops/attention.h"
#include "kernels/cpu/reference/ops/elementwise.h"
#include "kernels/cpu/reference/ops/swiglu_oai.h"
#include "kernels/cpu/reference/quantize.h"
#include "model/ggml_type.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/emulated_device_api.h"
#include "tests/cuda/emulated_step_kernels.h"
#include "tests/cuda/emulated_step_kernels.h"
#include "worker/cuda/device_api.h"
#include "worker/cuda/kernels/matvec_source.h"
#include "worker/cuda/kernels/flash_attention_source.h"
#include "worker/cuda/kernels/mma_source.h"
#include "worker/cuda/kernels/wgmma_source.h"
#include "worker/cuda/kernels/rms_norm_source.h"
#include "worker/cuda/kernels/sources.h"
#include "worker/cuda/step_kernels.h"

// The host builds, with the options of the sources below.
namespace strata::worker::host {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
namespace matvec1 {
using namespace strata::cuda_emulation;
#define THREADS 128
#define NCOLS 1
#include "worker/cuda/kernels/matvec.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
}  // namespace matvec1
namespace matvec3 {  // split-K: 4 warps a row; the int8 form 3 rows a warp
using namespace strata::cuda_emulation;
#define NCOLS 3
#define ROW_WARPS 4
#define WARP_ROWS 3
#include "worker/cuda/kernels/matvec.cuh"
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
}  // namespace matvec3
namespace matvec3_row {  // matvec3 with the int8 form's one row a warp
using namespace strata::cuda_emulation;
#include "worker/cuda/kernels/matvec.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef THREADS
}  // namespace matvec3_row
namespace rms {
using namespace strata::cuda_emulation;
#define THREADS 256
#include "worker/cuda/kernels/quantize.cuh"
#include "worker/cuda/kernels/rms_norm.cuh"
#undef THREADS
}  // namespace rms
namespace elementwise {
using namespace strata::cuda_emulation;
#include "worker/cuda/kernels/quantize.cuh"
#include "worker/cuda/kernels/elementwise.cuh"
}  // namespace elementwise
namespace attention {
using namespace strata::cuda_emulation;
#define THREADS 64
#include "worker/cuda/kernels/quantize.cuh"
#include "worker/cuda/kernels/attention.cuh"
#undef THREADS
}  // namespace attention
namespace sample {
using namespace strata::cuda_emulation;
#define THREADS 96
#include "worker/cuda/kernels/sample.cuh"
#include "worker/cuda/kernels/moe_route.cuh"
#undef THREADS
}  // namespace sample
#pragma GCC diagnostic pop
}  // namespace strata::worker::host

namespace strata::worker::kernels_test {

using testing::adapt;
using testing::EmulatedDeviceApi;

inline constexpr unsigned kMatvecThreads = 128, kRmsThreads = 256, kAttentionThreads = 64,
                   kArgmaxThreads = 96;

inline const KernelSource kMatvec1{"matvec.cu", cuda_kernels::kMatvecSource,
                            {"-DTHREADS=128", "-DNCOLS=1", "--std=c++17", "--fmad=false"}};
inline const KernelSource kMatvec3{"matvec.cu", cuda_kernels::kMatvecSource,
                            {"-DTHREADS=128", "-DNCOLS=3", "-DROW_WARPS=4", "-DWARP_ROWS=3",
                             "--std=c++17", "--fmad=false"}};
// kMatvec3 with the int8 form's rows one a warp.
inline const KernelSource kMatvec3Row{"matvec.cu", cuda_kernels::kMatvecSource,
                               {"-DTHREADS=128", "-DNCOLS=3", "-DROW_WARPS=4", "--std=c++17",
                                "--fmad=false"}};
// The backend's tensor-core build of `type` (step_sources()); its host
// build is tests/cuda/emulated_step_kernels.cc's.
inline const KernelSource& mma_source(GgmlType type) {
  return cuda_kernels::step_sources().mma[cuda_kernels::step_matvec_type_index(type)];
}
// Its build on sm_90's warpgroup instructions (wgmma_source.h).
inline const KernelSource& wgmma_source(GgmlType type) {
  return cuda_kernels::step_sources().wgmma[cuda_kernels::step_matvec_type_index(type)];
}
// The backend's flash-attention builds (step_sources()) for head sizes
// 32, 64 and 256 (64 and 32 keys a step); their host builds are
// tests/cuda/emulated_step_kernels.cc's.
inline const KernelSource& flash_source(int head_dim) {
  return cuda_kernels::step_sources().flash[cuda_kernels::step_flash_index(head_dim)];
}
inline const KernelSource &kFlash32 = flash_source(32), &kFlash64 = flash_source(64),
                          &kFlash256 = flash_source(256);
inline const KernelSource kRms{"rms_norm.cu", cuda_kernels::kRmsNormSource, {"-DTHREADS=256"}};
inline const KernelSource kElementwise{"elementwise.cu", cuda_kernels::kElementwiseSource, {}};
inline const KernelSource kAttention{"attention.cu", cuda_kernels::kAttentionSource, {"-DTHREADS=64"}};
inline const KernelSource kSample{"sample.cu", cuda_kernels::kSampleSource,
                                  {"-DTHREADS=96", "--fmad=false"}};
inline constexpr int kSampleThreads = 96;  // kSample's block (its THREADS)

struct TypeCase {
  GgmlType type;
  testing::HostEntry matvec1, matvec3, rows, joined;
};

inline std::vector<TypeCase> type_cases() {
  using namespace host;
  return {
      {GgmlType::kF32, adapt(matvec1::strata_matvec_f32), adapt(matvec3::strata_matvec_f32),
       adapt(matvec1::strata_get_rows_f32), adapt(matvec1::strata_matvec3_f32)},
      {GgmlType::kF16, adapt(matvec1::strata_matvec_f16), adapt(matvec3::strata_matvec_f16),
       adapt(matvec1::strata_get_rows_f16), adapt(matvec1::strata_matvec3_f16)},
      {GgmlType::kQ4_0, adapt(matvec1::strata_matvec_q4_0), adapt(matvec3::strata_matvec_q4_0),
       adapt(matvec1::strata_get_rows_q4_0), adapt(matvec1::strata_matvec3_q4_0)},
      {GgmlType::kQ4_1, adapt(matvec1::strata_matvec_q4_1), adapt(matvec3::strata_matvec_q4_1),
       adapt(matvec1::strata_get_rows_q4_1), adapt(matvec1::strata_matvec3_q4_1)},
      {GgmlType::kQ5_0, adapt(matvec1::strata_matvec_q5_0), adapt(matvec3::strata_matvec_q5_0),
       adapt(matvec1::strata_get_rows_q5_0), adapt(matvec1::strata_matvec3_q5_0)},
      {GgmlType::kQ5_1, adapt(matvec1::strata_matvec_q5_1), adapt(matvec3::strata_matvec_q5_1),
       adapt(matvec1::strata_get_rows_q5_1), adapt(matvec1::strata_matvec3_q5_1)},
      {GgmlType::kQ8_0, adapt(matvec1::strata_matvec_q8_0), adapt(matvec3::strata_matvec_q8_0),
       adapt(matvec1::strata_get_rows_q8_0), adapt(matvec1::strata_matvec3_q8_0)},
      {GgmlType::kMXFP4, adapt(matvec1::strata_matvec_mxfp4), adapt(matvec3::strata_matvec_mxfp4),
       adapt(matvec1::strata_get_rows_mxfp4), adapt(matvec1::strata_matvec3_mxfp4)},
      {GgmlType::kQ4_K, adapt(matvec1::strata_matvec_q4_k), adapt(matvec3::strata_matvec_q4_k),
       adapt(matvec1::strata_get_rows_q4_k), adapt(matvec1::strata_matvec3_q4_k)},
      {GgmlType::kQ5_K, adapt(matvec1::strata_matvec_q5_k), adapt(matvec3::strata_matvec_q5_k),
       adapt(matvec1::strata_get_rows_q5_k), adapt(matvec1::strata_matvec3_q5_k)},
      {GgmlType::kQ6_K, adapt(matvec1::strata_matvec_q6_k), adapt(matvec3::strata_matvec_q6_k),
       adapt(matvec1::strata_get_rows_q6_k), adapt(matvec1::strata_matvec3_q6_k)},
  };
}

// The int8 form of the three-output kernel (matvec3_i8_entry) in kMatvec1
// and kMatvec3, for the types that have one.
struct Int8Case {
  GgmlType type;
  testing::HostEntry matvec1, matvec3, matvec3_row;
};
inline std::vector<Int8Case> int8_cases() {
  using namespace host;
  return {
      {GgmlType::kQ4_0, adapt(matvec1::strata_matvec3_i8_q4_0), adapt(matvec3::strata_matvec3_i8_q4_0),
       adapt(matvec3_row::strata_matvec3_i8_q4_0)},
      {GgmlType::kQ4_1, adapt(matvec1::strata_matvec3_i8_q4_1), adapt(matvec3::strata_matvec3_i8_q4_1),
       adapt(matvec3_row::strata_matvec3_i8_q4_1)},
      {GgmlType::kQ5_1, adapt(matvec1::strata_matvec3_i8_q5_1), adapt(matvec3::strata_matvec3_i8_q5_1),
       adapt(matvec3_row::strata_matvec3_i8_q5_1)},
      {GgmlType::kQ5_0, adapt(matvec1::strata_matvec3_i8_q5_0), adapt(matvec3::strata_matvec3_i8_q5_0),
       adapt(matvec3_row::strata_matvec3_i8_q5_0)},
      {GgmlType::kQ8_0, adapt(matvec1::strata_matvec3_i8_q8_0), adapt(matvec3::strata_matvec3_i8_q8_0),
       adapt(matvec3_row::strata_matvec3_i8_q8_0)},
      {GgmlType::kMXFP4, adapt(matvec1::strata_matvec3_i8_mxfp4), adapt(matvec3::strata_matvec3_i8_mxfp4),
       adapt(matvec3_row::strata_matvec3_i8_mxfp4)},
      {GgmlType::kQ4_K, adapt(matvec1::strata_matvec3_i8_q4_k), adapt(matvec3::strata_matvec3_i8_q4_k),
       adapt(matvec3_row::strata_matvec3_i8_q4_k)},
      {GgmlType::kQ5_K, adapt(matvec1::strata_matvec3_i8_q5_k), adapt(matvec3::strata_matvec3_i8_q5_k),
       adapt(matvec3_row::strata_matvec3_i8_q5_k)},
      {GgmlType::kQ6_K, adapt(matvec1::strata_matvec3_i8_q6_k), adapt(matvec3::strata_matvec3_i8_q6_k),
       adapt(matvec3_row::strata_matvec3_i8_q6_k)},
  };
}

inline std::unique_ptr<DeviceApi> emulated_device() {
  auto api = std::make_unique<EmulatedDeviceApi>();
  api->set_compute_capability(90);  // it runs sm_90's wgmma kernels too
  testing::add_step_kernels(*api);  // the backend's builds (step_kernels.h) too
  for (const Int8Case& c : int8_cases()) {
    api->add(kMatvec1, cuda_kernels::matvec3_i8_entry(c.type), c.matvec1);
    api->add(kMatvec3, cuda_kernels::matvec3_i8_entry(c.type), c.matvec3);
    api->add(kMatvec3Row, cuda_kernels::matvec3_i8_entry(c.type), c.matvec3_row);
  }
  for (const TypeCase& c : type_cases()) {
    api->add(kMatvec1, std::string(cuda_kernels::matvec_entry(c.type)), c.matvec1);
    api->add(kMatvec3, std::string(cuda_kernels::matvec_entry(c.type)), c.matvec3);
    api->add(kMatvec1, cuda_kernels::get_rows_entry(c.type), c.rows);
    api->add(kMatvec1, cuda_kernels::matvec3_entry(c.type), c.joined);
  }
  for (const TypeCase& c : type_cases()) {
    if (cuda_kernels::mma3_entry(c.type).empty()) continue;
    api->add(mma_source(c.type), cuda_kernels::mma3_entry(c.type), testing::mma_host_entry(c.type));
    api->add(wgmma_source(c.type), cuda_kernels::wgmma3_entry(c.type),
             testing::wgmma_host_entry(c.type));
    if (!cuda_kernels::mma3_i8_entry(c.type).empty()) {
      api->add(mma_source(c.type), cuda_kernels::mma3_i8_entry(c.type),
               testing::mma_i8_host_entry(c.type));
    }
  }
  for (const int dim : {32, 64, 256}) {
    api->add(flash_source(dim), cuda_kernels::kFlashAttentionEntry,
             testing::flash_host_entry(dim));
  }
  api->add(kRms, cuda_kernels::kRmsNormEntry, adapt(host::rms::strata_rms_norm));
  api->add(kRms, cuda_kernels::kAddRmsNormEntry, adapt(host::rms::strata_add_rms_norm));
  api->add(kRms, cuda_kernels::kRmsNormQuantizeEntry, adapt(host::rms::strata_rms_norm_quantize));
  api->add(kRms, cuda_kernels::kAddRmsNormQuantizeEntry,
           adapt(host::rms::strata_add_rms_norm_quantize));
  api->add(kElementwise, cuda_kernels::kRopeRotateEntry,
           adapt(host::elementwise::strata_rope_rotate));
  api->add(kElementwise, cuda_kernels::kRopeRotateQkEntry,
           adapt(host::elementwise::strata_rope_rotate_qk));
  api->add(kElementwise, cuda_kernels::kSwigluEntry, adapt(host::elementwise::strata_swiglu));
  api->add(kElementwise, cuda_kernels::kSwigluQuantizeEntry,
           adapt(host::elementwise::strata_swiglu_quantize));
  api->add(kElementwise, cuda_kernels::kAddEntry, adapt(host::elementwise::strata_add));
  api->add(kElementwise, cuda_kernels::kAddBiasEntry, adapt(host::elementwise::strata_add_bias));
  api->add(kElementwise, cuda_kernels::kAddBiasIdsEntry, adapt(host::elementwise::strata_add_bias_ids));
  {
    namespace ew = host::elementwise;
    api->add(kElementwise, cuda_kernels::kScaleEntry, adapt(ew::strata_scale));
    api->add(kElementwise, cuda_kernels::kSoftCapEntry, adapt(ew::strata_soft_cap));
    api->add(kElementwise, cuda_kernels::kGegluEntry, adapt(ew::strata_geglu));
    api->add(kElementwise, cuda_kernels::kSwigluOaiEntry, adapt(ew::strata_swiglu_oai));
    api->add(kElementwise, cuda_kernels::kGatherRowsEntry, adapt(ew::strata_gather_rows));
    api->add(kElementwise, cuda_kernels::kScatterRowsEntry, adapt(ew::strata_scatter_rows));
    api->add(kElementwise, cuda_kernels::kMoeSumEntry, adapt(ew::strata_moe_sum));
    api->add(kElementwise, cuda_kernels::kAddSharedExpertEntry,
             adapt(ew::strata_add_shared_expert));
    api->add(kElementwise, cuda_kernels::kRoundRowsEntry, adapt(ew::strata_round_rows));
    api->add(kElementwise, cuda_kernels::kQuantizeRowsEntry, adapt(ew::strata_quantize_rows));
  }
  api->add(kElementwise, cuda_kernels::kStoreKvEntry, adapt(host::elementwise::strata_store_kv));
  api->add(kAttention, cuda_kernels::kAttentionDecodeEntry,
           adapt(host::attention::strata_attention_decode));
  api->add(kAttention, cuda_kernels::kAttentionRowsEntry,
           adapt(host::attention::strata_attention_rows));
  api->add(kAttention, cuda_kernels::kAttentionBatchEntry,
           adapt(host::attention::strata_attention_batch));
  api->add(kAttention, cuda_kernels::kAttentionBatchQuantizeEntry,
           adapt(host::attention::strata_attention_batch_quantize));
  api->add(kAttention, cuda_kernels::kAttentionSplitScoresEntry,
          adapt(host::attention::strata_attention_split_scores));
  api->add(kAttention, cuda_kernels::kAttentionSplitWeighEntry,
          adapt(host::attention::strata_attention_split_weigh));
  api->add(kElementwise, cuda_kernels::kRopeStoreKvBatchEntry,
           adapt(host::elementwise::strata_rope_store_kv_batch));
  api->add(kElementwise, cuda_kernels::kStoreKvBatchEntry,
           adapt(host::elementwise::strata_store_kv_batch));
  api->add(kSample, cuda_kernels::kArgmaxEntry, adapt(host::sample::strata_argmax));
  api->add(kSample, cuda_kernels::kArgmaxRowsEntry, adapt(host::sample::strata_argmax_rows));
  api->add(kSample, cuda_kernels::kTopKRowsEntry, adapt(host::sample::strata_top_k_rows));
  api->add(kSample, cuda_kernels::kMoeRouteEntry, adapt(host::sample::strata_moe_route));
  return api;
}

inline std::vector<float> normal_values(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// The fixture's parameters: "emulated" (the emulation in order),
// "emulated_" + each other schedule's name (cuda_emulator.h Schedule: a
// kernel whose results depend on the order its threads run in fails in one
// of them: "emulated_reversed", ...), "emulated_racecheck" (in order under
// cuda_emulator.h's race check: a case fails on two threads' unordered
// writes to one byte of shared memory, and a read of shared memory never
// written gives NaNs), and "cuda".
inline constexpr char kRaceCheckParam[] = "emulated_racecheck";
inline std::vector<std::string> kernel_params() {
  std::vector<std::string> params = {"emulated"};
  for (const cuda_emulation::Schedule s : cuda_emulation::kSchedules) {
    if (s != cuda_emulation::Schedule::kInOrder) {
      params.push_back(std::string("emulated_") + cuda_emulation::schedule_name(s));
    }
  }
  params.push_back(kRaceCheckParam);
  params.push_back("cuda");
  return params;
}
inline cuda_emulation::Schedule schedule_of(const std::string& param) {
  for (const cuda_emulation::Schedule s : cuda_emulation::kSchedules) {
    if (param == std::string("emulated_") + cuda_emulation::schedule_name(s)) return s;
  }
  return cuda_emulation::Schedule::kInOrder;
}

class Kernels : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam().starts_with("emulated")) {
      schedule_.emplace(schedule_of(GetParam()));
      if (GetParam() == kRaceCheckParam) race_check_.emplace();
      api_ = emulated_device();
      return;
    }
    STRATA_REQUIRE_CUDA_DEVICE(device);
    auto api = make_cuda_device_api(device.ordinal, "-");
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = *std::move(api);
  }

  // A device copy of `v`.
  template <typename T>
  DeviceBuffer put(const std::vector<T>& v) {
    auto b = DeviceBuffer::make(api_.get(), v.size() * sizeof(T));
    EXPECT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(api_->upload(b->get(), v.data(), v.size() * sizeof(T)).ok());
    return *std::move(b);
  }
  // `bytes` of device memory, every byte `fill_byte`.
  DeviceBuffer space(size_t bytes, int fill_byte = 0xFF) {
    auto b = DeviceBuffer::make(api_.get(), bytes);
    EXPECT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(api_->fill(b->get(), fill_byte, bytes).ok());
    return *std::move(b);
  }
  template <typename T>
  std::vector<T> get(const DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    EXPECT_TRUE(api_->download(v.data(), b.get(), n * sizeof(T)).ok());
    return v;
  }
  // The int8 rows strata_quantize_rows makes of the n values at x (kind
  // Q8_0, Q8_1 or Q8_K; n whole units, 256-value blocks for Q8_K): q [n],
  // then each 32-value unit's d and sum (quantize.cuh's layout).
  struct DeviceInt8Rows {
    DeviceBuffer q, d, sums;
  };
  DeviceInt8Rows int8_rows(const DeviceBuffer& x, size_t n, int kind) {
    DeviceInt8Rows r{space(n), space(n / 32 * sizeof(float)), space(n / 32 * sizeof(float))};
    EXPECT_TRUE(run(kElementwise, cuda_kernels::kQuantizeRowsEntry, 4, 256, x.as<const float>(),
                    r.q.as<signed char>(), r.d.as<float>(), r.sums.as<float>(),
                    static_cast<long long>(n), kind)
                    .ok());
    return r;
  }

  // Launches `entry` of `source` with `args` (each of the parameter's exact
  // type).
  template <typename... T>
  absl::Status run(const KernelSource& source, const std::string& entry, unsigned grid,
                   unsigned block, T... args) {
    std::tuple<T...> held(args...);
    return std::apply(
        [&](auto&... v) {
          void* a[] = {static_cast<void*>(&v)...};
          return api_->launch(KernelRef{&source, entry}, grid, block, a);
        },
        held);
  }

  void TearDown() override {
    if (race_check_) {
      EXPECT_EQ(race_check_->races(), 0u) << race_check_->described();
    }
  }

  std::optional<cuda_emulation::ScheduleScope> schedule_;  // the emulation's, for the test
  std::optional<cuda_emulation::RaceCheckScope> race_check_;  // "emulated_racecheck"
  std::unique_ptr<DeviceApi> api_;
};

}  // namespace strata::worker::kernels_test
