// The device backend's launches, on the emulation alone (which counts
// them and can swap a kernel for a stand-in): which kernels a step runs
// (rows quantized in the kernels that make them, the warpgroup kernel on
// sm_90, a mixture's expert slots, decode attention split past a chunk),
// rows uploaded in chunks, a device routing out of range refused, and the
// same bits whatever order the emulation runs threads in
// (device_backend_fixture.h).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cuda/cuda_emulator.h"
#include "tests/cuda/device_backend_fixture.h"
#include "tests/cuda/emulated_step_kernels.h"
#include "worker/cuda/kernels/sources.h"
#include "worker/cuda/step_kernels.h"

namespace strata::worker::device_test {
namespace {

// A decode step's launches through one quantized llama block (a shard of
// block 0 of the tiny llama, not the last: no head), on the emulation,
// which counts them: the embedding (get_rows), then the block's 9 — the
// attention norm quantizing q|k|v's rows in the same launch, q|k|v, RoPE
// with the KV store, attention quantizing o's rows, o,
// the residual add + FFN norm quantizing gate|up's rows, gate|up, SwiGLU
// quantizing down's rows, down — and the residual add. On the float
// matrix kernel (matvec_int8 off) each product's rows are rounded by a
// launch of their own: 13 for the block.
TEST(DeviceBackendLaunches, ADecodeStepOfAQuantizedBlockQuantizesInTheKernelsThatMakeItsRows) {
  for (const std::string type : {"Q8_0", "Q4_K"}) {
    for (const bool int8 : {true, false}) {
      SCOPED_TRACE(type + (int8 ? ", int8" : ", float"));
      gguf::testing::TempDir dir;
      Loaded m = open_model(tiny_llama(dir, type));
      ASSERT_NE(m.model, nullptr);
      ASSERT_GE(m.hp.n_layer, 2);
      DeviceBackendOptions o = test_options();
      o.graphs = false;  // every launch counted as it runs
      o.matvec_int8 = int8;
      std::unique_ptr<testing::EmulatedDeviceApi> api = testing::emulated_step_device();
      testing::EmulatedDeviceApi* emulated = api.get();
      auto b = make_device_backend(m.model, m.hp, {0, 1}, o, std::move(api));
      ASSERT_TRUE(b.ok()) << b.status();
      ASSERT_TRUE((*b)->add_sequence(0, 16).ok());
      const auto step = [&](const std::vector<int32_t>& tokens) {
        ForwardRequest req;
        req.tokens = tokens;
        ForwardResult r;
        const absl::Status st = (*b)->forward(req, &r);
        EXPECT_TRUE(st.ok()) << st;
        EXPECT_EQ(r.hidden.size(), tokens.size() * static_cast<size_t>(m.hp.n_embd));
      };
      step({1, 40, 97});
      const int64_t before = emulated->launches();
      step({300});
      EXPECT_EQ(emulated->launches() - before, 1 + (int8 ? 9 : 13) + 1);
      if (!int8) continue;
      // o's rows by a launch of their own: one more, the same logits.
      DeviceBackendOptions apart = o;
      apart.attention_quantizes = false;
      std::unique_ptr<testing::EmulatedDeviceApi> api2 = testing::emulated_step_device();
      testing::EmulatedDeviceApi* emulated2 = api2.get();
      auto b2 = make_device_backend(m.model, m.hp, {0, 1}, apart, std::move(api2));
      ASSERT_TRUE(b2.ok()) << b2.status();
      ASSERT_TRUE((*b2)->add_sequence(0, 16).ok());
      ForwardResult r1, r2;
      for (const std::vector<int32_t>& tokens : {std::vector<int32_t>{1, 40, 97}, {300}}) {
        ForwardRequest req;
        req.tokens = tokens;
        const int64_t at = emulated2->launches();
        ASSERT_TRUE((*b2)->forward(req, &r2).ok());
        if (tokens.size() == 1) {
          EXPECT_EQ(emulated2->launches() - at, 1 + 10 + 1);
        }
      }
      // The fused backend's same steps (a fresh sequence) give the same rows.
      ASSERT_TRUE((*b)->add_sequence(1, 16).ok());
      for (const std::vector<int32_t>& tokens : {std::vector<int32_t>{1, 40, 97}, {300}}) {
        ForwardRequest req;
        req.tokens = tokens;
        req.seq = 1;
        ASSERT_TRUE((*b)->forward(req, &r1).ok());
      }
      EXPECT_EQ(std::vector<float>(r1.hidden.begin(), r1.hidden.end()),
                std::vector<float>(r2.hidden.begin(), r2.hidden.end()));
    }
  }
}

// The head of a decode step (the whole model, its last row's logits): the
// output norm makes the head's int8 rows (one launch), then the head's
// product; on the float matrix kernel the rows are rounded by a launch of
// their own. The blocks as above: each layer's residual add goes into the
// next layer's norm, the last one's is a launch.
TEST(DeviceBackendLaunches, ADecodeStepsHeadNormQuantizesItsRows) {
  for (const bool int8 : {true, false}) {
    SCOPED_TRACE(int8 ? "int8" : "float");
    gguf::testing::TempDir dir;
    Loaded m = open_model(tiny_llama(dir, "Q4_K"));
    ASSERT_NE(m.model, nullptr);
    DeviceBackendOptions o = test_options();
    o.graphs = false;
    o.matvec_int8 = int8;
    std::unique_ptr<testing::EmulatedDeviceApi> api = testing::emulated_step_device();
    testing::EmulatedDeviceApi* emulated = api.get();
    auto b = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, o, std::move(api));
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE((*b)->add_sequence(0, 16).ok());
    const auto step = [&](const std::vector<int32_t>& tokens) {
      ForwardRequest req;
      req.tokens = tokens;
      req.logits = Logits::kLast;
      ForwardResult r;
      const absl::Status st = (*b)->forward(req, &r);
      EXPECT_TRUE(st.ok()) << st;
      EXPECT_EQ(r.logits.size(), static_cast<size_t>(m.hp.n_vocab));
    };
    step({1, 40, 97});
    const int64_t before = emulated->launches();
    step({300});
    const int64_t blocks = int64_t{m.hp.n_layer} * (int8 ? 9 : 13) + 1;
    EXPECT_EQ(emulated->launches() - before, 1 + blocks + (int8 ? 2 : 3));
  }
}

// A regrouped matrix uploaded a row at a time (upload_chunk_bytes 1) gives
// the same device rows as in one piece: the same logits, bit for bit, for
// types with regrouped rows (Q8_0, Q4_K_M's Q6_K) and whole experts
// (each expert's rows at its slice).
TEST(DeviceBackendUpload, RowsUploadedInChunksGiveTheSameLogits) {
  for (const std::string type : {"Q8_0", "Q4_K_M"}) {
    SCOPED_TRACE(type);
    gguf::testing::TempDir dir;
    Loaded m = open_model(tiny_llama(dir, type));
    ASSERT_NE(m.model, nullptr);
    std::vector<std::vector<float>> logits[2];
    for (const int64_t chunk : {int64_t{64} << 20, int64_t{1}}) {
      DeviceBackendOptions o = test_options();
      o.upload_chunk_bytes = chunk;
      auto b = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, o,
                                   testing::emulated_step_device());
      ASSERT_TRUE(b.ok()) << b.status();
      ASSERT_TRUE((*b)->add_sequence(0, 16).ok());
      for (const std::vector<int32_t>& tokens : {std::vector<int32_t>{1, 40, 97}, {300}, {7}}) {
        ForwardRequest req;
        req.tokens = tokens;
        ForwardResult r;
        ASSERT_TRUE((*b)->forward(req, &r).ok());
        logits[chunk == 1].emplace_back(r.logits.begin(), r.logits.end());
      }
    }
    EXPECT_EQ(logits[0], logits[1]);
  }
}

