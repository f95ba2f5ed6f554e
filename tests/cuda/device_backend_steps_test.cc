// The device backend's decode steps (worker/cuda/device_backend.h):
// replayed from captured CUDA graphs and picking greedy tokens on the
// device (Logits::kArgmax), each against the same steps launched one by one
// or downloading their logits; on the emulation and on a GPU
// (device_backend_fixture.h).
#include <cstring>
#include <set>
#include <fstream>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/cuda/cuda_emulator.h"
#include "tests/cuda/device_backend_fixture.h"
#include "tests/cuda/emulated_step_kernels.h"
#include "tests/test_paths.h"
#include "worker/cuda/kernels/sources.h"
#include "worker/cuda/step_kernels.h"
#include "worker/head_picks.h"

namespace strata::worker::device_test {
namespace {

class DeviceBackendSteps : public DeviceBackend {};

// A script of steps: three sequences' prompts in one step, three decode
// steps of all three, one sequence removed, two decode steps of two, a new
// sequence of a longer context (the attention scratch is made anew) and its
// prompt, two decode steps of three. Returns each step's logits.
// The logits of one forward step of `slices` (the test is told of a failure).
std::vector<float> forward_logits(Backend& b, const std::vector<int32_t>& tokens,
                                  const std::vector<ForwardSlice>& slices) {
  ForwardRequest req;
  req.tokens = tokens;
  req.slices = slices;
  ForwardResult r;
  const absl::Status st = b.forward(req, &r);
  EXPECT_TRUE(st.ok()) << st;
  return std::vector<float>(r.logits.begin(), r.logits.end());
}

std::vector<std::vector<float>> decode_script(Backend& b) {
  std::vector<std::vector<float>> out;
  const auto step = [&](const std::vector<ForwardSlice>& slices,
                        const std::vector<int32_t>& tokens) {
    out.push_back(forward_logits(b, tokens, slices));
  };
  for (int s = 0; s < 3; ++s) EXPECT_TRUE(b.add_sequence(s, 48).ok());
  step({{.seq = 0, .rows = 2}, {.seq = 1, .rows = 3}, {.seq = 2, .rows = 2}},
       {1, 40, 1, 41, 42, 1, 43});
  for (int i = 0; i < 3; ++i) {
    step({{.seq = 0, .rows = 1}, {.seq = 1, .rows = 1}, {.seq = 2, .rows = 1}},
         {50 + i, 60 + i, 70 + i});
  }
  EXPECT_TRUE(b.remove_sequence(1).ok());
  for (int i = 0; i < 2; ++i) step({{.seq = 0, .rows = 1}, {.seq = 2, .rows = 1}}, {80 + i, 90 + i});
  EXPECT_TRUE(b.add_sequence(3, 96).ok());
  step({{.seq = 3, .rows = 2}}, {1, 44});
  for (int i = 0; i < 2; ++i) {
    step({{.seq = 0, .rows = 1}, {.seq = 2, .rows = 1}, {.seq = 3, .rows = 1}},
         {100 + i, 110 + i, 120 + i});
  }
  return out;
}

// decode_script on m with `o`'s graphs off and on: the same logits bit for
// bit; on the emulation one capture a row count (3, 2, and 3 again after
// the new context made the attention scratch anew), a replay every decode
// step after.
void expect_graphs_give_the_same_bits(const Loaded& m, DeviceBackendOptions o) {
  o.graphs = false;
  auto plain = device_backend(m, {0, m.hp.n_layer}, o);
  ASSERT_NE(plain, nullptr);
  const std::vector<std::vector<float>> want = decode_script(*plain);

  o.graphs = true;
  std::unique_ptr<DeviceApi> api = new_api();
  auto* emulated = dynamic_cast<testing::EmulatedDeviceApi*>(api.get());
  auto graphed = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, o, std::move(api));
  ASSERT_TRUE(graphed.ok()) << graphed.status();
  EXPECT_EQ(decode_script(**graphed), want);
  if (emulated != nullptr) {
    EXPECT_EQ(emulated->captures(), 3);
    EXPECT_EQ(emulated->replays(), 7);
  }
}

// Decode steps replayed from captured graphs (DeviceBackendOptions::graphs)
// give the logits of the same steps launched one by one, bit for bit, on
// stories260K and the tiny Q4_K_M llama (expect_graphs_give_the_same_bits).
TEST_P(DeviceBackendSteps, DecodeStepsReplayedFromGraphsGiveTheSameBits) {
  gguf::testing::TempDir dir;
  for (const std::string& path : {stories_path(), tiny_llama(dir, "Q4_K_M")}) {
    SCOPED_TRACE(path);
    Loaded m = open_model(path);
    ASSERT_NE(m.model, nullptr);
    expect_graphs_give_the_same_bits(m, test_options());
  }
}

// A mixture's decode steps are replayed from graphs too, its tokens routed
// on the device (strata_moe_route: no round trip to the host between the
// router and the experts), with the bits of the same steps launched one by
// one: the tiny mixtral (softmax over the experts, renormalised) and
// gpt-oss (softmax over the k, biases by expert), up to 3 decode rows (6
// slots: one launch a matrix). On the emulation, where an
// upload or a download inside a capture fails the step, the graphs were
// used: 3 captures, 7 replays, as a dense model's.
TEST_P(DeviceBackendSteps, MixtureDecodeStepsReplayedFromGraphsGiveTheSameBits) {
  int ran = 0;
  for (const char* name : {"mixtral", "gpt-oss"}) {
    SCOPED_TRACE(name);
    const std::string path = tiny_model_path(name);
    if (!std::filesystem::exists(path)) continue;
    ++ran;
    Loaded m = open_model(path);
    ASSERT_NE(m.model, nullptr);
    ASSERT_GT(m.hp.moe.n_expert, 0);
    expect_graphs_give_the_same_bits(m, test_options(32, 0, /*mma_min_rows=*/0));
  }
  if (ran == 0) GTEST_SKIP() << "no tiny mixtures under " << strata::testing::models_dir() / "tiny"
                             << " (scripts/make-test-models.sh makes them)";
}

// The kernel profile (DeviceBackendOptions::kernel_profile_path): the
// steps' logits are those of a backend that does not profile; every launch
// after the load is counted under its kernel (on the emulation: as many as
// the api ran), none from a graph (graphs are off while profiling); the
// JSON is written when the backend goes, most time first.
TEST_P(DeviceBackendSteps, AKernelProfileCountsEveryLaunchAndChangesNothing) {
  gguf::testing::TempDir dir;
  Loaded m = open_model(stories_path());
  ASSERT_NE(m.model, nullptr);
  auto plain = device_backend(m, {0, m.hp.n_layer}, test_options());
  ASSERT_NE(plain, nullptr);
  const std::vector<std::vector<float>> want = decode_script(*plain);

  DeviceBackendOptions o = test_options();
  o.kernel_profile_path = dir.file("profile.json");
  std::unique_ptr<DeviceApi> api = new_api();
  auto* emulated = dynamic_cast<testing::EmulatedDeviceApi*>(api.get());
  auto profiled = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, o, std::move(api));
  ASSERT_TRUE(profiled.ok()) << profiled.status();
  const int64_t launches_at_load = emulated != nullptr ? emulated->launches() : 0;
  EXPECT_EQ(decode_script(**profiled), want);
  const int64_t launched = emulated != nullptr ? emulated->launches() - launches_at_load : 0;
  if (emulated != nullptr) {
    EXPECT_EQ(emulated->captures(), 0);
  }
  profiled->reset();  // writes the profile

