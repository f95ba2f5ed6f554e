// `strata speed -m MODEL [-p 512] [-n 128] [-r 3] [-t THREADS] [--json]`:
// llama-bench's two tests on the whole model, CPU backend.
//
//   pp<p>: prefill of a p-token prompt (chunks of the backend's max batch,
//          logits of the last position only), on a fresh sequence;
//   tg<n>: decode of n tokens one at a time (each step's logits), on a fresh
//          sequence starting from position 0; with --sessions S, S fresh
//          sequences decode together (each step one forward() of S
//          one-row slices, as a server's decode micro-batch), and tok/s
//          counts the tokens of all of them (S x n per run).
// With -d D (llama-bench's --n-depth) each test's sequences first hold D
// tokens of context (an untimed prefill of random ids), so that pp and tg
// measure attention over a long cache: "pp512 @ d8192".
//
// As in llama-bench the ids are arbitrary valid ones (seeded uniform draws
// from the vocabulary: speed does not depend on which tokens), each test is
// run once untimed first (pp: the whole prompt; tg: one token) unless
// --no-warmup, then r times. Prints the median and the best tok/s of the r
// runs. -p 0 or -n 0 skips that test. --json prints one object:
//   {"model": PATH, "threads": T, "backend": "cpu",
//    "kernels": "generated, avx2" | "reference (STRATA_JIT=0)" | "cuda: ..." | ...,
//    "tuned": false with --no-tune or STRATA_NO_TUNE, reference kernels or
//             more threads than CPUs (the tuner keeps defaults then),
//    "decode_weight_bytes": bytes of weights one decode step reads (of an
//             MoE block's experts, the k used of n),
//    "sessions": S, "depth": D,
//    "pp": {"tokens": p, "tok_s": median, "best_tok_s": X, "runs_tok_s": [..]},
//    "tg": {"tokens": n, "tok_s": median, "best_tok_s": Y, "runs_tok_s": [..]}}
// with "pp" or "tg" null when skipped.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "client/cli/commands.h"
#include "client/cli/kernel_flags.h"
#include "client/cli/sampling_flags.h"
#include "kernels/cpu/env_switch.h"
#include "kernels/cpu/isa.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "model/placement.h"
#include "nlohmann/json.hpp"
#include "worker/backend.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/make_backend.h"

namespace strata::cli {
namespace {

constexpr int kMaxTokens = 1 << 20;
constexpr int kMaxRuns = 1000;

struct SpeedOptions {
  std::string model;
  int n_prompt = 512;
  int n_gen = 128;
  int runs = 3;
  int threads = 0;  // 0: all cores
  uint64_t seed = 1234;
  bool warmup = true;
  bool json = false;
  std::string isa;       // empty: STRATA_ISA, else CPUID
  bool no_tune = false;
  int sessions = 1;      // sequences decoding together in tg
  int depth = 0;         // context tokens before each test
  std::string backend = "cpu";  // cpu, cuda, cuda:N (worker::parse_backend_choice)
};

struct TestResult {
  int tokens = 0;
  std::vector<double> tok_s;  // one per run, in run order
  double median() const {
    std::vector<double> v = tok_s;
    std::sort(v.begin(), v.end());
    const size_t mid = v.size() / 2;
    return v.size() % 2 == 1 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]);
  }
  double best() const { return *std::max_element(tok_s.begin(), tok_s.end()); }
};