// Prompt slices on the f16 tensor cores (mma_int8 false): a device that
// reports compute 9.0 runs them on the warpgroup kernel (wgmma_source.h),
// one launch of 256 threads a matrix, and none on mma.sync's; 8.0, or 9.0
// with `wgmma` off, on mma.sync's. On the emulation the two kernels' sums
// are the same arithmetic (products exact in float, added onto the sums in
// column order, 16 at a time), so the logits are the same bits: the
// warpgroup kernel's tiles, buffers and outputs put each sum where
// mma.sync's does. (On a GPU the tensor cores' accumulations may differ.)
TEST(DeviceBackendLaunches, PromptSlicesTakeTheWarpgroupKernelOnSm90) {
  gguf::testing::TempDir dir;
  Loaded m = open_model(tiny_llama(dir, "Q4_K_M"));
  ASSERT_NE(m.model, nullptr);
  struct Case {
    int cc;
    bool wgmma;
  };
  std::vector<float> logits[3];
  int at = 0;
  for (const Case c : {Case{80, true}, Case{90, true}, Case{90, false}}) {
    SCOPED_TRACE(std::to_string(c.cc) + (c.wgmma ? "" : ", wgmma off"));
    DeviceBackendOptions o = test_options(32, 0, /*mma_min_rows=*/3);
    o.mma_int8 = false;
    o.wgmma = c.wgmma;
    o.graphs = false;
    std::unique_ptr<testing::EmulatedDeviceApi> api = testing::emulated_step_device();
    api->set_compute_capability(c.cc);
    testing::EmulatedDeviceApi* emulated = api.get();
    auto b = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, o, std::move(api));
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE((*b)->add_sequence(0, 16).ok());
    const std::vector<int32_t> prompt = {1, 40, 97, 5, 300};
    ForwardRequest req;
    req.tokens = prompt;
    req.logits = Logits::kLast;
    ForwardResult r;
    ASSERT_TRUE((*b)->forward(req, &r).ok());
    logits[at++].assign(r.logits.begin(), r.logits.end());
    const bool warpgroup = c.cc == 90 && c.wgmma;
    for (const char* type : {"q4_k", "q6_k"}) {  // Q4_K_M's block matrices
      EXPECT_EQ(emulated->blocks_of(std::string("strata_wgmma3_") + type),
                warpgroup ? std::set<unsigned>{256} : std::set<unsigned>{})
          << type;
      EXPECT_EQ(emulated->blocks_of(std::string("strata_mma3_") + type),
                warpgroup ? std::set<unsigned>{} : std::set<unsigned>{128})
          << type;
    }
  }
  EXPECT_EQ(logits[0], logits[1]);
  EXPECT_EQ(logits[0], logits[2]);
}