  std::ifstream in(o.kernel_profile_path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << "no profile at " << o.kernel_profile_path;
  ASSERT_TRUE(j["kernels"].is_array());
  ASSERT_FALSE(j["kernels"].empty());
  int64_t counted = 0;
  double total = 0.0, previous = 1e300;
  std::set<std::string> entries;
  for (const nlohmann::json& k : j["kernels"]) {
    counted += k["launches"].get<int64_t>();
    const double ms = k["ms"].get<double>();
    EXPECT_GE(ms, 0.0);
    EXPECT_LE(ms, previous);  // most time first
    previous = ms;
    total += ms;
    entries.insert(k["entry"].get<std::string>());
  }
  EXPECT_NEAR(j["total_ms"].get<double>(), total, 1e-9 * (1.0 + total));
  if (emulated != nullptr) {
    EXPECT_EQ(counted, launched);
  }
  EXPECT_GT(counted, 0);
  for (const char* e : {"strata_matvec3_f32", "strata_rms_norm", "strata_attention_batch"}) {
    EXPECT_EQ(entries.count(e), 1u) << e;
  }

  // A load that fails (a BF16 matrix) writes no profile: the last one stays.
  const std::string bf16 = stories_with_a_bf16_matrix(dir);
  Loaded other = open_model(bf16);
  ASSERT_NE(other.model, nullptr);
  const std::string before = j.dump();
  EXPECT_FALSE(make_device_backend(other.model, other.hp, {0, other.hp.n_layer}, o, new_api()).ok());
  std::ifstream again(o.kernel_profile_path);
  EXPECT_EQ(nlohmann::json::parse(again, nullptr, false).dump(), before);
}

// Two device backends of the whole of stories260K, each with sequences
// [0, n_seq) of 64 positions: `a` to give logits, `b` picks or candidates
// (`emulated` counts b's graphs; null on a GPU).
struct Twins {
  Loaded m;
  std::unique_ptr<Backend> a, b;
  testing::EmulatedDeviceApi* emulated = nullptr;
  bool ok() const { return a != nullptr && b != nullptr; }
};
Twins twin_backends(int n_seq) {
  Twins t;
  t.m = open_model(stories_path());
  if (t.m.model == nullptr) return t;
  std::unique_ptr<DeviceApi> api = new_api();
  t.emulated = dynamic_cast<testing::EmulatedDeviceApi*>(api.get());
  t.a = device_backend(t.m, {0, t.m.hp.n_layer});
  auto b = make_device_backend(t.m.model, t.m.hp, {0, t.m.hp.n_layer}, test_options(),
                               std::move(api));
  EXPECT_TRUE(b.ok()) << b.status();
  t.b = b.ok() ? *std::move(b) : nullptr;
  for (int s = 0; s < n_seq && t.ok(); ++s) {
    EXPECT_TRUE(t.a->add_sequence(s, 64).ok());
    EXPECT_TRUE(t.b->add_sequence(s, 64).ok());
  }
  return t;
}

// One step of `tokens` through a (slices `logits`: kLast or kAll) and b
// (the same slices, some asking for a pick or candidates instead): b's
// logits rows are a's rows of the slices that kept them, its picks
// first_argmax of a's rows, its candidates their top_candidates. Returns
// b's picks and candidates.
struct Picked {
  std::vector<int32_t> argmax, top_ids;
};
Picked expect_picks_of_the_same_logits(Backend& a, Backend& b, const std::vector<int32_t>& tokens,
                                       const std::vector<ForwardSlice>& logits,
                                       const std::vector<ForwardSlice>& picks) {
  ForwardRequest ra, rb;
  ra.tokens = rb.tokens = tokens;
  ra.slices = logits;
  rb.slices = picks;
  ForwardResult oa, ob;
  EXPECT_TRUE(a.forward(ra, &oa).ok());
  EXPECT_TRUE(b.forward(rb, &ob).ok());
  const size_t v = static_cast<size_t>(a.n_vocab());
  std::vector<int32_t> want_argmax, want_ids;
  std::vector<float> want_values;
  size_t row = 0, kept = 0;
  for (size_t i = 0; i < picks.size(); ++i) {
    const size_t rows = logits[i].logits == Logits::kAll ? static_cast<size_t>(logits[i].rows) : 1;
    if (oa.logits.size() < (row + rows) * v) {
      ADD_FAILURE() << "a gave " << oa.logits.size() << " logits";
      return {};
    }
    const auto a_row = oa.logits.subspan(row * v, v);
    if (picks[i].logits == Logits::kTopK) {
      const size_t k = static_cast<size_t>(picks[i].top_k);
      want_ids.resize(want_ids.size() + k);
      want_values.resize(want_values.size() + k);
      top_candidates(a_row, picks[i].top_k, want_ids.data() + want_ids.size() - k,
                     want_values.data() + want_values.size() - k);
    } else if (picks[i].logits == Logits::kArgmax) {
      want_argmax.push_back(first_argmax(a_row));
    } else {
      EXPECT_GE(ob.logits.size(), (kept + rows) * v);
      if (ob.logits.size() >= (kept + rows) * v) {
        EXPECT_TRUE(std::equal(oa.logits.begin() + row * v, oa.logits.begin() + (row + rows) * v,
                               ob.logits.begin() + kept * v));
      }
      kept += rows;
    }
    row += rows;
  }
  EXPECT_EQ(ob.logits.size(), kept * v);
  Picked got{{ob.argmax.begin(), ob.argmax.end()}, {ob.top_ids.begin(), ob.top_ids.end()}};
  EXPECT_EQ(got.argmax, want_argmax);
  EXPECT_EQ(got.top_ids, want_ids);
  EXPECT_EQ(std::vector<float>(ob.top_logits.begin(), ob.top_logits.end()), want_values);
  return got;
}

// Logits::kArgmax on the device (strata_argmax_rows): the picks of a step
// are first_argmax of the logits the same step gives to kLast slices, the
// other slices' logits unchanged; in a prompt step beside kLast and kAll
// slices, then in decode steps of picks only (replayed from their own
// graph: one capture, then replays).
TEST_P(DeviceBackendSteps, ArgmaxSlicesArePickedOnTheDevice) {
  Twins t = twin_backends(3);
  ASSERT_TRUE(t.ok());
  Backend* a = t.a.get();
  Backend* b = t.b.get();
  testing::EmulatedDeviceApi* emulated = t.emulated;
  std::vector<ForwardSlice> logits = {{.seq = 0, .rows = 2, .logits = Logits::kLast},
                                      {.seq = 1, .rows = 3, .logits = Logits::kAll},
                                      {.seq = 2, .rows = 1, .logits = Logits::kLast}};
  std::vector<ForwardSlice> picks = logits;
  picks[0].logits = Logits::kArgmax;
  picks[2].logits = Logits::kArgmax;
  std::vector<int32_t> tokens = {1, 403, 1, 261, 378, 1};
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Picked ob = expect_picks_of_the_same_logits(*a, *b, tokens, logits, picks);
    ASSERT_FALSE(ob.argmax.empty());
    // Decode steps: every sequence one row, a only logits, b only picks.
    tokens = {ob.argmax[0], 300 + step, ob.argmax.back()};
    for (int s = 0; s < 3; ++s) {
      logits[static_cast<size_t>(s)] = {.seq = s, .rows = 1, .logits = Logits::kLast};
      picks[static_cast<size_t>(s)] = {.seq = s, .rows = 1, .logits = Logits::kArgmax};
    }
  }
  if (emulated != nullptr) {
    EXPECT_EQ(emulated->captures(), 1);
    EXPECT_EQ(emulated->replays(), 3);
  }
}

