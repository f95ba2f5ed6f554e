// Helpers of the engine tests: where the models are, loading one into a cpu
// backend, greedy decoding and logit statistics.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "worker/backend.h"

namespace strata::engine_test {

inline std::string shared_model(const std::string& name) {
  return std::string(STRATA_SHARED_DIR) + "/models/" + name;
}
inline std::string real_model(const std::string& name) {
  return std::string(STRATA_MODELS_DIR) + "/" + name;
}
inline std::string data_file(const std::string& name) {
  return std::string(STRATA_ENGINE_DATA_DIR) + "/" + name;
}
inline bool exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

struct Loaded {
  std::shared_ptr<const gguf::GgufModel> model;
  arch::Hyperparameters hp;
  std::unique_ptr<worker::Backend> backend;
};

// Loads `path` whole into a cpu backend with sequence 0 of n_ctx positions.
inline absl::StatusOr<Loaded> load(const std::string& path, int n_ctx,
                                   int n_threads = 2,
                                   GgmlType kv = GgmlType::kF16,
                                   int max_batch = 512) {
  Loaded l;
  auto model = gguf::GgufModel::open(path);
  if (!model.ok()) return model.status();
  l.model = std::shared_ptr<const gguf::GgufModel>(std::move(*model));
  auto hp = arch::read_hyperparameters(l.model->first());
  if (!hp.ok()) return hp.status();
  l.hp = *hp;
  worker::CpuBackendOptions options;
  options.n_threads = n_threads;
  options.kv_type = kv;
  options.max_batch = max_batch;
  auto backend = worker::make_cpu_backend(l.model, l.hp, {0, l.hp.n_layer},
                                          options);
  if (!backend.ok()) return backend.status();
  l.backend = std::move(*backend);
  absl::Status st = l.backend->add_sequence(0, n_ctx);
  if (!st.ok()) return st;
  return l;
}

inline int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) -
                              row.begin());
}

// Feeds `prompt` (in chunks of max_batch) and returns the logits of its
// last position.
inline absl::StatusOr<std::vector<float>> prefill(worker::Backend& b, int seq,
                                                  std::span<const int32_t> prompt) {
  worker::ForwardResult out;
  if (absl::Status st = worker::prefill_in_chunks(b, seq, prompt, &out);
      !st.ok()) {
    return st;
  }
  return std::vector<float>(out.logits.begin(), out.logits.end());
}

// Greedy: prefill then n_new decode steps; returns the generated ids.
inline absl::StatusOr<std::vector<int32_t>> greedy(worker::Backend& b, int seq,
                                                   std::span<const int32_t> prompt,
                                                   int n_new) {
  auto logits = prefill(b, seq, prompt);
  if (!logits.ok()) return logits.status();
  std::vector<int32_t> ids;
  int32_t next = argmax(*logits);
  worker::ForwardResult out;
  for (int i = 0; i < n_new; ++i) {
    ids.push_back(next);
    if (i + 1 == n_new) break;
    worker::ForwardRequest req;
    req.seq = seq;
    req.tokens = std::span<const int32_t>(&ids.back(), 1);
    absl::Status st = b.forward(req, &out);
    if (!st.ok()) return st;
    next = argmax(out.logits);
  }
  return ids;
}

struct LogitStats {
  double max_abs_diff = 0;
  double cosine = 0;
};
inline LogitStats compare(std::span<const float> a, std::span<const float> b) {
  LogitStats s;
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    s.max_abs_diff = std::max(s.max_abs_diff, std::fabs(double(a[i]) - b[i]));
    dot += double(a[i]) * b[i];
    na += double(a[i]) * a[i];
    nb += double(b[i]) * b[i];
  }
  s.cosine = dot / std::sqrt(na * nb);
  return s;
}

}  // namespace strata::engine_test