// 16 sequences decoding together run their matrices' 16-column chunk on
// the int8 form's tensor-core build (matvec_mma.cuh) and get, bit for bit,
// the logits each gets decoding alone (one column, dp4a): a Q4_K_M tiny
// llama, two steps of 16 one-row slices after a prompt each.
TEST(DeviceBackendLaunches, BatchedDecodeOnTheTensorCoresKeepsEachSequencesBits) {
  gguf::testing::TempDir dir;
  Loaded m = open_model(tiny_llama(dir, "Q4_K_M"));
  ASSERT_NE(m.model, nullptr);
  constexpr int kSequences = 16;
  DeviceBackendOptions o = test_options();
  o.graphs = false;
  std::unique_ptr<testing::EmulatedDeviceApi> api = testing::emulated_step_device();
  testing::EmulatedDeviceApi* emulated = api.get();
  auto together = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, o, std::move(api));
  ASSERT_TRUE(together.ok()) << together.status();
  auto alone = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, o,
                                   testing::emulated_step_device());
  ASSERT_TRUE(alone.ok()) << alone.status();
  const size_t v = static_cast<size_t>(m.hp.n_vocab);
  for (int s = 0; s < kSequences; ++s) {
    ASSERT_TRUE((*together)->add_sequence(s, 16).ok());
    ASSERT_TRUE((*alone)->add_sequence(s, 16).ok());
    const std::vector<int32_t> prompt = {1, 30 + 7 * s};
    forward_logits(**together, prompt, {{.seq = s, .rows = 2}});
    forward_logits(**alone, prompt, {{.seq = s, .rows = 2}});
  }
  for (int step = 0; step < 2; ++step) {
    std::vector<int32_t> tokens;
    std::vector<ForwardSlice> slices;
    for (int s = 0; s < kSequences; ++s) {
      tokens.push_back(100 + 13 * s + step);
      slices.push_back({.seq = s, .rows = 1});
    }
    const std::vector<float> batched = forward_logits(**together, tokens, slices);
    ASSERT_EQ(batched.size(), kSequences * v);
    for (int s = 0; s < kSequences; ++s) {
      const std::vector<float> one =
          forward_logits(**alone, {tokens[static_cast<size_t>(s)]}, {{.seq = s, .rows = 1}});
      EXPECT_EQ(std::vector<float>(batched.begin() + static_cast<long>(s * v),
                                   batched.begin() + static_cast<long>((s + 1) * v)),
                one)
          << "sequence " << s << ", step " << step;
    }
  }
  EXPECT_FALSE(emulated->blocks_of("strata_matvec3_mma_q4_k").empty());
  EXPECT_FALSE(emulated->blocks_of("strata_matvec3_mma_q6_k").empty());
}

