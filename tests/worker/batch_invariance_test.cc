// Batch invariance of the cpu backend (worker/backend.h): a sequence's
// logits are bit-identical whether its slices run alone or beside other
// sequences' slices, in any position of the micro-batch, on one backend or
// split over two. Each sequence follows a fixed schedule of slices (prompt
// chunks of ragged sizes, then one-row decode steps, some asking for the
// logits of every row); the reference runs each sequence's schedule alone,
// one forward() a slice; the batched runs put the k-th slices of all
// sequences into one forward(), rotating their order from step to step.
//
// Models: stories260K and its quantized files (../shared: F32, F16 and
// Q8_0 matrices), the tiny random-weight models of four dense and five
// mixture-of-experts families and the
// real SmolLM2 and Gemma 3 files (scripts/make-test-models.sh,
// fetch-models.sh); absent files skip, saying so.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/worker_test_util.h"
#include "worker/backend.h"

namespace strata::worker_test {
namespace {

struct Step {
  int seq = 0;
  std::vector<int32_t> tokens;
  worker::Logits logits = worker::Logits::kLast;
};

// Sequence q's schedule: chunk sizes of its prompt, then decode rows.
std::vector<Step> schedule(int q, int n_vocab, std::mt19937& rng) {
  static const std::vector<std::vector<int>> kChunks = {
      {7, 1, 1, 1, 1}, {5, 8, 1, 1, 1}, {1, 1, 1, 1, 1, 1}, {3, 2, 9, 1, 1}, {16, 1}};
  std::uniform_int_distribution<int32_t> id(1, n_vocab - 1);
  std::vector<Step> steps;
  const std::vector<int>& chunks = kChunks[static_cast<size_t>(q) % kChunks.size()];
  for (size_t k = 0; k < chunks.size(); ++k) {
    Step s;
    s.seq = q;
    for (int i = 0; i < chunks[k]; ++i) s.tokens.push_back(id(rng));
    // Every row's logits on some steps (kAll), none on one prompt chunk.
    s.logits = (k + q) % 3 == 0 ? worker::Logits::kAll
               : (k == 0 && q % 2 == 1) ? worker::Logits::kNone
                                        : worker::Logits::kLast;
    steps.push_back(std::move(s));
  }
  return steps;
}

// Backends for blocks [0, cut) and [cut, n_layer) (one when cut is 0).
std::vector<std::unique_ptr<worker::Backend>> load(const std::string& path, int cut,
                                                   int threads, int max_batch = 64) {
  auto opened = gguf::GgufModel::open(path);
  EXPECT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const gguf::GgufModel> model(std::move(*opened));
  auto hp = arch::read_hyperparameters(model->first());
  EXPECT_TRUE(hp.ok()) << hp.status();
  worker::CpuBackendOptions options;
  options.max_batch = max_batch;
  options.n_threads = threads;
  options.no_tune = true;
  std::vector<std::pair<int, int>> ranges;
  if (cut == 0) {
    ranges.push_back({0, hp->n_layer});
  } else {
    ranges.push_back({0, cut});
    ranges.push_back({cut, hp->n_layer});
  }
  std::vector<std::unique_ptr<worker::Backend>> out;
  for (auto [first, last] : ranges) {
    auto b = worker::make_cpu_backend(model, *hp, {first, last}, options);
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return {};
    out.push_back(std::move(*b));
  }
  return out;
}

// Logits of one step of one sequence: [rows that asked][n_vocab].
using Key = std::pair<int, int>;  // (seq, step of that sequence)

// Runs `batches` (each a list of (seq, step index) in slice order) through
// the chain of backends; returns each step's logits.
std::map<Key, std::vector<float>> run(std::vector<std::unique_ptr<worker::Backend>>& chain,
                                      const std::vector<std::vector<Step>>& steps,
                                      const std::vector<std::vector<Key>>& batches,
                                      int n_ctx = 128) {
  std::map<Key, std::vector<float>> out;
  for (auto& b : chain) {
    for (size_t q = 0; q < steps.size(); ++q) {
      EXPECT_TRUE(b->add_sequence(static_cast<int>(q), n_ctx).ok());
    }
  }
  for (const std::vector<Key>& batch : batches) {
    std::vector<worker::ForwardSlice> slices;
    std::vector<int32_t> tokens;
    for (const Key& k : batch) {
      const Step& s = steps[k.first][k.second];
      slices.push_back({s.seq, static_cast<int>(s.tokens.size()), s.logits});
      tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
    }
    std::vector<float> hidden;
    worker::ForwardResult result;
    for (size_t i = 0; i < chain.size(); ++i) {
      worker::ForwardRequest req;
      req.slices = slices;
      if (i == 0) {
        req.tokens = tokens;
      } else {
        req.hidden = hidden;
      }
      const absl::Status st = chain[i]->forward(req, &result);
      EXPECT_TRUE(st.ok()) << st;
      if (!st.ok()) return out;
      if (i + 1 < chain.size()) hidden.assign(result.hidden.begin(), result.hidden.end());
    }
    const int n_vocab = chain.back()->n_vocab();
    size_t at = 0;
    for (size_t j = 0; j < batch.size(); ++j) {
      const Step& s = steps[batch[j].first][batch[j].second];
      const size_t rows = s.logits == worker::Logits::kAll    ? s.tokens.size()
                          : s.logits == worker::Logits::kLast ? 1
                                                              : 0;
      out[batch[j]].assign(result.logits.begin() + at * n_vocab,
                           result.logits.begin() + (at + rows) * n_vocab);
      at += rows;
    }
    EXPECT_EQ(at * n_vocab, result.logits.size());
  }
  return out;
}

void expect_invariant(const std::string& path, int threads) {
  if (!exists(path)) GTEST_SKIP() << path << " is absent";
  const int n_layer = model_layers(path);
  ASSERT_GT(n_layer, 1) << path;
  std::mt19937 rng(42);
  std::vector<std::unique_ptr<worker::Backend>> alone = load(path, 0, threads);
  ASSERT_EQ(alone.size(), 1u);
  const int n_seqs = 5;
  std::vector<std::vector<Step>> steps;
  for (int q = 0; q < n_seqs; ++q) steps.push_back(schedule(q, alone[0]->n_vocab(), rng));

  // Reference: every step alone, sequence after sequence.
  std::vector<std::vector<Key>> solo;
  for (int q = 0; q < n_seqs; ++q) {
    for (size_t k = 0; k < steps[q].size(); ++k) solo.push_back({{q, static_cast<int>(k)}});
  }
  const std::map<Key, std::vector<float>> want = run(alone, steps, solo);

  // Batched: the k-th steps of every sequence that has one, in an order
  // rotated by k (and reversed on odd k), so each sequence sits at the
  // front, the back and in the middle of some micro-batch.
  std::vector<std::vector<Key>> batched;
  for (size_t k = 0;; ++k) {
    std::vector<Key> batch;
    for (int i = 0; i < n_seqs; ++i) {
      const int q = static_cast<int>((static_cast<size_t>(i) + k) % n_seqs);
      if (k < steps[q].size()) batch.push_back({q, static_cast<int>(k)});
    }
    if (batch.empty()) break;
    if (k % 2 == 1) std::reverse(batch.begin(), batch.end());
    batched.push_back(std::move(batch));
  }
  for (int cut : {0, n_layer / 2}) {
    std::vector<std::unique_ptr<worker::Backend>> chain = load(path, cut, threads);
    ASSERT_FALSE(chain.empty());
    const std::map<Key, std::vector<float>> got = run(chain, steps, batched);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [key, logits] : want) {
      const std::vector<float>& g = got.at(key);
      ASSERT_EQ(g.size(), logits.size());
      for (size_t i = 0; i < g.size(); ++i) {
        ASSERT_EQ(std::memcmp(&g[i], &logits[i], sizeof(float)), 0)
            << path << " split at " << cut << ", sequence " << key.first << " step "
            << key.second << " logit " << i << ": batched " << g[i] << ", alone "
            << logits[i];
      }
    }
  }
}

// Chunk invariance: a prompt's logits, and those of the decode steps after
// it, are bit-identical however the prompt is cut into chunks (one chunk,
// single rows then a tile's worth, ragged pieces). The scheduler relies on
// it: it cuts prompts finer while other sequences decode
// (SchedulerOptions::prefill_chunk_beside_decode), and the tokens must not
// depend on the load. Each chunking runs as its own sequence, one slice a
// forward(), on one backend and split over two.
void expect_chunk_invariant(const std::string& path, int threads) {
  if (!exists(path)) GTEST_SKIP() << path << " is absent";
  const int n_layer = model_layers(path);
  ASSERT_GT(n_layer, 1) << path;
  constexpr int kPrompt = 160;
  const std::vector<std::vector<int>> chunkings = {
      {160}, {1, 15, 16, 128}, {37, 123}, {64, 64, 31, 1}, {3, 5, 7, 11, 13, 121}};
  std::mt19937 rng(7);
  std::vector<std::unique_ptr<worker::Backend>> alone = load(path, 0, threads, kPrompt);
  ASSERT_EQ(alone.size(), 1u);
  std::uniform_int_distribution<int32_t> id(1, alone[0]->n_vocab() - 1);
  std::vector<int32_t> prompt(kPrompt);
  for (int32_t& t : prompt) t = id(rng);
  const std::vector<int32_t> decoded = {id(rng), id(rng), id(rng)};
  std::vector<std::vector<Step>> steps;
  std::vector<std::vector<Key>> solo;
  for (size_t q = 0; q < chunkings.size(); ++q) {
    std::vector<Step> seq;
    int at = 0;
    for (int n : chunkings[q]) {
      Step s;
      s.seq = static_cast<int>(q);
      s.tokens.assign(prompt.begin() + at, prompt.begin() + at + n);
      at += n;
      s.logits = at == kPrompt ? worker::Logits::kLast : worker::Logits::kNone;
      seq.push_back(std::move(s));
    }
    ASSERT_EQ(at, kPrompt);
    for (int32_t t : decoded) seq.push_back({static_cast<int>(q), {t}, worker::Logits::kLast});
    for (size_t k = 0; k < seq.size(); ++k) {
      solo.push_back({{static_cast<int>(q), static_cast<int>(k)}});
    }
    steps.push_back(std::move(seq));
  }
  for (int cut : {0, n_layer / 2}) {
    std::vector<std::unique_ptr<worker::Backend>> chain = load(path, cut, threads, kPrompt);
    ASSERT_FALSE(chain.empty());
    const std::map<Key, std::vector<float>> got = run(chain, steps, solo, kPrompt + 8);
    // The prompt's last row, then each decode step: sequence q's against
    // sequence 0's (one chunk).
    for (size_t q = 1; q < chunkings.size(); ++q) {
      const int first = static_cast<int>(chunkings[q].size()) - 1;
      const int first0 = static_cast<int>(chunkings[0].size()) - 1;
      for (int j = 0; j <= static_cast<int>(decoded.size()); ++j) {
        const std::vector<float>& want = got.at({0, first0 + j});
        const std::vector<float>& g = got.at({static_cast<int>(q), first + j});
        ASSERT_EQ(g.size(), want.size());
        ASSERT_FALSE(g.empty());
        for (size_t i = 0; i < g.size(); ++i) {
          ASSERT_EQ(std::memcmp(&g[i], &want[i], sizeof(float)), 0)
              << path << " split at " << cut << ", chunking " << q << ", "
              << (j == 0 ? "the prompt's last row" : "decode step " + std::to_string(j))
              << ", logit " << i << ": " << g[i] << ", in one chunk " << want[i];
        }
      }
    }
  }
}

TEST(ChunkInvariance, Stories260K) {
  expect_chunk_invariant(stories_path(), 2);
  for (const char* type : {"Q8_0", "Q4_1"}) {
    expect_chunk_invariant(
        (testing::shared_dir() / "models" / (std::string("stories260K-") + type + ".gguf"))
            .string(),
        2);
  }
}

TEST(ChunkInvariance, TinyModelsOnOneAndTwoThreads) {
  for (const char* family : {"qwen2", "gemma2", "phi3", "mixtral", "gpt-oss"}) {
    for (int threads : {1, 2}) {
      expect_chunk_invariant(
          (testing::models_dir() / "tiny" / (std::string("tiny-") + family + ".gguf")).string(),
          threads);
    }
  }
}

TEST(ChunkInvariance, SmolLM2AndGemma3) {
  expect_chunk_invariant(smollm_path(), 2);
  expect_chunk_invariant((testing::models_dir() / "gemma-3-270m-q4_k_m.gguf").string(), 2);
}

TEST(BatchInvariance, Stories260KF32) {
  expect_invariant(stories_path(), 2);
}

TEST(BatchInvariance, Stories260KQuantizedWithF16Matrices) {
  for (const char* type : {"Q8_0", "Q4_1"}) {
    expect_invariant(
        (testing::shared_dir() / "models" / (std::string("stories260K-") + type + ".gguf"))
            .string(),
        2);
  }
}

TEST(BatchInvariance, TinyModelsOfFourFamilies) {
  for (const char* family : {"qwen2", "qwen3", "gemma2", "phi3"}) {
    expect_invariant(
        (testing::models_dir() / "tiny" / (std::string("tiny-") + family + ".gguf")).string(),
        2);
  }
}

// Mixture-of-experts: the rows routed to an expert go through it as one
// matmul whatever else shares the step (worker/cpu/moe.cc), so a row's
// expert matmuls have other rows beside them in the batched runs and not
// alone; each family's routing path (renormalised or not, shared expert;
// gpt-oss: softmax over the top-k, expert biases and MXFP4 experts, with
// attention sinks on sliding-window and global layers).
TEST(BatchInvariance, TinyMixtureOfExpertsModels) {
  for (const char* family : {"mixtral", "qwen2moe", "qwen3moe", "olmoe", "gpt-oss"}) {
    for (int threads : {1, 2}) {
      expect_invariant(
          (testing::models_dir() / "tiny" / (std::string("tiny-") + family + ".gguf")).string(),
          threads);
    }
  }
}

TEST(BatchInvariance, SmolLM2OneAndTwoThreads) {
  expect_invariant(smollm_path(), 1);
  expect_invariant(smollm_path(), 2);
}

TEST(BatchInvariance, Gemma3) {
  expect_invariant((testing::models_dir() / "gemma-3-270m-q4_k_m.gguf").string(), 2);
}

}  // namespace
}  // namespace strata::worker_test
