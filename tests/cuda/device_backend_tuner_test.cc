// The device backend's tuner at load (worker/cuda/kernel_tuner.h through
// worker/cuda/device_backend.h): each matrix shape's split-K and block, and
// each prompt shape's tensor-core form, measured once and kept in its file,
// whose choices are then what the steps run; on the emulation and on a GPU
// (device_backend_fixture.h).
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/cuda/device_backend_fixture.h"
#include "tests/cuda/emulated_step_kernels.h"
#include "tests/model/gguf_test_util.h"
#include "worker/cuda/device_api.h"
#include "worker/cuda/device_backend.h"
#include "worker/cuda/kernel_tuner.h"

namespace strata::worker::device_test {
namespace {

class DeviceBackendTuner : public DeviceBackend {};

// The tuner at load: with no file, every matrix shape is measured (each
// split-K and block choice) and written, under the device's key; with a file, its
// choices are what the step runs (a file saying 4 warps a row gives the
// logits of a backend forced to 4, bit for bit).
TEST_P(DeviceBackendTuner, TunerMeasuresOnceAndItsFileDecidesTheSplit) {
  Loaded m = open_model(stories_path());
  ASSERT_NE(m.model, nullptr);
  gguf::testing::TempDir dir;
  const std::string path = dir.file("tuner.json");
  DeviceBackendOptions o;
  o.max_batch = 8;
  o.tuner_path = path;
  auto tuned = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, o, new_api());
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path << " was not written";
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_NE(j["key"].get<std::string>().find("matvec.cuh"), std::string::npos) << j["key"];
  // stories260K's shapes: q, k and v joined 64x128, o 64x64, gate and up
  // joined 64x344, down 172x64, the embedding and head 64x512.
  for (const char* shape : {"F32 64x128", "F32 64x64", "F32 64x344", "F32 172x64", "F32 64x512"}) {
    ASSERT_TRUE(j["matvec"].contains(shape)) << shape << " in " << j.dump();
    EXPECT_EQ(j["matvec"][shape]["ms"].size(), matvec_candidates().size()) << shape;
  }
  // Every shape 4 warps a row in blocks of 256, then a load that reads it
  // (the block does not change the sums: a backend forced to 4 warps a row
  // in blocks of 128 gives the same bits).
  for (auto& [shape, entry] : j["matvec"].items()) {
    entry["row_warps"] = 4;
    entry["threads"] = 256;
  }
  std::ofstream(path) << j.dump();
  std::unique_ptr<DeviceApi> api = new_api();
  // On the emulation, the blocks the matrix kernel ran in (the file's 256).
  const auto* emulated = dynamic_cast<const testing::EmulatedDeviceApi*>(api.get());
  auto from_file = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, o, std::move(api));
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  auto forced = device_backend(m, {0, m.hp.n_layer}, 8, 4);
  const std::vector<int32_t> prompt = {1, 403, 407, 261};
  EXPECT_EQ(logits_alone(**from_file, 0, prompt, {300}), logits_alone(*forced, 0, prompt, {300}));
  if (emulated != nullptr) {
    EXPECT_EQ(emulated->blocks_of("strata_matvec3_f32"), std::set<unsigned>{256});
  }
  // A malformed file is an empty tuner: the load measures again.
  std::ofstream(path) << "{not json";
  auto after_garbage = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, o, new_api());
  ASSERT_TRUE(after_garbage.ok()) << after_garbage.status();
  std::ifstream again(path);
  EXPECT_TRUE(nlohmann::json::parse(again, nullptr, false).contains("matvec"));
}

// The tuner's tensor-core form of prompt chunks: with no file, each
// per-slice matrix shape of the tiny Q4_K_M llama is timed on every form
// the device allows (int8 mma.sync, f16 wgmma on 9.0, f16 mma.sync; the
// emulation reports 9.0) and written; with a file, the fastest form it
// says is what a prompt runs on, bit for bit the logits of a backend
// forced to that form untuned (the matvec choices set to the untuned ones),
// and on the emulation the only tensor-core kernel launched.
TEST_P(DeviceBackendTuner, TheTunersFileDecidesEachShapesTensorCoreForm) {
  EmulatedComputeCapability cc90(90);
  gguf::testing::TempDir dir;
  Loaded m = open_model(tiny_llama(dir, "Q4_K_M"));
  ASSERT_NE(m.model, nullptr);
  const std::string path = dir.file("tuner.json");
  DeviceBackendOptions o = test_options(16, 0, /*mma_min_rows=*/8);
  o.tune = true;
  o.tuner_path = path;
  o.prefill_tune_rows = 16;
  ASSERT_TRUE(make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, o, new_api()).ok());
  nlohmann::json j;
  {
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << path << " was not written";
    j = nlohmann::json::parse(in);
  }
  ASSERT_TRUE(j.contains("prefill")) << j.dump();
  std::unique_ptr<DeviceApi> probe = new_api();
  const bool sm90 = probe->compute_capability() == 90;
  // q|k|v, o, gate|up and down: Q4_K and Q6_K shapes, each form timed.
  ASSERT_GE(j["prefill"].size(), 3u) << j.dump();
  for (const auto& [shape, ms] : j["prefill"].items()) {
    EXPECT_TRUE(ms.contains("i8") && ms.contains("f16")) << shape << ": " << ms.dump();
    EXPECT_EQ(ms.contains("wgmma"), sm90) << shape << ": " << ms.dump();
  }
  for (auto& [shape, entry] : j["matvec"].items()) {  // the untuned matvec choices
    entry["row_warps"] = 1;
    entry["threads"] = 128;
  }
  const std::vector<int32_t> prompt = {1, 40, 97, 300, 5, 77, 12, 9, 250};
  struct Form {
    const char* fastest;
    bool mma_int8, wgmma;
    const char* kernel;  // its kernels' names, less the type
  };
  std::vector<Form> forms = {{"f16", false, false, "strata_mma3_"},
                             {"i8", true, true, "strata_mma3_i8_"}};
  if (sm90) forms.push_back({"wgmma", false, true, "strata_wgmma3_"});
  for (const Form& f : forms) {
    SCOPED_TRACE(f.fastest);
    for (auto& [shape, ms] : j["prefill"].items()) {
      for (auto& [form, t] : ms.items()) t = form == f.fastest ? 1.0 : 2.0;
    }
    std::ofstream(path) << j.dump();
    std::unique_ptr<DeviceApi> api = new_api();
    const auto* emulated = dynamic_cast<const testing::EmulatedDeviceApi*>(api.get());
    auto tuned = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, o, std::move(api));
    ASSERT_TRUE(tuned.ok()) << tuned.status();
    DeviceBackendOptions forced = test_options(16, 0, /*mma_min_rows=*/8);
    forced.mma_int8 = f.mma_int8;
    forced.wgmma = f.wgmma;
    auto want = device_backend(m, {0, m.hp.n_layer}, forced);
    ASSERT_NE(want, nullptr);
    EXPECT_EQ(logits_alone(**tuned, 0, prompt, {300}), logits_alone(*want, 0, prompt, {300}));
    if (emulated != nullptr) {
      int64_t mine = 0, others = 0;
      for (const std::string kernel : {"strata_mma3_", "strata_mma3_i8_", "strata_wgmma3_"}) {
        for (const char* type : {"q4_k", "q6_k"}) {
          (kernel == f.kernel ? mine : others) += emulated->launches_of(kernel + type);
        }
      }
      EXPECT_GT(mine, 0);
      EXPECT_EQ(others, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(On, DeviceBackendTuner, ::testing::Values("emulated", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace strata::worker::device_test