// A decode step of a mixture runs each expert matrix's slots in one launch:
// the tiny mixtral (its experts Q8_0, on the int8 form, and F16, on the
// float one), 3 sequences decoding together (6 slots), per step one launch
// of each of gate, up and down a block, no gathered expert rows; a 9-row
// prompt step (18 slots) gathers.
TEST(DeviceBackendLaunches, AMixturesDecodeStepRunsEachExpertMatrixInOneLaunch) {
  STRATA_TINY_MODEL_OR_SKIP(path, "mixtral");
  Loaded m = open_model(path);
  ASSERT_NE(m.model, nullptr);
  DeviceBackendOptions o = test_options(32, 0, /*mma_min_rows=*/0);
  std::unique_ptr<testing::EmulatedDeviceApi> api = testing::emulated_step_device();
  testing::EmulatedDeviceApi* emulated = api.get();
  auto b = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, o, std::move(api));
  ASSERT_TRUE(b.ok()) << b.status();
  const auto ids = [&] {
    return emulated->launches_of("strata_matvec_ids_i8_q8_0") +
           emulated->launches_of("strata_matvec_ids_f16");
  };
  std::vector<int32_t> tokens;
  std::vector<ForwardSlice> slices;
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE((*b)->add_sequence(s, 16).ok());
    for (int t = 0; t < 3; ++t) tokens.push_back(40 + 11 * s + t);
    slices.push_back({.seq = s, .rows = 3});
  }
  forward_logits(**b, tokens, slices);
  EXPECT_EQ(ids(), 0) << "the 9-row step";
  EXPECT_GT(emulated->launches_of("strata_gather_rows"), 0);
  for (int step = 0; step < 2; ++step) {
    const int64_t before = ids();
    const int64_t gathered = emulated->launches_of("strata_gather_rows");
    forward_logits(**b, {100 + step, 200 + step, 300 + step},
                   {{.seq = 0, .rows = 1}, {.seq = 1, .rows = 1}, {.seq = 2, .rows = 1}});
    EXPECT_EQ(ids() - before, 3 * m.hp.n_layer) << "step " << step;
    EXPECT_EQ(emulated->launches_of("strata_gather_rows"), gathered) << "step " << step;
  }
}

// A routing kernel gone wrong (here a stand-in for strata_moe_route that
// sends every slot to expert n_expert + 3) is refused where the host would
// follow its ids (the gathered experts of a 9-row prompt step: an
// InternalError naming the block, the row and the id), never read out of
// the host's tables; the backend is unchanged (the sequence's length
// stays, so the step can be sent again).
void route_past_the_experts(const float*, int n_expert, int k, int, int, float, int* experts,
                            float* weights) {
  using strata::cuda_emulation::blockIdx;
  using strata::cuda_emulation::threadIdx;
  if (threadIdx.x != 0) return;
  for (int j = 0; j < k; ++j) {
    experts[blockIdx.x * k + j] = n_expert + 3;
    weights[blockIdx.x * k + j] = 0.5f;
  }
}