// Logits::kTopK on the device (strata_top_k_rows): each kTopK slice's
// candidates are top_candidates of the logits the same step gives a kLast
// slice (ids and values), beside kArgmax, kLast and kAll slices; then decode
// steps of candidates only, k 1, 40 and the whole vocabulary (replayed
// from their own graph: one capture, then replays).
TEST_P(DeviceBackendSteps, TopKSlicesGetTheirCandidatesFromTheDevice) {
  Twins t = twin_backends(4);
  ASSERT_TRUE(t.ok());
  Backend* a = t.a.get();
  Backend* b = t.b.get();
  testing::EmulatedDeviceApi* emulated = t.emulated;
  const int v = a->n_vocab();
  std::vector<ForwardSlice> logits = {{.seq = 0, .rows = 2, .logits = Logits::kLast},
                                      {.seq = 1, .rows = 3, .logits = Logits::kAll},
                                      {.seq = 2, .rows = 1, .logits = Logits::kLast},
                                      {.seq = 3, .rows = 2, .logits = Logits::kLast}};
  std::vector<ForwardSlice> picks = logits;
  picks[0] = {.seq = 0, .rows = 2, .logits = Logits::kTopK, .top_k = 40};
  picks[2].logits = Logits::kArgmax;
  picks[3] = {.seq = 3, .rows = 2, .logits = Logits::kTopK, .top_k = v};
  std::vector<int32_t> tokens = {1, 403, 1, 261, 378, 1, 1, 40};
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Picked ob = expect_picks_of_the_same_logits(*a, *b, tokens, logits, picks);
    ASSERT_FALSE(ob.top_ids.empty());
    // Decode steps: every sequence one row, a only logits, b only candidates.
    tokens = {ob.top_ids[0], 300 + step, 5 + step, ob.top_ids.back()};
    const int ks[] = {1, 40, v, 7};
    for (int s = 0; s < 4; ++s) {
      logits[static_cast<size_t>(s)] = {.seq = s, .rows = 1, .logits = Logits::kLast};
      picks[static_cast<size_t>(s)] = {.seq = s, .rows = 1, .logits = Logits::kTopK, .top_k = ks[s]};
    }
  }
  if (emulated != nullptr) {
    EXPECT_EQ(emulated->captures(), 1);
    EXPECT_EQ(emulated->replays(), 3);
  }
}

