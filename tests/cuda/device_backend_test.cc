// The device backend (worker/cuda/device_backend.h), every case twice: on
// the CPU emulation of the device (tests/cuda/emulated_step_kernels.h: the
// kernel sources compiled for the host), which runs everywhere, and on a
// GPU (make_cuda_device_api(0): NVRTC, cudart), which skips, saying "no
// CUDA device: ...", without one. Against the cpu backend: the same logits within
// the activations' rounding, the same greedy ids where the top two logits
// are not a near-tie, bit-identical results however a step is batched or
// the model split across device backends, the KV rows of the prefix cache,
// and the refusals of what the kernels do not run (the fixture:
// device_backend_fixture.h; graphs and device picks:
// device_backend_steps_test.cc; the tuner: device_backend_tuner_test.cc;
// the launches of a step: device_backend_launches_test.cc).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "tests/cuda/device_backend_fixture.h"
#include "tests/cuda/emulated_step_kernels.h"
#include "tests/model/gguf_test_util.h"
#include "tests/test_paths.h"
#include "worker/backend.h"
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/device_api.h"
#include "worker/cuda/device_backend.h"
#include "worker/cuda/kernel_tuner.h"

namespace strata::worker::device_test {
namespace {

int argmax(std::span<const float> v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

// The gap between the largest and the second largest of v.
float top_gap(std::span<const float> v) {
  std::vector<float> s(v.begin(), v.end());
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
  return s[0] - s[1];
}

struct Agreement {
  int decided = 0;  // steps whose picks were decided (no near-tie)
};

// Teacher-forced greedy decoding: the prompt, then `steps` tokens, each the
// cpu backend's pick, through both backends. At every step the logits agree
// within `tolerance` (absolute, after the largest magnitude is 1) and the
// picks agree unless the cpu's top two are within 2 x tolerance (a
// near-tie: both picks are right to that rounding). Returns the steps whose
// picks were decided, so a test can ask that most were.
Agreement compare_greedy(Backend& cpu, Backend& device, std::vector<int32_t> prompt, int steps,
                         float tolerance) {
  EXPECT_TRUE(cpu.add_sequence(0, 128).ok());
  EXPECT_TRUE(device.add_sequence(0, 128).ok());
  Agreement agreed;
  std::vector<int32_t> tokens = std::move(prompt);
  for (int step = 0; step < steps; ++step) {
    ForwardRequest req;
    req.tokens = tokens;
    ForwardResult a, b;
    absl::Status sa = cpu.forward(req, &a);
    absl::Status sb = device.forward(req, &b);
    EXPECT_TRUE(sa.ok()) << sa;
    EXPECT_TRUE(sb.ok()) << sb;
    if (!sa.ok() || !sb.ok()) return agreed;
    EXPECT_EQ(a.logits.size(), b.logits.size());
    float scale = 0.0f;
    for (float v : a.logits) scale = std::max(scale, std::fabs(v));
    float worst = 0.0f;
    for (size_t i = 0; i < a.logits.size(); ++i) {
      worst = std::max(worst, std::fabs(a.logits[i] - b.logits[i]) / scale);
    }
    EXPECT_LE(worst, tolerance) << "step " << step << ": logits differ by " << worst
                                << " of the largest";
    const int pick = argmax(a.logits);
    if (top_gap(a.logits) / scale > 2 * tolerance) {
      ++agreed.decided;
      EXPECT_EQ(argmax(b.logits), pick) << "step " << step;
    }
    tokens = {pick};
  }
  return agreed;
}

// stories260K (F32 matrices, 172-wide feed-forward rows): both backends
// sum F32 products in float, in other orders, and round K and V to f16;
// the logits agree to ~4e-4 of the largest over 24 steps.
TEST_P(DeviceBackend, GreedyAgreesWithTheCpuBackendOnStories260K) {
  Loaded m = open_model(stories_path());
  ASSERT_NE(m.model, nullptr);
  auto cpu = cpu_backend(m, {0, m.hp.n_layer});
  auto device = device_backend(m, {0, m.hp.n_layer});
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->name(), "cuda");
  EXPECT_EQ(device->n_vocab(), cpu->n_vocab());
  const Agreement agreed = compare_greedy(*cpu, *device, {1, 403, 407, 261, 378}, 24, 1e-3f);
  EXPECT_GE(agreed.decided, 20);
}

// The tiny llama with its matrices in each type the kernels read, its
// 6-row prompt on the tensor cores (mma_min_rows 2; F32 and F16 matrices
// stay on the matvec kernel) and its decode rows on the matvec kernel. The
// cpu backend rounds activations to 8 bits for quantized weights (as
// llama.cpp's CPU path), the device to f16 on the tensor cores and not at
// all in the matvec kernel: logits agree to ~1-3 %.
class DeviceBackendTypes
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(DeviceBackendTypes, GreedyAgreesWithTheCpuBackendOnATinyLlama) {
  STRATA_ON_DEVICE(std::get<0>(GetParam()));
  const std::string type_name = std::get<1>(GetParam());
  gguf::testing::TempDir dir;
  Loaded m = open_model(tiny_llama(dir, type_name));
  ASSERT_NE(m.model, nullptr);
  auto cpu = cpu_backend(m, {0, m.hp.n_layer});
  auto device = device_backend(m, {0, m.hp.n_layer}, test_options(32, 0, /*mma_min_rows=*/2));
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(device, nullptr);
  const float tolerance = type_name == "F32" ? 1e-3f : 3e-2f;
  const Agreement agreed =
      compare_greedy(*cpu, *device, {1, 300, 301, 302, 303, 40}, 8, tolerance);
  EXPECT_GE(agreed.decided, 4);
}

// Each of `tokens` alone in a new sequence (a one-row step, every row on
// the matrix x columns kernel when the device's mma_min_rows is 0), or each
// run of `rows` of them (a prompt: on the tensor cores when rows reaches
// mma_min_rows), through both backends: how many steps' logits agree
// within `close` of the largest, and the largest difference of any.
struct OneTokenSteps {
  int close = 0;
  float worst = 0.0f;
};
OneTokenSteps one_token_steps(Backend& cpu, Backend& device, const std::vector<int32_t>& tokens,
                              float close, size_t rows = 1) {
  OneTokenSteps out;
  for (size_t i = 0; i + rows <= tokens.size(); i += rows) {
    const int seq = static_cast<int>(i) + 1;
    EXPECT_TRUE(cpu.add_sequence(seq, 16).ok());
    EXPECT_TRUE(device.add_sequence(seq, 16).ok());
    ForwardRequest req;
    req.seq = seq;
    req.tokens = std::span<const int32_t>(tokens).subspan(i, rows);
    ForwardResult a, b;
    EXPECT_TRUE(cpu.forward(req, &a).ok());
    EXPECT_TRUE(device.forward(req, &b).ok());
    if (a.logits.size() != b.logits.size() || a.logits.empty()) {
      ADD_FAILURE() << "token " << tokens[i] << ": " << a.logits.size() << " and "
                    << b.logits.size() << " logits";
      return out;
    }
    float scale = 0.0f, worst = 0.0f;
    for (float v : a.logits) scale = std::max(scale, std::fabs(v));
    for (size_t j = 0; j < a.logits.size(); ++j) {
      worst = std::max(worst, std::fabs(a.logits[j] - b.logits[j]) / scale);
    }
    out.worst = std::max(out.worst, worst);
    if (worst <= close) ++out.close;
  }
  return out;
}

// The device rounds each matrix's input rows as the cpu backend does
// (DeviceMatrix::round: f16 for F16 weights, Q8_0 values for the legacy
// quants and MXFP4, Q8_K values for the K-quants), so a one-row step's
// logits are the cpu backend's up to float summation order: 1e-5 of the
// largest for the integer products of the quantized types, 1e-4 for F32
// and F16 rows (float products in other orders). A step whose activation
// the two sums put on either side of an 8-bit rounding step differs by one
// quantum of it (~2-6e-3 of the largest, measured): most steps do not.
// Unrounded, no step of a quantized type or F16 was close (measured: 0 of
// 12 each; rounded: 9 of 12 for F16, 11-12 for the others). Q4_1 and Q5_1
// were 0 of 12 on the float kernel (the cpu backend multiplies their
// offsets by Q8_1's s = f16(d sum q), which rounded values do not carry)
// and are 12 and 11 on the int8 one, which takes s with the rows.
TEST_P(DeviceBackendTypes, OneRowStepsGiveTheCpuBackendsLogits) {
  STRATA_ON_DEVICE(std::get<0>(GetParam()));
  const std::string type_name = std::get<1>(GetParam());
  gguf::testing::TempDir dir;
  Loaded m = open_model(tiny_llama(dir, type_name));
  ASSERT_NE(m.model, nullptr);
  auto cpu = cpu_backend(m, {0, m.hp.n_layer});
  auto device = device_backend(m, {0, m.hp.n_layer}, test_options(32, 0, /*mma_min_rows=*/0));
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(device, nullptr);
  const bool floats = type_name == "F32" || type_name == "F16";
  const OneTokenSteps steps = one_token_steps(
      *cpu, *device, {1, 40, 97, 300, 301, 333, 402, 511, 7, 250, 123, 64}, floats ? 1e-4f : 1e-5f);
  EXPECT_LE(steps.worst, 1e-2f);
  EXPECT_GE(steps.close, 9) << "of 12; the largest difference " << steps.worst;
}

// Prompt slices on the tensor cores (mma_min_rows 2): the types with an
// int8 kernel (mma3_i8_entry) multiply the rows' Q8 values by the weights'
// q exactly, so a 6-row prompt's logits are the cpu backend's up to float
// summation order as on the matrix x columns kernel (most of 8 prompts
// within 1e-5 of the largest, the others one rounding step's quantum off;
// measured 5 to 8 of 8, Q5_1 5 where its prompts on the matrix x columns
// kernel alone give 7, each order flipping other steps), where the f16
// kernel (mma_int8 false) rounds both to f16 (~1e-3: none within 1e-5).
TEST_P(DeviceBackendTypes, PromptsOnTheInt8TensorCoresGiveTheCpuBackendsLogits) {
  STRATA_ON_DEVICE(std::get<0>(GetParam()));
  const std::string type_name = std::get<1>(GetParam());
  gguf::testing::TempDir dir;
  Loaded m = open_model(tiny_llama(dir, type_name));
  ASSERT_NE(m.model, nullptr);
  if (type_name == "F32" || type_name == "F16") {
    GTEST_SKIP() << type_name << " has no int8 tensor-core kernel (the block types have)";
  }
  std::vector<int32_t> prompts;
  for (int i = 0; i < 48; ++i) prompts.push_back(1 + (i * 37) % 500);
  for (const bool use_int8 : {true, false}) {
    SCOPED_TRACE(use_int8 ? "int8" : "f16");
    auto cpu = cpu_backend(m, {0, m.hp.n_layer});
    DeviceBackendOptions o = test_options(32, 0, /*mma_min_rows=*/2);
    o.mma_int8 = use_int8;
    o.flash_attention = false;  // its f16 probabilities would hide the matrices' numbers
    auto device = device_backend(m, {0, m.hp.n_layer}, o);
    ASSERT_NE(cpu, nullptr);
    ASSERT_NE(device, nullptr);
    const OneTokenSteps steps = one_token_steps(*cpu, *device, prompts, 1e-5f, 6);
    EXPECT_LE(steps.worst, 3e-2f);
    if (use_int8) {
      EXPECT_GE(steps.close, 5) << "of 8; the largest difference " << steps.worst;
    } else {
      EXPECT_EQ(steps.close, 0) << "of 8; the largest difference " << steps.worst;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, DeviceBackendTypes,
    ::testing::Combine(::testing::Values("emulated", "cuda"),
                       ::testing::Values("F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                                         "MXFP4", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M")),
    [](const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& p) {
      return std::get<0>(p.param) + "_" + std::get<1>(p.param);
    });

// The tiny models of scripts/make-test-models.sh, every family strata runs:
// qwen2's q/k/v biases, qwen3's QK-norm, llama3's RoPE frequency factors,
// linear RoPE scaling and qwen2's YaRN, gemma2 (post-norms, GeGLU, soft
// caps, sliding windows), phi3 (fused projections), the mixtures of experts
// (mixtral, qwen2moe's shared expert, qwen3moe, olmoe's whole-row QK-norm,
// gpt-oss's sinks, biases and clamped SwiGLU). Their Q8_0 (and MXFP4)
// matrices copied as F32: with quantized weights the cpu backend rounds the
// activations to 8 bits and the device does not, which on these
// random-weight models moves logits by up to ~9 % of the largest (measured);
// with F32 both sum f32 products and agree to ~2e-4 when every row runs the
// matvec and attention.cuh kernels. Here the 6-row prompt takes the
// tensor-core path (mma_min_rows 2: its attention is flash attention, its
// F32 matrices stay on the matvec kernel), whose f16 rounding of the
// unnormalised probabilities moved phi3's logits by 1.05e-3 of the largest
// (measured): 2e-3.
class DeviceBackendTinyModels
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(DeviceBackendTinyModels, GreedyAgreesWithTheCpuBackend) {
  STRATA_ON_DEVICE(std::get<0>(GetParam()));
  STRATA_TINY_MODEL_OR_SKIP(path, std::get<1>(GetParam()));
  gguf::testing::TempDir dir;
  const std::string f32 = dir.file("f32.gguf");
  ASSERT_TRUE(write_converted_copy(path, f32, matrices_as(GgmlType::kF32)).ok());
  Loaded m = open_model(f32);
  ASSERT_NE(m.model, nullptr);
  auto cpu = cpu_backend(m, {0, m.hp.n_layer});
  auto device = device_backend(m, {0, m.hp.n_layer}, test_options(32, 0, /*mma_min_rows=*/2));
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(device, nullptr);
  const Agreement agreed = compare_greedy(*cpu, *device, {1, 300, 301, 302, 303, 40}, 6, 2e-3f);
  EXPECT_GE(agreed.decided, 4);
}

// The same models in their own types (Q8_0 matrices; gpt-oss's experts
// MXFP4), one-row steps on the matrix x columns kernel: most give the cpu
// backend's logits up to float summation order (see
// DeviceBackendTypes.OneRowStepsGiveTheCpuBackendsLogits; measured: 9 to 12
// of 12, a rounding step's quantum up to 1.4e-2 of the largest; unrounded,
// none of 12 on any model).
TEST_P(DeviceBackendTinyModels, TheirOwnTypesGiveTheCpuBackendsLogits) {
  STRATA_ON_DEVICE(std::get<0>(GetParam()));
  STRATA_TINY_MODEL_OR_SKIP(path, std::get<1>(GetParam()));
  Loaded m = open_model(path);
  ASSERT_NE(m.model, nullptr);
  auto cpu = cpu_backend(m, {0, m.hp.n_layer});
  auto device = device_backend(m, {0, m.hp.n_layer}, test_options(32, 0, /*mma_min_rows=*/0));
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(device, nullptr);
  const OneTokenSteps steps =
      one_token_steps(*cpu, *device, {1, 40, 97, 300, 301, 333, 402, 511, 7, 250, 123, 64}, 1e-5f);
  EXPECT_LE(steps.worst, 2e-2f);
  EXPECT_GE(steps.close, 9) << "of 12; the largest difference " << steps.worst;
}

INSTANTIATE_TEST_SUITE_P(
    Tiny, DeviceBackendTinyModels,
    ::testing::Combine(::testing::Values("emulated", "cuda"),
                       ::testing::Values("qwen2", "qwen3", "llama3", "llama-linear",
                                         "qwen2-yarn", "gemma2", "phi3", "mixtral", "qwen2moe",
                                         "qwen3moe", "olmoe", "gpt-oss")),
    [](const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& p) {
      std::string name = std::get<0>(p.param) + "_" + std::get<1>(p.param);
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

// Three sequences' prompts (3, 1 and 5 rows) in one step and then their
// decode rows in steps of three, on backends of options `o`: each
// sequence's logits bit for bit as running alone.
void expect_batch_invariant(const Loaded& m, const DeviceBackendOptions& o) {
  const std::vector<std::vector<int32_t>> prompts = {{1, 403, 407}, {1}, {1, 261, 378, 403, 40}};
  const std::vector<std::vector<int32_t>> next = {{300, 301}, {5, 6}, {100, 7}};
  std::vector<std::vector<std::vector<float>>> alone;
  for (int s = 0; s < 3; ++s) {
    auto b = device_backend(m, {0, m.hp.n_layer}, o);
    ASSERT_NE(b, nullptr);
    alone.push_back(logits_alone(*b, s, prompts[s], next[s]));
  }
  auto b = device_backend(m, {0, m.hp.n_layer}, o);
  ASSERT_NE(b, nullptr);
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(b->add_sequence(s, 64).ok());
  std::vector<int32_t> tokens;
  std::vector<ForwardSlice> slices;
  for (int s = 0; s < 3; ++s) {
    tokens.insert(tokens.end(), prompts[s].begin(), prompts[s].end());
    slices.push_back({.seq = s, .rows = static_cast<int>(prompts[s].size())});
  }
  const size_t v = static_cast<size_t>(b->n_vocab());
  for (int step = 0; step < 3; ++step) {
    ForwardRequest req;
    req.tokens = tokens;
    req.slices = slices;
    ForwardResult r;
    ASSERT_TRUE(b->forward(req, &r).ok());
    ASSERT_EQ(r.logits.size(), 3 * v);
    for (int s = 0; s < 3; ++s) {
      const std::vector<float> got(r.logits.begin() + s * v, r.logits.begin() + (s + 1) * v);
      EXPECT_EQ(got, alone[s][static_cast<size_t>(step)]) << "sequence " << s << ", step " << step;
    }
    if (step == 2) break;
    tokens.clear();
    slices.clear();
    for (int s = 0; s < 3; ++s) {
      tokens.push_back(next[s][static_cast<size_t>(step)]);
      slices.push_back({.seq = s, .rows = 1});
    }
  }
}

// Whether a prompt's logits depend on how it is cut into chunks: the
// scheduler cuts prompts by the load (SchedulerOptions::
// prefill_chunk_beside_decode). Returns the first difference ("" when the
// prompt's last row and two decode steps after it are the same bits for
// every chunking).
std::string chunking_difference(const Loaded& m, const DeviceBackendOptions& o) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 24; ++i) prompt.push_back(1 + (i * 37) % 500);
  const std::vector<int32_t> next = {300, 301};
  const std::vector<std::vector<int>> chunkings = {{24}, {1, 2, 21}, {5, 19}, {12, 11, 1}};
  std::vector<std::vector<float>> want;
  for (size_t c = 0; c < chunkings.size(); ++c) {
    auto b = device_backend(m, {0, m.hp.n_layer}, o);
    if (b == nullptr || !b->add_sequence(0, 64).ok()) return "no backend";
    std::vector<std::vector<float>> got;
    int at = 0;
    for (int n : chunkings[c]) {
      const std::vector<int32_t> tokens(prompt.begin() + at, prompt.begin() + at + n);
      at += n;
      const Logits l = at == 24 ? Logits::kLast : Logits::kNone;
      std::vector<float> r = forward_logits(*b, tokens, {{.seq = 0, .rows = n, .logits = l}});
      if (l == Logits::kLast) got.push_back(std::move(r));
    }
    for (int32_t t : next) got.push_back(forward_logits(*b, {t}, {{.seq = 0, .rows = 1}}));
    if (c == 0) {
      want = got;
      continue;
    }
    for (size_t k = 0; k < got.size(); ++k) {
      if (got[k] != want[k]) {
        return "chunking " + std::to_string(c) + ", " +
               (k == 0 ? std::string("the prompt's last row") : "decode step " + std::to_string(k));
      }
    }
  }
  return "";
}

// On the matvec kernels (every slice under mma_min_rows) a row's logits do
// not depend on its chunk, as on the cpu backend (ChunkInvariance). With
// the tensor cores they do, by rounding: a slice's matrix kernel depends on
// its rows (mma_min_rows), and so does its attention (a one-row slice takes
// the decode kernel). On the emulation, a Q4_K_M tiny llama with
// mma_min_rows 3 (int8 and f16 kernels) or 1 moved its prompt's last logits
// under one of these chunkings or another. So the coordinator cuts prompts by
// the load (prefill_chunk_beside_decode) only when every stage runs on the
// cpu backend, unless told to (coordinator/cluster_config.h).
TEST_P(DeviceBackend, ChunkingAPromptOnTheMatvecKernelsKeepsItsLogits) {
  gguf::testing::TempDir dir;
  Loaded m = open_model(tiny_llama(dir, "Q4_K_M"));
  ASSERT_NE(m.model, nullptr);
  EXPECT_EQ(chunking_difference(m, test_options(32, 0, /*mma_min_rows=*/1000)), "");
  Loaded stories = open_model(stories_path());
  ASSERT_NE(stories.model, nullptr);
  EXPECT_EQ(chunking_difference(stories, test_options(32, 0, /*mma_min_rows=*/1000)), "");
}

// Batch invariance on the device (stories260K: F32, every row on the
// matvec kernel).
// Embedding slices (worker/embedding_pool.h): the device backend downloads
// their rows and norms them on the host; its vectors are the cpu backend's
// within what their hidden rows differ by (the logits agree to ~4e-4 of the
// largest, above), beside a logits slice in the same step, over a prompt
// step and a decode step.
TEST_P(DeviceBackend, EmbeddingSlicesGiveTheCpuBackendsVectors) {
  Loaded m = open_model(stories_path());
  ASSERT_NE(m.model, nullptr);
  auto cpu = cpu_backend(m, {0, m.hp.n_layer});
  auto device = device_backend(m, {0, m.hp.n_layer}, test_options());
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(device, nullptr);
  for (int seq = 0; seq < 3; ++seq) {
    ASSERT_TRUE(cpu->add_sequence(seq, 64).ok());
    ASSERT_TRUE(device->add_sequence(seq, 64).ok());
  }
  std::vector<ForwardSlice> slices = {{.seq = 0, .rows = 5, .logits = Logits::kEmbedSum},
                                      {.seq = 1, .rows = 2, .logits = Logits::kLast},
                                      {.seq = 2, .rows = 3, .logits = Logits::kEmbedLast}};
  std::vector<int32_t> tokens = {1, 403, 261, 378, 9, 1, 77, 1, 300, 45};
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    ForwardRequest req;
    req.tokens = tokens;
    req.slices = slices;
    ForwardResult a, b;
    ASSERT_TRUE(cpu->forward(req, &a).ok());
    ASSERT_TRUE(device->forward(req, &b).ok());
    ASSERT_EQ(a.logits.size(), static_cast<size_t>(cpu->n_vocab()));
    ASSERT_EQ(b.logits.size(), a.logits.size());
    const size_t e = static_cast<size_t>(m.hp.n_embd);
    ASSERT_EQ(a.embeddings.size(), 2 * e);
    ASSERT_EQ(b.embeddings.size(), 2 * e);
    for (size_t v = 0; v < 2; ++v) {
      double err = 0, norm = 0;
      for (size_t c = v * e; c < (v + 1) * e; ++c) {
        err += (a.embeddings[c] - b.embeddings[c]) * (a.embeddings[c] - b.embeddings[c]);
        norm += a.embeddings[c] * a.embeddings[c];
      }
      ASSERT_GT(norm, 0.0);
      EXPECT_LT(std::sqrt(err / norm), 2e-3) << "vector " << v;
    }
    // A decode step: one row each, the sum of one row its last row.
    tokens = {17, 18, 19};
    for (ForwardSlice& f : slices) f.rows = 1;
  }
}

TEST_P(DeviceBackend, ABatchedStepGivesEachSequenceItsLogitsAlone) {
  Loaded m = open_model(stories_path());
  ASSERT_NE(m.model, nullptr);
  expect_batch_invariant(m, test_options());
}

// The same with the tensor cores: a Q4_K_M tiny llama whose slices of 3
// rows or more run on the tensor-core kernel (the 3- and 5-row prompts;
// the 1-row prompt and the decode rows on the matvec kernel, beside them
// in one step).
TEST_P(DeviceBackend, TensorCoreSlicesStayBatchInvariant) {
  gguf::testing::TempDir dir;
  Loaded m = open_model(tiny_llama(dir, "Q4_K_M"));
  ASSERT_NE(m.model, nullptr);
  expect_batch_invariant(m, test_options(32, 0, /*mma_min_rows=*/3));
  // The f16 kernels: mma.sync's and, on sm_90 (the emulation reporting
  // 9.0, or a GPU that is), the warpgroup one's 128-token tiles.
  DeviceBackendOptions f16 = test_options(32, 0, /*mma_min_rows=*/3);
  f16.mma_int8 = false;
  for (const int cc : device_kind == "emulated" ? std::vector<int>{80, 90} : std::vector<int>{0}) {
    SCOPED_TRACE("f16, compute " + std::to_string(cc));
    EmulatedComputeCapability scoped(cc);
    expect_batch_invariant(m, f16);
  }
}

// Decode rows longer than a chunk attend split over blocks (attention_splits
// 4, chunks of at least 4 keys: every decode row past its 4th position
// here): greedy ids agree with the cpu backend as the unsplit form's do,
// and a step mixing split rows with one-chunk rows gives each sequence the
// logits it gets alone, where its early steps take strata_attention_batch
// (the split kernels give a one-chunk row its bits); decode graphs on (one
// a form). The quantized tiny llama's o takes the int8 rows the split
// launch makes.
TEST_P(DeviceBackend, LongDecodeContextsSplitOverBlocksAgreeAndStayBatchInvariant) {
  DeviceBackendOptions o = test_options();
  o.attention_splits = 4;
  o.attention_split_keys = 4;
  {
    Loaded m = open_model(stories_path());
    ASSERT_NE(m.model, nullptr);
    auto cpu = cpu_backend(m, {0, m.hp.n_layer});
    auto device = device_backend(m, {0, m.hp.n_layer}, o);
    ASSERT_NE(cpu, nullptr);
    ASSERT_NE(device, nullptr);
    const Agreement agreed = compare_greedy(*cpu, *device, {1, 403, 407, 261, 378}, 24, 1e-3f);
    EXPECT_GE(agreed.decided, 20);
    expect_batch_invariant(m, o);
  }
  gguf::testing::TempDir dir;
  Loaded m = open_model(tiny_llama(dir, "Q4_K_M"));
  ASSERT_NE(m.model, nullptr);
  expect_batch_invariant(m, o);
  auto cpu = cpu_backend(m, {0, m.hp.n_layer});
  auto device = device_backend(m, {0, m.hp.n_layer}, o);
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(device, nullptr);
  const Agreement agreed = compare_greedy(*cpu, *device, {1, 300, 301, 302, 303, 40}, 12, 3e-2f);
  EXPECT_GE(agreed.decided, 8);
}

// A mixture's steps of few rows multiply each expert matrix's (row,
// expert) slots in one launch (moe_slots: strata_matvec_ids_*), larger ones
// gather each used expert's rows: the same bits either way. The tiny
// mixtures in their own types (Q8_0 matrices; gpt-oss's experts MXFP4,
// with biases and the clamped SwiGLU; qwen2moe's shared expert), 8 experts,
// 2 a token: a 5-row prompt (10 slots: one launch a matrix) and 4 decode
// steps, with moe_slots on and off, bit for bit; and gpt-oss's batch
// invariance, where the 9-row first step (18 slots, past 16) gathers and
// each sequence alone takes the slots.
TEST_P(DeviceBackend, ExpertSlotsGiveTheGatheredExpertsBits) {
  int ran = 0;
  for (const char* name : {"mixtral", "qwen2moe", "gpt-oss"}) {
    SCOPED_TRACE(name);
    const std::string path = tiny_model_path(name);
    if (!std::filesystem::exists(path)) continue;
    ++ran;
    Loaded m = open_model(path);
    ASSERT_NE(m.model, nullptr);
    std::vector<std::vector<float>> logits[2];
    for (const bool slots : {true, false}) {
      DeviceBackendOptions o = test_options(32, 0, /*mma_min_rows=*/0);
      o.moe_slots = slots;
      auto b = device_backend(m, {0, m.hp.n_layer}, o);
      ASSERT_NE(b, nullptr);
      ASSERT_TRUE(b->add_sequence(0, 16).ok());
      std::vector<int32_t> tokens = {1, 40, 97, 300, 5};
      for (int step = 0; step < 5; ++step) {
        ForwardRequest req;
        req.tokens = tokens;
        ForwardResult r;
        ASSERT_TRUE(b->forward(req, &r).ok());
        logits[slots ? 0 : 1].emplace_back(r.logits.begin(), r.logits.end());
        tokens = {argmax(r.logits)};
      }
    }
    for (size_t step = 0; step < logits[0].size(); ++step) {
      EXPECT_EQ(logits[0][step], logits[1][step]) << "step " << step;
    }
    // (gpt-oss's: its MXFP4 experts, biases and clamped SwiGLU.)
    if (std::string(name) == "gpt-oss") {
      expect_batch_invariant(m, test_options(32, 0, /*mma_min_rows=*/0));
    }
  }
  if (ran == 0) GTEST_SKIP() << "no tiny mixtures under " << strata::testing::models_dir() / "tiny"
                             << " (scripts/make-test-models.sh makes them)";
}

// A model split over two device backends (blocks [0, 2) and [2, 5)), the
// hidden rows handed on, gives the whole device backend's logits bit for
// bit; and a cpu stage then a device stage agrees with the cpu whole.
TEST_P(DeviceBackend, SplitsGiveTheWholeModelsLogits) {
  Loaded m = open_model(stories_path());
  ASSERT_NE(m.model, nullptr);
  const int n = m.hp.n_layer;
  auto whole = device_backend(m, {0, n});
  auto first = device_backend(m, {0, 2});
  auto second = device_backend(m, {2, n});
  auto cpu_whole = cpu_backend(m, {0, n});
  auto cpu_first = cpu_backend(m, {0, 2});
  auto mixed_second = device_backend(m, {2, n});
  for (Backend* b : {whole.get(), first.get(), second.get(), cpu_whole.get(), cpu_first.get(),
                     mixed_second.get()}) {
    ASSERT_NE(b, nullptr);
    ASSERT_TRUE(b->add_sequence(0, 64).ok());
  }
  EXPECT_EQ(first->n_vocab(), whole->n_vocab());
  std::vector<int32_t> tokens = {1, 403, 407, 261, 378};
  for (int step = 0; step < 6; ++step) {
    ForwardRequest req;
    req.tokens = tokens;
    ForwardResult w, a, b, cw, ca, cb;
    ASSERT_TRUE(whole->forward(req, &w).ok());
    ASSERT_TRUE(first->forward(req, &a).ok());
    ASSERT_TRUE(cpu_whole->forward(req, &cw).ok());
    ASSERT_TRUE(cpu_first->forward(req, &ca).ok());
    EXPECT_TRUE(a.logits.empty());
    ASSERT_EQ(a.hidden.size(), tokens.size() * m.hp.n_embd);
    ForwardRequest next;
    next.hidden = a.hidden;
    ASSERT_TRUE(second->forward(next, &b).ok());
    EXPECT_EQ(std::vector<float>(b.logits.begin(), b.logits.end()),
              std::vector<float>(w.logits.begin(), w.logits.end()))
        << "step " << step;
    next.hidden = ca.hidden;
    ASSERT_TRUE(mixed_second->forward(next, &cb).ok());
    float scale = 0.0f, worst = 0.0f;
    for (float v : cw.logits) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < cw.logits.size(); ++i) {
      worst = std::max(worst, std::fabs(cw.logits[i] - cb.logits[i]) / scale);
    }
    EXPECT_LE(worst, 1e-4f) << "step " << step;
    EXPECT_EQ(argmax(cb.logits), argmax(cw.logits)) << "step " << step;
    tokens = {argmax(w.logits)};
  }
}

// The prefix cache's rows: a sequence's KV rows read and appended to a new
// sequence continue it exactly as the original (bit-identical logits).
TEST_P(DeviceBackend, KvRowsCopiedToANewSequenceContinueItExactly) {
  Loaded m = open_model(stories_path());
  ASSERT_NE(m.model, nullptr);
  auto b = device_backend(m, {0, m.hp.n_layer});
  ASSERT_TRUE(b->add_sequence(0, 64).ok());
  ASSERT_TRUE(b->add_sequence(1, 64).ok());
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  ForwardRequest req;
  req.tokens = prompt;
  ForwardResult r;
  ASSERT_TRUE(b->forward(req, &r).ok());
  ASSERT_GT(b->kv_row_bytes(), 0);
  std::vector<uint8_t> rows(static_cast<size_t>(b->kv_row_bytes()) * 4);
  ASSERT_TRUE(b->read_kv(0, 0, 4, rows.data()).ok());
  EXPECT_EQ(b->read_kv(0, 3, 3, rows.data()).code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(b->append_kv(1, 4, rows.data()).ok());
  EXPECT_EQ(*b->sequence_length(1), 4);
  // Both continue from position 4 with the prompt's last token, then one more.
  ASSERT_TRUE(b->truncate_sequence(0, 4).ok());
  for (const int32_t t : {378, 300}) {
    const int32_t one[] = {t};
    ForwardRequest a;
    a.seq = 0;
    a.tokens = one;
    ForwardResult ra;
    ASSERT_TRUE(b->forward(a, &ra).ok());
    const std::vector<float> want(ra.logits.begin(), ra.logits.end());
    a.seq = 1;
    ASSERT_TRUE(b->forward(a, &ra).ok());
    EXPECT_EQ(std::vector<float>(ra.logits.begin(), ra.logits.end()), want) << "token " << t;
  }
}

// Steps the backend checks (check_forward) fail before anything changes;
// sequences are counted; the context is enforced.
TEST_P(DeviceBackend, BadStepsAndSequencesAreRefusedAndChangeNothing) {
  Loaded m = open_model(stories_path());
  ASSERT_NE(m.model, nullptr);
  auto b = device_backend(m, {0, m.hp.n_layer}, 8);
  EXPECT_EQ(b->add_sequence(0, 0).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(b->add_sequence(0, 6).ok());
  EXPECT_EQ(b->add_sequence(0, 6).code(), absl::StatusCode::kAlreadyExists);
  ForwardRequest req;
  ForwardResult r;
  const std::vector<int32_t> nine(9, 1), bad_id = {1, 512}, seven(7, 1);
  req.tokens = nine;  // past max_batch 8
  EXPECT_EQ(b->forward(req, &r).code(), absl::StatusCode::kInvalidArgument);
  req.tokens = bad_id;  // outside the 512-token vocabulary
  EXPECT_EQ(b->forward(req, &r).code(), absl::StatusCode::kInvalidArgument);
  req.tokens = seven;  // past the context of 6
  EXPECT_EQ(b->forward(req, &r).code(), absl::StatusCode::kOutOfRange);
  req.seq = 3;
  req.tokens = bad_id;
  EXPECT_EQ(b->forward(req, &r).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*b->sequence_length(0), 0);
  EXPECT_EQ(b->remove_sequence(3).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(b->remove_sequence(0).ok());
}

// What the device cannot hold or should not pass on: a context too large
// for its memory is ResourceExhausted and adds nothing (the backend goes
// on); a previous stage's NaN rows are refused (Internal) without advancing
// the sequence, on a middle stage and on the last.
TEST_P(DeviceBackend, TooLargeContextsAndNonFiniteRowsAreRefusedAndChangeNothing) {
  Loaded m = open_model(stories_path());
  ASSERT_NE(m.model, nullptr);
  auto last = device_backend(m, {2, m.hp.n_layer});
  auto middle = device_backend(m, {1, 3});
  // 2^30 positions x 3 layers x (32 + 32) f16: 412 GB of KV cache.
  const absl::Status huge = last->add_sequence(0, 1 << 30);
  EXPECT_EQ(huge.code(), absl::StatusCode::kResourceExhausted) << huge;
  EXPECT_EQ(last->sequence_length(0).status().code(), absl::StatusCode::kNotFound);
  for (Backend* b : {last.get(), middle.get()}) {
    ASSERT_TRUE(b->add_sequence(0, 16).ok());
    std::vector<float> rows(2 * static_cast<size_t>(m.hp.n_embd), 0.5f);
    rows[7] = std::numeric_limits<float>::quiet_NaN();
    ForwardRequest req;
    req.hidden = rows;
    ForwardResult r;
    const absl::Status st = b->forward(req, &r);
    EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
    EXPECT_NE(st.message().find("not finite"), std::string::npos) << st;
    EXPECT_EQ(*b->sequence_length(0), 0);
    std::fill(rows.begin(), rows.end(), 0.5f);
    EXPECT_TRUE(b->forward(req, &r).ok());  // and the next step runs
    EXPECT_EQ(*b->sequence_length(0), 2);
  }
}

// A matrix type without a kernel is refused at load, by name; bad ranges
// and a missing device are refused.
TEST_P(DeviceBackend, RefusesTypesItCannotRunByName) {
  Loaded m = open_model(stories_path());
  ASSERT_NE(m.model, nullptr);
  absl::StatusOr<std::unique_ptr<Backend>> b;
  gguf::testing::TempDir dir;
  const std::string bf16 = stories_with_a_bf16_matrix(dir);
  Loaded other = open_model(bf16);
  ASSERT_NE(other.model, nullptr);
  b = make_device_backend(other.model, other.hp, {0, other.hp.n_layer}, {}, new_api());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(b.status().message().find("blk.1.attn_k.weight: BF16 has no cuda kernel yet"),
            std::string::npos)
      << b.status();

  b = make_device_backend(m.model, m.hp, {0, m.hp.n_layer + 1}, {},
                          new_api());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  b = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, {}, nullptr);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
}

// Split-K (2 and 4 warps a row, worker/cuda/kernels/matvec_source.h) sums
// in another order: the logits still agree with the cpu backend's, and a
// batched step still gives each sequence its logits alone, bit for bit.
TEST_P(DeviceBackend, SplitKChoicesAgreeAndStayBatchInvariant) {
  Loaded m = open_model(stories_path());
  ASSERT_NE(m.model, nullptr);
  for (const int w : {2, 4}) {
    SCOPED_TRACE(std::to_string(w) + " warps a row");
    auto cpu = cpu_backend(m, {0, m.hp.n_layer});
    auto device = device_backend(m, {0, m.hp.n_layer}, 32, w);
    ASSERT_NE(device, nullptr);
    EXPECT_GE(compare_greedy(*cpu, *device, {1, 403, 407, 261, 378}, 10, 1e-3f).decided, 8);
    auto alone = device_backend(m, {0, m.hp.n_layer}, 32, w);
    auto batched = device_backend(m, {0, m.hp.n_layer}, 32, w);
    const std::vector<int32_t> a = {1, 403, 407}, b = {1, 261, 378, 40};
    const auto want = logits_alone(*alone, 7, b, {});
    ASSERT_TRUE(batched->add_sequence(0, 64).ok());
    ASSERT_TRUE(batched->add_sequence(7, 64).ok());
    std::vector<int32_t> tokens = a;
    tokens.insert(tokens.end(), b.begin(), b.end());
    const ForwardSlice slices[] = {{.seq = 0, .rows = 3}, {.seq = 7, .rows = 4}};
    ForwardRequest req;
    req.tokens = tokens;
    req.slices = slices;
    ForwardResult r;
    ASSERT_TRUE(batched->forward(req, &r).ok());
    const size_t v = static_cast<size_t>(batched->n_vocab());
    EXPECT_EQ(std::vector<float>(r.logits.begin() + v, r.logits.begin() + 2 * v), want[0]);
  }
}

// Every launch choice (matvec_candidates: split and block) runs, and the
// block never changes the bits: each split's logits are the same in blocks
// of 64, 128 and 256 threads (a block of 4 warps a row needs 128). A
// choice that is not one is refused, naming it.
TEST_P(DeviceBackend, EveryBlockChoiceGivesItsSplitsBits) {
  Loaded m = open_model(stories_path());
  ASSERT_NE(m.model, nullptr);
  const std::vector<int32_t> prompt = {1, 403, 407, 261};
  for (const MatvecChoice& c : matvec_candidates()) {
    SCOPED_TRACE(matvec_choice_text(c));
    DeviceBackendOptions o = test_options(8, c.row_warps);
    auto base = device_backend(m, {0, m.hp.n_layer}, o);
    o.matvec_threads = c.threads;
    auto chosen = device_backend(m, {0, m.hp.n_layer}, o);
    ASSERT_NE(base, nullptr);
    ASSERT_NE(chosen, nullptr);
    EXPECT_EQ(logits_alone(*chosen, 0, prompt, {300, 301}), logits_alone(*base, 0, prompt, {300, 301}));
  }
  DeviceBackendOptions bad = test_options(8, 4);
  bad.matvec_threads = 64;
  auto refused = make_device_backend(m.model, m.hp, {0, m.hp.n_layer}, bad, new_api());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("w4 t64"), std::string::npos) << refused.status();
}

INSTANTIATE_TEST_SUITE_P(On, DeviceBackend, ::testing::Values("emulated", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace strata::worker::device_test