TEST(DeviceBackendLaunches, ADeviceRoutingOutOfRangeIsRefusedNotFollowed) {
  STRATA_TINY_MODEL_OR_SKIP(path, "mixtral");
  Loaded m = open_model(path);
  ASSERT_NE(m.model, nullptr);
  std::unique_ptr<testing::EmulatedDeviceApi> api = testing::emulated_step_device();
  api->add(::strata::worker::cuda_kernels::step_sources().sample,
           ::strata::worker::cuda_kernels::kMoeRouteEntry,
           testing::adapt(route_past_the_experts));
  auto b = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, test_options(32, 0, 0),
                               std::move(api));
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*b)->add_sequence(0, 16).ok());
  const std::vector<int32_t> prompt = {1, 40, 97, 300, 5, 77, 12, 9, 250};
  ForwardRequest req;
  req.tokens = prompt;
  ForwardResult r;
  const absl::Status st = (*b)->forward(req, &r);
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
  EXPECT_NE(st.message().find("the device routed row 0 to expert " +
                              std::to_string(m.hp.moe.n_expert + 3)),
            std::string::npos)
      << st;
  EXPECT_EQ((*b)->sequence_length(0).value_or(-1), 0);
}

// A decode step splits its rows' attention over blocks once a row is
// longer than a chunk, and not before (attention_splits 4, chunks of at
// least 6 keys; the tiny llama, whose o takes int8 rows, so the split
// launch quantizes them too): the logits then differ from the unsplit
// form's (attention_splits 1) only in the last bits (the softmax's sums in
// another order), and are the same bits with and without decode graphs.
TEST(DeviceBackendLaunches, DecodeAttentionSplitsOnlyPastAChunk) {
  gguf::testing::TempDir dir;
  Loaded m = open_model(tiny_llama(dir, "Q4_K_M"));
  ASSERT_NE(m.model, nullptr);
  struct Run {
    std::vector<std::vector<float>> logits;
    std::vector<bool> split;  // each step: the split kernels launched
  };
  const auto decode = [&](int splits, bool graphs) {
    Run run;
    DeviceBackendOptions o = test_options();
    o.attention_splits = splits;
    o.attention_split_keys = 6;
    o.graphs = graphs;
    std::unique_ptr<testing::EmulatedDeviceApi> api = testing::emulated_step_device();
    testing::EmulatedDeviceApi* emulated = api.get();
    auto b = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, o, std::move(api));
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return run;
    EXPECT_TRUE((*b)->add_sequence(0, 16).ok());
    forward_logits(**b, {1, 40, 97}, {{.seq = 0, .rows = 3}});
    for (int step = 0; step < 6; ++step) {  // rows at positions 3 .. 8
      const int64_t before = emulated->launches_of("strata_attention_split_weigh");
      run.logits.push_back(forward_logits(**b, {300 + step}, {{.seq = 0, .rows = 1}}));
      run.split.push_back(emulated->launches_of("strata_attention_split_weigh") > before);
    }
    return run;
  };
  const Run plain = decode(1, false), split = decode(4, false), graphed = decode(4, true);
  // Rows at positions 3, 4, 5 have 4, 5, 6 keys (one chunk); 6, 7, 8 more.
  EXPECT_EQ(plain.split, std::vector<bool>(6, false));
  EXPECT_EQ(split.split, (std::vector<bool>{false, false, false, true, true, true}));
  ASSERT_EQ(split.logits.size(), 6u);
  for (size_t step = 0; step < 6; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_EQ(graphed.logits[step], split.logits[step]);
    if (step < 3) {
      EXPECT_EQ(split.logits[step], plain.logits[step]);
      continue;
    }
    float scale = 0.0f, worst = 0.0f;
    for (float v : plain.logits[step]) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < plain.logits[step].size(); ++i) {
      worst = std::max(worst, std::fabs(plain.logits[step][i] - split.logits[step][i]) / scale);
    }
    EXPECT_LE(worst, 1e-3f);
  }
}