// A head whose weights hold a NaN (stories260K's output.weight, token 17's
// row): a step picking on the device (kArgmax) or selecting candidates
// there (kTopK) is refused as a step downloading the logits (kLast) is,
// naming the row and token, and none changes the sequence.
TEST_P(DeviceBackendSteps, APickedRowThatIsNotFiniteIsRefusedAndChangesNothing) {
  gguf::testing::TempDir dir;
  const std::string path = dir.file("nan-head.gguf");
  ASSERT_TRUE(write_converted_copy(
                  stories_path(), path, [](const gguf::TensorInfo& t) { return t.type; },
                  [](const gguf::TensorInfo& t, std::span<uint8_t> bytes) {
                    if (t.name != "output.weight") return;
                    const float nan = std::numeric_limits<float>::quiet_NaN();
                    std::memcpy(bytes.data() + (17 * t.shape[0] + 3) * sizeof(float), &nan,
                                sizeof nan);
                  })
                  .ok());
  Loaded m = open_model(path);
  ASSERT_NE(m.model, nullptr);
  auto b = device_backend(m, {0, m.hp.n_layer});
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->add_sequence(0, 16).ok());
  for (const Logits kind : {Logits::kArgmax, Logits::kTopK, Logits::kLast}) {
    const std::vector<int32_t> tokens = {1, 403};
    const ForwardSlice slice{.seq = 0, .rows = 2, .logits = kind, .top_k = 5};
    ForwardRequest req;
    req.tokens = tokens;
    req.slices = std::span<const ForwardSlice>(&slice, 1);
    ForwardResult r;
    const absl::Status st = b->forward(req, &r);
    EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
    EXPECT_NE(st.message().find("logit row 0 token 17 is not finite (nan)"), std::string::npos)
        << st;
    EXPECT_EQ(*b->sequence_length(0), 0);
  }
}

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