int fail(const std::string& what, const absl::Status& status) {
  return report_failure("speed", what, status);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// Bytes of weights one decode step reads: placement's rule (the one
// `strata plan` predicts with): every block's active bytes (of an MoE
// block's expert tensors, the k used of n), the output head (token_embd
// when tied; the embedding itself is only looked up), and the tensors
// every stage holds (rope_freqs). 0 when the tensor table is refused.
uint64_t decode_weight_bytes(const gguf::GgufModel& model, const arch::Hyperparameters& hp) {
  absl::StatusOr<placement::ModelSizes> sizes = placement::model_sizes(model, hp);
  if (!sizes.ok()) return 0;
  return placement::stage_work(*sizes, 0, sizes->n_layer) + sizes->shared_bytes;
}

// One timed pass of each test on a fresh sequence (id 0, removed after).
class SpeedRunner {
 public:
  SpeedRunner(worker::Backend& backend, uint64_t seed)
      : backend_(backend), rng_(seed) {}

  std::vector<int32_t> random_ids(int n) {
    std::uniform_int_distribution<int32_t> dist(0, backend_.n_vocab() - 1);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = dist(rng_);
    return ids;
  }

  // A fresh sequence `seq` of depth + n positions holding `depth` random
  // ids (prefilled, untimed).
  absl::Status add_at_depth(int seq, int depth, int n) {
    if (absl::Status st = backend_.add_sequence(seq, depth + n); !st.ok()) return st;
    if (depth == 0) return absl::OkStatus();
    const std::vector<int32_t> context = random_ids(depth);
    worker::ForwardResult result;
    return worker::prefill_in_chunks(backend_, seq, context, &result);
  }

  // Seconds for the prefill of n random ids after `depth` of context.
  absl::StatusOr<double> prefill(int n, int depth) {
    const std::vector<int32_t> prompt = random_ids(n);
    absl::Status st = add_at_depth(0, depth, n);
    if (!st.ok()) {
      (void)backend_.remove_sequence(0);
      return st;
    }
    worker::ForwardResult result;
    const auto t0 = std::chrono::steady_clock::now();
    st = worker::prefill_in_chunks(backend_, 0, prompt, &result);
    const double s = seconds_since(t0);
    absl::Status removed = backend_.remove_sequence(0);
    if (!st.ok()) return st;
    if (!removed.ok()) return removed;
    return s;
  }

  // Seconds for n decode steps of `sessions` sequences together, one
  // random id each per step, each after `depth` of context.
  absl::StatusOr<double> decode(int n, int sessions, int depth) {
    const std::vector<int32_t> ids = random_ids(n * sessions);
    std::vector<worker::ForwardSlice> slices;
    absl::Status st;
    for (int q = 0; q < sessions && st.ok(); ++q) {
      st = add_at_depth(q, depth, n);
      if (st.ok()) {
        slices.push_back({.seq = q, .rows = 1, .logits = worker::Logits::kLast});
      } else {
        (void)backend_.remove_sequence(q);
      }
    }
    worker::ForwardResult result;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n && st.ok(); ++i) {
      worker::ForwardRequest req;
      req.tokens = std::span<const int32_t>(&ids[static_cast<size_t>(i) * sessions],
                                            static_cast<size_t>(sessions));
      req.slices = slices;
      st = backend_.forward(req, &result);
    }
    const double s = seconds_since(t0);
    for (const worker::ForwardSlice& slice : slices) {
      absl::Status removed = backend_.remove_sequence(slice.seq);
      if (st.ok()) st = removed;
    }
    if (!st.ok()) return st;
    return s;
  }

 private:
  worker::Backend& backend_;
  std::mt19937_64 rng_;
};

nlohmann::json test_json(const TestResult* r) {
  if (r == nullptr) return nullptr;
  return {{"tokens", r->tokens},
          {"tok_s", r->median()},
          {"best_tok_s", r->best()},
          {"runs_tok_s", r->tok_s}};
}