// The models and steps the order tests below run: a tiny llama in Q4_K_M
// and (where made) the tiny mixtral (its routing, the prompt's gathered
// experts, the decode steps' expert slots); a 70-row prompt in one step on
// the tensor cores (int8 mma.sync, flash attention over two steps of
// keys), then three decode steps.
std::vector<std::string> order_models(gguf::testing::TempDir& dir) {
  std::vector<std::string> paths = {tiny_llama(dir, "Q4_K_M")};
  if (std::filesystem::exists(tiny_model_path("mixtral"))) {
    paths.push_back(tiny_model_path("mixtral"));
  }
  return paths;
}
const std::vector<int32_t>& order_prompt() {
  static const std::vector<int32_t> prompt = [] {
    std::vector<int32_t> p;
    for (int t = 0; t < 70; ++t) p.push_back(1 + (t * 37) % 250);
    return p;
  }();
  return prompt;
}
const std::vector<int32_t> kOrderNext = {21, 90, 150};
// Their logits, step by step, on a fresh emulated backend (in the
// emulation's schedule and race check as set by the caller).
std::vector<std::vector<float>> order_logits(const Loaded& m) {
  auto b = make_device_backend(m.model, m.hp, {0, m.hp.n_layer},
                               test_options(/*max_batch=*/96, 0, /*mma_min_rows=*/8),
                               testing::emulated_step_device());
  EXPECT_TRUE(b.ok()) << b.status();
  if (!b.ok()) return {};
  return logits_alone(**b, 0, order_prompt(), kOrderNext, /*n_ctx=*/128);
}
// For each of the models: `check(m, first)`, first its logits in order.
template <typename Check>
void for_each_order_model(Check check) {
  gguf::testing::TempDir dir;
  for (const std::string& path : order_models(dir)) {
    SCOPED_TRACE(path);
    Loaded m = open_model(path);
    ASSERT_NE(m.model, nullptr);
    const std::vector<std::vector<float>> first = order_logits(m);
    ASSERT_EQ(first.size(), kOrderNext.size() + 1);
    check(m, first);
  }
}
void expect_same_bits(const std::vector<std::vector<float>>& got,
                      const std::vector<std::vector<float>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t step = 0; step < want.size(); ++step) {
    ASSERT_EQ(got[step].size(), want[step].size());
    EXPECT_EQ(std::memcmp(got[step].data(), want[step].data(), want[step].size() * sizeof(float)),
              0)
        << "step " << step;
  }
}

// No kernel build the backend launches depends on the order its threads
// run in: the steps above give the same bits in each of the emulation's
// other schedules (cuda_emulator.h Schedule: reversed, shuffled, each warp
// alone ahead of the others) as in the first. The kernel tests run each
// kernel in every schedule at their own builds; these are the backend's
// (step_kernels.h).
TEST(DeviceBackendLaunches, StepsGiveTheSameBitsWhateverOrderThreadsRunIn) {
  for_each_order_model([](const Loaded& m, const std::vector<std::vector<float>>& first) {
    for (const cuda_emulation::Schedule schedule : cuda_emulation::kSchedules) {
      if (schedule == cuda_emulation::Schedule::kInOrder) continue;
      SCOPED_TRACE(cuda_emulation::schedule_name(schedule));
      const cuda_emulation::ScheduleScope scope(schedule);
      expect_same_bits(order_logits(m), first);
    }
  });
}

// Nor do they race in shared memory, or read shared memory their block
// never wrote: under the emulation's race check (cuda_emulator_race_check.h
// RaceCheckScope: every block's shared memory starts as NaNs, and two
// threads' unordered writes to one byte are reported) the steps report no
// race and give the bits they give without it.
TEST(DeviceBackendLaunches, StepsWriteSharedMemoryWithoutRaces) {
  for_each_order_model([](const Loaded& m, const std::vector<std::vector<float>>& first) {
    const cuda_emulation::RaceCheckScope check;
    expect_same_bits(order_logits(m), first);
    EXPECT_EQ(check.races(), 0u) << check.described();
  });
}

}  // namespace
}  // namespace strata::worker::device_test
