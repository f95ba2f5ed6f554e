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
#include "tests/cuda/device_backend_fixture.h"
#include "tests/cuda/emulated_step_kernels.h"
#include "tests/test_paths.h"
#include "worker/head_picks.h"

namespace strata::worker::device_test {
namespace {

class DeviceBackendSteps : public DeviceBackend {};

// A script of steps: three sequences' prompts in one step, three decode
// steps of all three, one sequence removed, two decode steps of two, a new
// sequence of a longer context (the attention scratch is made anew) and its
// prompt, two decode steps of three. Returns each step's logits.
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

INSTANTIATE_TEST_SUITE_P(On, DeviceBackendSteps, ::testing::Values("emulated", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace strata::worker::device_test
