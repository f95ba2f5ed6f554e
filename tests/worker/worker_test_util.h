// Helpers of the worker tests: model paths, shard requests, a greedy loop
// over a whole-model backend (the reference) and one over a chain of
// Stages (micro-batches handed from stage to stage by hand).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "strata/v1/worker.pb.h"
#include "tests/test_paths.h"
#include "worker/backend.h"
#include "worker/stage.h"

namespace strata::worker_test {

inline std::string stories_path() {
  return (testing::shared_dir() / "models" / "stories260K.gguf").string();
}
inline std::string smollm_path() {
  return (testing::models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf").string();
}
inline bool exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

// stories260K: BOS + "Once upon a time".
inline const std::vector<int32_t>& stories_prompt() {
  static const std::vector<int32_t> p = {1, 403, 407, 261, 378};
  return p;
}

constexpr uint64_t kShardId = 77;

inline v1::LoadShardRequest shard_request(const std::string& path, int first,
                                          int last, int n_layer,
                                          int n_ctx = 256,
                                          int max_sequences = 8,
                                          int max_batch_rows = 64) {
  v1::LoadShardRequest r;
  r.set_shard_id(kShardId);
  r.set_model_path(path);
  r.set_first_block(first);
  r.set_last_block(last);
  r.set_embedding(first == 0);
  r.set_head(last == n_layer);
  r.set_n_ctx(n_ctx);
  r.set_max_sequences(max_sequences);
  r.set_max_batch_rows(max_batch_rows);
  if (last != n_layer) r.set_next_stage("127.0.0.1:1");  // unused by Stage
  return r;
}

inline int model_layers(const std::string& path) {
  auto model = gguf::GgufModel::open(path);
  if (!model.ok()) return 0;
  auto hp = arch::read_hyperparameters((*model)->first());
  return hp.ok() ? hp->n_layer : 0;
}

// Greedy ids from one whole-model cpu backend (the reference).
inline std::vector<int32_t> whole_model_greedy(const std::string& path,
                                               std::span<const int32_t> prompt,
                                               int n_tokens) {
  auto opened = gguf::GgufModel::open(path);
  EXPECT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const gguf::GgufModel> model(std::move(*opened));
  auto hp = arch::read_hyperparameters(model->first());
  worker::CpuBackendOptions options;
  options.max_batch = 64;
  auto backend =
      worker::make_cpu_backend(model, *hp, {0, hp->n_layer}, options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  EXPECT_TRUE((*backend)->add_sequence(0, 512).ok());
  worker::ForwardResult out;
  EXPECT_TRUE(worker::prefill_in_chunks(**backend, 0, prompt, &out).ok());
  std::vector<int32_t> ids;
  for (int i = 0; i < n_tokens; ++i) {
    const int32_t id = static_cast<int32_t>(
        std::max_element(out.logits.begin(), out.logits.end()) -
        out.logits.begin());
    ids.push_back(id);
    worker::ForwardRequest req;
    req.seq = 0;
    req.tokens = std::span<const int32_t>(&ids.back(), 1);
    EXPECT_TRUE((*backend)->forward(req, &out).ok());
  }
  return ids;
}

// One slice of a micro-batch.
inline v1::SequenceSlice slice(uint64_t seq, int start_pos,
                               std::vector<int32_t> tokens,
                               bool sample = true) {
  v1::SequenceSlice s;
  s.set_seq_id(seq);
  s.set_start_pos(start_pos);
  for (int32_t t : tokens) s.add_tokens(t);
  s.set_sample(sample);
  return s;
}

// Runs `batch` through stages in turn; the last stage's result.
inline absl::StatusOr<v1::MicroBatchResult> run_chain(
    std::span<const std::unique_ptr<worker::Stage>> stages,
    v1::MicroBatch batch) {
  v1::MicroBatchResult result;
  for (size_t i = 0; i < stages.size(); ++i) {
    v1::MicroBatch next;
    absl::Status st = stages[i]->run(batch, &next, &result);
    if (!st.ok()) return st;
    if (i + 1 < stages.size()) batch = std::move(next);
  }
  return result;
}

// Loads `path` split at `cuts` (blocks [0, cuts[0]), [cuts[0], cuts[1]),
// ..., [cuts.back(), n_layer)).
inline std::vector<std::unique_ptr<worker::Stage>> load_split(
    const std::string& path, const std::vector<int>& cuts, bool trace = false,
    int max_sequences = 8) {
  const int n_layer = model_layers(path);
  std::vector<int> bounds = {0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(n_layer);
  std::vector<std::unique_ptr<worker::Stage>> stages;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    v1::LoadShardRequest r = shard_request(path, bounds[i], bounds[i + 1],
                                           n_layer, 256, max_sequences);
    r.set_trace(trace);
    worker::StageOptions options;
    options.worker_name = "s" + std::to_string(i);
    auto stage = worker::load_stage(r, 1, options);
    EXPECT_TRUE(stage.ok()) << stage.status();
    if (!stage.ok()) return {};
    stages.push_back(std::move(*stage));
  }
  return stages;
}

// Greedy ids of sequence `seq` through the chain: the prompt in one slice,
// then one token per micro-batch.
inline std::vector<int32_t> chain_greedy(
    std::span<const std::unique_ptr<worker::Stage>> stages,
    std::span<const int32_t> prompt, int n_tokens, uint64_t seq = 1) {
  std::vector<int32_t> ids;
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  *batch.add_slices() =
      slice(seq, 0, std::vector<int32_t>(prompt.begin(), prompt.end()));
  int pos = static_cast<int>(prompt.size());
  for (int i = 0; i < n_tokens; ++i) {
    batch.set_batch_id(static_cast<uint64_t>(i));
    auto result = run_chain(stages, batch);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok() || result->tokens_size() != 1) return ids;
    ids.push_back(result->tokens(0).id());
    batch.clear_slices();
    *batch.add_slices() = slice(seq, pos, {ids.back()});
    ++pos;
  }
  return ids;
}

}  // namespace strata::worker_test