int run(const SpeedOptions& o) {
  if (o.n_prompt == 0 && o.n_gen == 0) {
    std::fprintf(stderr, "strata speed: -p and -n are both 0: nothing to "
                         "measure\n");
    return 2;
  }
  if (int rc = check_engine_isa("speed", o.isa); rc != 0) return rc;
  absl::StatusOr<worker::BackendChoice> choice = worker::parse_backend_choice(o.backend);
  if (!choice.ok()) {
    std::fprintf(stderr, "strata speed: --backend: %s\n",
                 std::string(choice.status().message()).c_str());
    return 2;
  }
  auto opened = gguf::GgufModel::open(o.model);
  if (!opened.ok()) return fail(o.model, opened.status());
  std::shared_ptr<const gguf::GgufModel> model(std::move(*opened));
  auto hp = arch::read_hyperparameters(model->first());
  if (!hp.ok()) return fail(o.model, hp.status());
  const int longest = o.depth + std::max(o.n_prompt, o.n_gen);
  if (hp->n_ctx_train > 0 && longest > hp->n_ctx_train) {
    std::fprintf(stderr,
                 "strata speed: %d tokens exceed the model's context of %d "
                 "(lower -d / -p / -n)\n",
                 longest, hp->n_ctx_train);
    return 2;
  }

  worker::CpuBackendOptions options;
  options.isa = o.isa;
  options.no_tune = o.no_tune;
  options.n_threads = resolve_threads(o.threads);
  const bool cuda = choice->kind == worker::BackendChoice::Kind::kCuda;
  auto backend = worker::make_backend(*choice, model, *hp, {0, hp->n_layer}, options);
  if (!backend.ok()) {
    return fail(cuda ? "--backend " + o.backend : o.model, backend.status());
  }
  SpeedRunner runner(**backend, o.seed);
  // What the backend runs: the cpu backend's kernels, decided as
  // make_cpu_backend decided them; the cuda backend's NVRTC kernels, their
  // split-K tuned unless --no-tune or STRATA_NO_TUNE=1 (make_cuda_backend).
  const std::string kernels_text =
      cuda ? "cuda: NVRTC step kernels (worker/cuda/kernels)" : kernels::engine_kernels_text(o.isa);
  const bool tuned = cuda ? !o.no_tune && kernels::env_switch("STRATA_NO_TUNE") != true
                          : tunes(o.isa, o.no_tune, options.n_threads);

  TestResult pp{o.n_prompt, {}};
  TestResult tg{o.n_gen, {}};
  if (o.warmup) {
    if (o.n_prompt > 0) {
      if (auto s = runner.prefill(o.n_prompt, o.depth); !s.ok()) {
        return fail("warm-up prefill", s.status());
      }
    }
    if (o.n_gen > 0) {
      if (auto s = runner.decode(1, o.sessions, o.depth); !s.ok()) {
        return fail("warm-up decode", s.status());
      }
    }
  }
  for (int r = 0; r < o.runs; ++r) {
    if (o.n_prompt > 0) {
      auto s = runner.prefill(o.n_prompt, o.depth);
      if (!s.ok()) return fail("prefill", s.status());
      pp.tok_s.push_back(o.n_prompt / std::max(*s, 1e-9));
    }
    if (o.n_gen > 0) {
      auto s = runner.decode(o.n_gen, o.sessions, o.depth);
      if (!s.ok()) return fail("decode", s.status());
      tg.tok_s.push_back(static_cast<double>(o.n_gen) * o.sessions / std::max(*s, 1e-9));
    }
  }

  const TestResult* pp_done = o.n_prompt > 0 ? &pp : nullptr;
  const TestResult* tg_done = o.n_gen > 0 ? &tg : nullptr;
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["threads"] = options.n_threads;
    j["backend"] = std::string((*backend)->name());
    j["kernels"] = kernels_text;
    j["tuned"] = tuned;
    j["decode_weight_bytes"] = decode_weight_bytes(*model, *hp);
    j["sessions"] = o.sessions;
    j["depth"] = o.depth;
    j["pp"] = test_json(pp_done);
    j["tg"] = test_json(tg_done);
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::printf("model: %s (%s, %d blocks), %s backend, %d threads, %d runs, %d session%s\n",
              o.model.c_str(), hp->architecture.c_str(), hp->n_layer,
              std::string((*backend)->name()).c_str(), options.n_threads,
              o.runs, o.sessions, o.sessions == 1 ? "" : "s");
  std::printf("kernels: %s, %s\n", kernels_text.c_str(),
              tuned ? "tuned" : "default parameters (not tuned)");
  const int width = o.depth > 0 ? 16 : 8;
  std::printf("%-*s %14s %14s\n", width, "test", "median tok/s", "best tok/s");
  const std::pair<const char*, const TestResult*> tests[] = {{"pp", pp_done},
                                                             {"tg", tg_done}};
  for (const auto& [name, r] : tests) {
    if (r == nullptr) continue;
    const std::string test = name + std::to_string(r->tokens) +
                             (o.depth > 0 ? " @ d" + std::to_string(o.depth) : "");
    std::printf("%-*s %14.2f %14.2f\n", width, test.c_str(), r->median(), r->best());
  }
  return 0;
}

}  // namespace

void add_speed_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<SpeedOptions>();
  CLI::App* cmd = app.add_subcommand(
      "speed",
      "Measure prefill (pp) and decode (tg) tok/s on the CPU, as llama-bench");
  cmd->add_option("-m,--model", o->model, "GGUF model")->required();
  cmd->add_option("-p,--n-prompt", o->n_prompt,
                  "prompt tokens of the prefill test; 0 skips it (512)")
      ->check(CLI::Range(0, kMaxTokens));
  cmd->add_option("-n,--n-gen", o->n_gen,
                  "tokens of the decode test; 0 skips it (128)")
      ->check(CLI::Range(0, kMaxTokens));
  cmd->add_option("--sessions", o->sessions,
                  "sequences decoding together in the decode test, one "
                  "forward() a step (1; at most the backend's 512 rows)")
      ->check(CLI::Range(1, 512));
  cmd->add_option("-d,--n-depth", o->depth,
                  "context tokens each test's sequences hold first (an untimed "
                  "prefill; 0)")
      ->check(CLI::Range(0, kMaxTokens));
  cmd->add_option("-r,--repetitions", o->runs, "timed runs of each test (3)")
      ->check(CLI::Range(1, kMaxRuns));
  add_threads_flag(cmd, &o->threads, "threads");
  cmd->add_option("--seed", o->seed, "seed of the random token ids (1234)")
      ->check(uint64_check());
  cmd->add_flag("--no-warmup", [o](int64_t) { o->warmup = false; },
                "skip the untimed first run of each test");
  cmd->add_flag("--json", o->json, "print one JSON object (medians)");
  add_kernel_flags(cmd, &o->isa, &o->no_tune);
  cmd->add_option("--backend", o->backend,
                  "where the model runs: cpu, cuda (device 0) or cuda:N (cpu)");
  cmd->callback([o, &exit_code] { exit_code = run(*o); });
}

}  // namespace strata::cli