// No kernel build the backend launches depends on the order its threads
// run in: a 70-row prompt on the tensor cores (int8 mma.sync, flash
// attention) then decode steps give the same bits in each of the emulation's other
// schedules (cuda_emulator.h Schedule: reversed, shuffled, each warp alone
// ahead of the others) as in the first, for a tiny llama in Q4_K_M and the
// tiny mixtral (its routing, the prompt's gathered experts, the decode
// steps' expert slots). The kernel tests run each kernel in every schedule
// at their own builds; these are the backend's (step_kernels.h).
TEST(DeviceBackendLaunches, StepsGiveTheSameBitsWhateverOrderThreadsRunIn) {
  using cuda_emulation::Schedule;
  gguf::testing::TempDir dir;
  std::vector<std::string> paths = {tiny_llama(dir, "Q4_K_M")};
  if (std::filesystem::exists(tiny_model_path("mixtral"))) {
    paths.push_back(tiny_model_path("mixtral"));
  }
  // 70 rows in one step (flash attention over two steps of keys).
  std::vector<int32_t> prompt;
  for (int t = 0; t < 70; ++t) prompt.push_back(1 + (t * 37) % 250);
  const std::vector<int32_t> next = {21, 90, 150};
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    Loaded m = open_model(path);
    ASSERT_NE(m.model, nullptr);
    const auto run = [&](Schedule schedule) {
      const cuda_emulation::ScheduleScope scope(schedule);
      auto b = make_device_backend(m.model, m.hp, {0, m.hp.n_layer},
                                   test_options(/*max_batch=*/96, 0, /*mma_min_rows=*/8),
                                   testing::emulated_step_device());
      EXPECT_TRUE(b.ok()) << b.status();
      std::vector<std::vector<float>> logits;
      if (b.ok()) logits = logits_alone(**b, 0, prompt, next, /*n_ctx=*/128);
      return logits;
    };
    const std::vector<std::vector<float>> first = run(Schedule::kInOrder);
    ASSERT_EQ(first.size(), next.size() + 1);
    for (const Schedule schedule : cuda_emulation::kSchedules) {
      if (schedule == Schedule::kInOrder) continue;
      SCOPED_TRACE(cuda_emulation::schedule_name(schedule));
      const std::vector<std::vector<float>> other = run(schedule);
      ASSERT_EQ(other.size(), first.size());
      for (size_t step = 0; step < first.size(); ++step) {
        ASSERT_EQ(other[step].size(), first[step].size());
        EXPECT_EQ(std::memcmp(other[step].data(), first[step].data(),
                              first[step].size() * sizeof(float)),
                  0)
            << "step " << step;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(On, DeviceBackendSteps, ::testing::Values("emulated", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace strata::worker::device_test
