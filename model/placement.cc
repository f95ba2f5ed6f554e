#include "model/placement.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strata::placement {
namespace {

uint64_t element_bytes(GgmlType type) {
  return type == GgmlType::kF32 ? 4 : 2;
}

std::string range_text(int first, int last) {
  return absl::StrCat("[", first, ", ", last, ")");
}

// "worker w1: blocks [10, 30) need 1.9 GiB (weights 1.5 GiB + KV 0.4 GiB),
// budget 1.0 GiB"
std::string need_text(const WorkerBudget& w, const ShardPlan& p) {
  return absl::StrCat("worker ", w.name, ": blocks ",
                      range_text(p.first, p.last), " need ",
                      format_bytes(p.total()), " (weights ",
                      format_bytes(p.weight_bytes), " + KV ",
                      format_bytes(p.kv_bytes), "), budget ",
                      format_bytes(w.bytes));
}

// Shards of blocks [first, last) cost, at ratio r, at most r x weight.
// Greedy: each worker takes as many blocks as fit, leaving one for each
// worker after it. Fills `ends` (the last block of each) and returns
// whether every block was placed.
bool greedy_fits(const ModelSizes& sizes, const KvShape& kv,
                 std::span<const double> weight, double r,
                 std::vector<int>* ends) {
  const int n = static_cast<int>(weight.size());
  ends->assign(n, 0);
  int pos = 0;
  for (int i = 0; i < n; ++i) {
    const int leave = n - 1 - i;
    const double cap = r * weight[i];
    int end = pos + 1;
    if (i == n - 1) end = sizes.n_layer;
    if (static_cast<double>(shard_plan(sizes, kv, pos, end).total()) > cap) {
      return false;
    }
    while (end < sizes.n_layer - leave &&
           static_cast<double>(shard_plan(sizes, kv, pos, end + 1).total()) <=
               cap) {
      ++end;
    }
    (*ends)[i] = end;
    pos = end;
  }
  return pos == sizes.n_layer;
}

}  // namespace

namespace {

// "blk.N.ffn_gate_exps.weight", ".._up_exps.", ".._down_exps." (and their
// biases): the tensors that hold every expert, the experts along the last
// dimension (llama.cpp's LLM_TENSOR_FFN_*_EXPS names).
bool is_expert_tensor(std::string_view name) {
  return name.find("_exps.") != std::string_view::npos;
}

}  // namespace

absl::StatusOr<ModelSizes> model_sizes(const gguf::GgufModel& model,
                                       const arch::Hyperparameters& hp) {
  ModelSizes s;
  s.n_layer = hp.n_layer;
  s.block_bytes.assign(hp.n_layer, 0);
  s.active_bytes.assign(hp.n_layer, 0);
  s.active_params.assign(hp.n_layer, 0);
  s.active_matmuls.assign(hp.n_layer, 0);
  uint64_t shared = 0;  // tensors every stage needs (rope_freqs ...)
  const gguf::TensorInfo* embd = nullptr;
  const gguf::TensorInfo* output = nullptr;
  const gguf::TensorInfo* output_norm = nullptr;
  if (absl::Status st = arch::check_block_tensors(model.tensors(), hp.n_layer); !st.ok()) {
    return st;
  }
  // The architecture reads ARCH.expert_count / ARCH.expert_used_count
  // into hp.moe (checked there, llama.cpp's load_hparams keys).
  const std::string count_key = absl::StrCat(hp.architecture, ".expert_count");
  const std::string used_key = absl::StrCat(hp.architecture, ".expert_used_count");
  s.n_expert = hp.moe.n_expert;
  s.n_expert_used = hp.moe.n_expert_used;
  // Weights of a matmul: 2-D and 3-D tensors, not biases (gpt-oss's expert
  // biases are 2-D).
  const auto matrix = [](const gguf::TensorInfo& t) {
    return t.shape.size() >= 2 && !absl::EndsWith(t.name, ".bias");
  };
  for (const gguf::TensorInfo& t : model.tensors()) {
    const int64_t b = arch::block_index(t.name);
    if (b >= 0) {
      s.block_bytes[b] += t.n_bytes;
      if (!is_expert_tensor(t.name)) {
        s.active_bytes[b] += t.n_bytes;
        if (matrix(t)) {
          s.active_params[b] += t.n_elements;
          ++s.active_matmuls[b];
        }
        continue;
      }
      if (s.n_expert == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            count_key, ": missing (tensor ", t.name, " holds experts)"));
      }
      if (s.n_expert_used < 1 || s.n_expert_used > s.n_expert) {
        return absl::InvalidArgumentError(absl::StrCat(
            used_key, ": ", s.n_expert_used, " is out of range [1, ", s.n_expert,
            "] (", count_key, " ", s.n_expert, ")"));
      }
      if (t.shape.back() != s.n_expert) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", t.name, ": ", t.shape.back(), " experts in its last dimension, ",
            count_key, " says ", s.n_expert));
      }
      // Each expert is an equal slice of the tensor (whole rows of blocks).
      s.active_bytes[b] += t.n_bytes / s.n_expert * s.n_expert_used;
      if (matrix(t)) {
        s.active_params[b] += t.n_elements / s.n_expert * s.n_expert_used;
        s.active_matmuls[b] += s.n_expert_used;
      }
    } else if (t.name == "token_embd.weight") {
      embd = &t;
    } else if (t.name == "output.weight") {
      output = &t;
    } else if (t.name == "output_norm.weight") {
      output_norm = &t;
    } else {
      shared += t.n_bytes;
    }
  }
  if (embd == nullptr) {
    return absl::InvalidArgumentError("tensor token_embd.weight: missing");
  }
  s.shared_bytes = shared;
  s.embedding_bytes = embd->n_bytes;
  s.head_bytes = (output != nullptr ? output->n_bytes : embd->n_bytes) +
                 (output_norm != nullptr ? output_norm->n_bytes : 0);
  s.head_params = output != nullptr ? output->n_elements : embd->n_elements;
  s.kv_elements_per_position =
      static_cast<uint64_t>(hp.n_head_kv) *
      static_cast<uint64_t>(hp.head_dim_k + hp.head_dim_v);
  return s;
}

uint64_t kv_bytes(const ModelSizes& sizes, const KvShape& kv, int first,
                  int last) {
  if (last <= first) return 0;
  const uint64_t positions =
      static_cast<uint64_t>(std::max(kv.n_ctx, 0)) *
          static_cast<uint64_t>(std::max(kv.max_sequences, 0)) +
      static_cast<uint64_t>(std::max<int64_t>(kv.prefix_positions, 0));
  return static_cast<uint64_t>(last - first) * positions *
         sizes.kv_elements_per_position * element_bytes(kv.kv_type);
}

ShardPlan shard_plan(const ModelSizes& sizes, const KvShape& kv, int first,
                     int last) {
  ShardPlan p;
  p.first = first;
  p.last = last;
  p.embedding = first == 0;
  p.head = last == sizes.n_layer;
  for (int b = std::max(first, 0); b < std::min(last, sizes.n_layer); ++b) {
    p.weight_bytes += sizes.block_bytes[b];
  }
  if (p.embedding) p.weight_bytes += sizes.embedding_bytes;
  if (p.head) p.weight_bytes += sizes.head_bytes;
  p.weight_bytes += sizes.shared_bytes;
  p.kv_bytes = kv_bytes(sizes, kv, first, last);
  return p;
}

namespace {

// The split that makes the largest ratio (shard bytes / budget) smallest
// (budgets of 0 count as the mean of the known ones; all 0: equal shares),
// or the refusal with the numbers when even that one overflows a budget.
absl::StatusOr<std::vector<ShardPlan>> memory_balanced(
    const ModelSizes& sizes, const KvShape& kv,
    std::span<const WorkerBudget> workers) {
  const int n = static_cast<int>(workers.size());
  if (n == 0) return absl::InvalidArgumentError("workers: none");
  if (n > sizes.n_layer) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers: ", n, " workers for ", sizes.n_layer,
                     " blocks; each worker needs at least one block"));
  }
  // Shares by budget; unknown budgets count as the mean of the known ones.
  double known = 0;
  int n_known = 0;
  for (const WorkerBudget& w : workers) {
    if (w.bytes > 0) {
      known += static_cast<double>(w.bytes);
      ++n_known;
    }
  }
  const double mean = n_known > 0 ? known / n_known : 1.0;
  std::vector<double> weight(n);
  for (int i = 0; i < n; ++i) {
    weight[i] = workers[i].bytes > 0 ? static_cast<double>(workers[i].bytes)
                                     : mean;
  }
  // The smallest ratio at which the greedy split places every block: a
  // greedy fill is optimal for contiguous ranges in a fixed order.
  const ShardPlan whole = shard_plan(sizes, kv, 0, sizes.n_layer);
  const double min_weight = *std::min_element(weight.begin(), weight.end());
  double hi = static_cast<double>(whole.total()) / min_weight + 1.0;
  double lo = 0;
  std::vector<int> ends;
  for (int iter = 0; iter < 200 && hi - lo > hi * 1e-12; ++iter) {
    const double mid = (lo + hi) / 2;
    if (greedy_fits(sizes, kv, weight, mid, &ends)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  if (!greedy_fits(sizes, kv, weight, hi, &ends)) {
    return absl::InternalError("placement: no split found");
  }
  std::vector<ShardPlan> plan;
  int pos = 0;
  for (int i = 0; i < n; ++i) {
    plan.push_back(shard_plan(sizes, kv, pos, ends[i]));
    pos = ends[i];
  }
  // Does it fit the real budgets?
  int worst = -1;
  double worst_ratio = 1.0;
  for (int i = 0; i < n; ++i) {
    if (workers[i].bytes == 0) continue;
    const double ratio = static_cast<double>(plan[i].total()) /
                         static_cast<double>(workers[i].bytes);
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (worst >= 0) {
    uint64_t budgets = 0;
    for (const WorkerBudget& w : workers) budgets += w.bytes;
    return absl::ResourceExhaustedError(absl::StrCat(
        "placement: no split of the model's ", sizes.n_layer,
        " blocks fits the workers: the model needs ",
        format_bytes(whole.total()), " (weights ",
        format_bytes(whole.weight_bytes), " + KV ",
        format_bytes(whole.kv_bytes), " for ", kv.max_sequences,
        " sequences x ", kv.n_ctx, " positions), the budgets hold ",
        format_bytes(budgets), "; the best split still overflows ",
        need_text(workers[worst], plan[worst])));
  }
  return plan;
}

}  // namespace

uint64_t stage_work(const ModelSizes& sizes, int first, int last) {
  // Sizes built by hand (tests) may leave active_bytes empty: all dense.
  const std::vector<uint64_t>& bytes =
      sizes.active_bytes.size() == sizes.block_bytes.size() ? sizes.active_bytes
                                                            : sizes.block_bytes;
  uint64_t work = 0;
  for (int b = std::max(first, 0); b < std::min(last, sizes.n_layer); ++b) {
    work += bytes[b];
  }
  if (last == sizes.n_layer) work += sizes.head_bytes;
  return work;
}

uint64_t stage_params(const ModelSizes& sizes, int first, int last) {
  uint64_t params = 0;
  for (int b = std::max(first, 0);
       b < std::min(last, static_cast<int>(sizes.active_params.size())); ++b) {
    params += sizes.active_params[b];
  }
  if (last == sizes.n_layer) params += sizes.head_params;
  return params;
}

int stage_matmuls(const ModelSizes& sizes, int first, int last) {
  int matmuls = 0;
  for (int b = std::max(first, 0);
       b < std::min(last, static_cast<int>(sizes.active_matmuls.size())); ++b) {
    matmuls += sizes.active_matmuls[b];
  }
  if (last == sizes.n_layer) ++matmuls;
  return matmuls;
}

namespace {

// Greedy at pace `t`: each worker takes as many blocks as keep its work /
// speed within t and its shard within its budget, leaving one block for
// each worker after it; the last takes the rest. With costs that only grow
// as a range grows, this places every block whenever any split at pace t
// does. Fills `ends` and returns whether every block was placed.
bool paced_fits(const ModelSizes& sizes, const KvShape& kv,
                std::span<const WorkerBudget> workers, std::span<const double> speed,
                double t, std::vector<int>* ends) {
  const int n = static_cast<int>(workers.size());
  ends->assign(n, 0);
  auto fits = [&](int i, int first, int last) {
    if (static_cast<double>(stage_work(sizes, first, last)) > t * speed[i]) return false;
    return workers[i].bytes == 0 || shard_plan(sizes, kv, first, last).total() <= workers[i].bytes;
  };
  int pos = 0;
  for (int i = 0; i < n; ++i) {
    const int leave = n - 1 - i;
    int end = i == n - 1 ? sizes.n_layer : pos + 1;
    if (!fits(i, pos, end)) return false;
    while (end < sizes.n_layer - leave && fits(i, pos, end + 1)) ++end;
    (*ends)[i] = end;
    pos = end;
  }
  return pos == sizes.n_layer;
}

}  // namespace

absl::StatusOr<std::vector<ShardPlan>> plan_auto(
    const ModelSizes& sizes, const KvShape& kv,
    std::span<const WorkerBudget> workers) {
  // Whether any split fits the budgets (and the refusal if none does).
  absl::StatusOr<std::vector<ShardPlan>> fitting = memory_balanced(sizes, kv, workers);
  if (!fitting.ok()) return fitting.status();
  const int n = static_cast<int>(workers.size());
  // Speeds: unknown ones as the mean of the known ones (all unknown: 1).
  double known = 0;
  int n_known = 0;
  for (const WorkerBudget& w : workers) {
    if (w.speed > 0) {
      known += w.speed;
      ++n_known;
    }
  }
  std::vector<double> speed(n);
  for (int i = 0; i < n; ++i) {
    speed[i] = workers[i].speed > 0 ? workers[i].speed : (n_known > 0 ? known / n_known : 1.0);
  }
  // The memory-balanced split fits: its slowest stage bounds the pace.
  double hi = 0;
  for (int i = 0; i < n; ++i) {
    const ShardPlan& p = (*fitting)[i];
    hi = std::max(hi, static_cast<double>(stage_work(sizes, p.first, p.last)) / speed[i]);
  }
  double lo = 0;
  std::vector<int> ends;
  for (int iter = 0; iter < 200 && hi - lo > hi * 1e-12; ++iter) {
    const double mid = (lo + hi) / 2;
    if (paced_fits(sizes, kv, workers, speed, mid, &ends)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  if (!paced_fits(sizes, kv, workers, speed, hi, &ends)) return fitting;
  std::vector<ShardPlan> plan;
  int pos = 0;
  for (int i = 0; i < n; ++i) {
    plan.push_back(shard_plan(sizes, kv, pos, ends[i]));
    pos = ends[i];
  }
  return plan;
}

absl::StatusOr<std::vector<ShardPlan>> check_explicit(
    const ModelSizes& sizes, const KvShape& kv,
    std::span<const WorkerBudget> workers, std::span<const Range> ranges) {
  if (ranges.size() != workers.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement: ", ranges.size(), " ranges for ",
                     workers.size(), " workers"));
  }
  if (workers.empty()) return absl::InvalidArgumentError("workers: none");
  std::vector<ShardPlan> plan;
  int expect = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    const std::string who = absl::StrCat("worker ", workers[i].name,
                                         ": blocks ",
                                         range_text(r.first, r.last));
    if (r.first != expect) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": must start at block ", expect,
          i == 0 ? " (the first worker holds the embedding)"
                 : " (where the previous worker's range ends)"));
    }
    if (r.last <= r.first) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": empty range"));
    }
    if (r.last > sizes.n_layer) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": past the model's ", sizes.n_layer, " blocks"));
    }
    expect = r.last;
    plan.push_back(shard_plan(sizes, kv, r.first, r.last));
  }
  if (expect != sizes.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement: the ranges cover blocks [0, ", expect, ") of the model's ",
        sizes.n_layer, "; the last worker's range must end at ",
        sizes.n_layer));
  }
  for (size_t i = 0; i < plan.size(); ++i) {
    if (workers[i].bytes > 0 && plan[i].total() > workers[i].bytes) {
      return absl::ResourceExhaustedError(need_text(workers[i], plan[i]));
    }
  }
  return plan;
}

std::string format_bytes(uint64_t bytes) {
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double v = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (v >= 1024 && unit < 3) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[unit]);
  return buf;
}

namespace {

struct Unit {
  const char* suffix;
  uint64_t factor;
};
// Longest suffix first, so that "GiB" is not read as "B" nor "Gi".
constexpr uint64_t kKi = uint64_t{1} << 10;
constexpr uint64_t kK = 1000;
constexpr Unit kUnits[] = {
    {"KiB", kKi},
    {"MiB", kKi * kKi},
    {"GiB", kKi * kKi * kKi},
    {"TiB", kKi * kKi * kKi * kKi},
    // Kubernetes quantities (binary SI): Ki .. Ei.
    {"Ki", kKi},
    {"Mi", kKi * kKi},
    {"Gi", kKi * kKi * kKi},
    {"Ti", kKi * kKi * kKi * kKi},
    {"Pi", kKi * kKi * kKi * kKi * kKi},
    {"Ei", kKi * kKi * kKi * kKi * kKi * kKi},
    {"KB", kK},
    {"kB", kK},
    {"MB", kK * kK},
    {"GB", kK * kK * kK},
    {"TB", kK * kK * kK * kK},
    // Kubernetes quantities (decimal SI): k, M, G, T, P, E.
    {"k", kK},
    {"M", kK * kK},
    {"G", kK * kK * kK},
    {"T", kK * kK * kK * kK},
    {"P", kK * kK * kK * kK * kK},
    {"E", kK * kK * kK * kK * kK * kK},
    {"B", 1},
};

absl::Status not_a_size(absl::string_view original) {
  return absl::InvalidArgumentError(
      absl::StrCat("\"", original,
                   "\" is not a size (bytes, or e.g. 4GiB, 4Gi, 512MiB, 2GB, "
                   "2G, 2e9)"));
}

// "2e9", "1.5E3": a decimal exponent (Kubernetes' form) of a whole number
// of bytes. nullopt when `t` is not of that form.
std::optional<absl::StatusOr<uint64_t>> parse_exponent(
    absl::string_view t, absl::string_view original) {
  const size_t e = t.find_first_of("eE");
  if (e == absl::string_view::npos || e == 0 || e + 1 >= t.size()) {
    return std::nullopt;
  }
  double mantissa = 0;
  int exponent = 0;
  absl::string_view exp_text = t.substr(e + 1);
  if (!exp_text.empty() && exp_text.front() == '+') exp_text.remove_prefix(1);
  if (!absl::SimpleAtod(t.substr(0, e), &mantissa) ||
      !absl::SimpleAtoi(exp_text, &exponent) || mantissa < 0 ||
      t.substr(0, e).find_first_not_of("0123456789.") !=
          absl::string_view::npos) {
    return std::nullopt;
  }
  if (exponent < 0 || exponent > 19) {
    return absl::StatusOr<uint64_t>(absl::InvalidArgumentError(
        absl::StrCat("\"", original,
                     "\" is not a whole number of bytes in range")));
  }
  const double bytes = mantissa * std::pow(10.0, exponent);
  if (!(bytes < 1.8e19)) {
    return absl::StatusOr<uint64_t>(absl::InvalidArgumentError(
        absl::StrCat("\"", original, "\" is too large")));
  }
  return absl::StatusOr<uint64_t>(static_cast<uint64_t>(bytes));
}

}  // namespace

absl::StatusOr<uint64_t> parse_byte_size(std::string_view text) {
  const absl::string_view original(text.data(), text.size());
  absl::string_view t = absl::StripAsciiWhitespace(original);
  if (t.empty()) return not_a_size(original);
  if (t.back() == 'm') {
    // Kubernetes' milli suffix: a CPU quantity, or a thousandth of a byte.
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", original,
        "\" is not a size: m is milli (a thousandth of a byte); for "
        "mebibytes say Mi or MiB, for megabytes M or MB"));
  }
  if (auto exp = parse_exponent(t, original)) return *std::move(exp);
  uint64_t factor = 1;
  for (const Unit& u : kUnits) {
    absl::string_view suffix(u.suffix);
    if (t.size() > suffix.size() &&
        t.substr(t.size() - suffix.size()) == suffix) {
      factor = u.factor;
      t = absl::StripAsciiWhitespace(t.substr(0, t.size() - suffix.size()));
      break;
    }
  }
  uint64_t value = 0;
  double fraction = 0;
  if (absl::SimpleAtoi(t, &value) && !absl::StartsWith(t, "-") &&
      !absl::StartsWith(t, "+")) {
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(value, factor, &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", original, "\" is too large"));
    }
    return bytes;
  }
  // "1.5GiB": a fraction of a unit, rounded down to a byte.
  if (factor > 1 && !t.empty() &&
      t.find_first_not_of("0123456789.") == absl::string_view::npos &&
      absl::SimpleAtod(t, &fraction) && fraction >= 0) {
    if (!(fraction * static_cast<double>(factor) < 1.8e19)) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", original, "\" is too large"));
    }
    return static_cast<uint64_t>(fraction * static_cast<double>(factor));
  }
  return not_a_size(original);
}

absl::StatusOr<double> parse_byte_rate(std::string_view text) {
  const absl::string_view t = absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
  if (!absl::EndsWith(t, "/s")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", t, "\" is not a rate (a size per second, e.g. 20GB/s or 18.6GiB/s)"));
  }
  const absl::string_view size = t.substr(0, t.size() - 2);
  absl::StatusOr<uint64_t> bytes = parse_byte_size(std::string_view(size.data(), size.size()));
  if (!bytes.ok() || *bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", t, "\" is not a rate (a size per second, e.g. 20GB/s or 18.6GiB/s)"));
  }
  return static_cast<double>(*bytes);
}

absl::StatusOr<double> parse_flop_rate(std::string_view text) {
  const absl::string_view t = absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
  const absl::Status bad = absl::InvalidArgumentError(absl::StrCat(
      "\"", t, "\" is not a FLOP rate (e.g. 800GFLOP/s or 1.2TFLOP/s)"));
  if (!absl::EndsWith(t, "FLOP/s")) return bad;
  absl::string_view number = absl::StripAsciiWhitespace(t.substr(0, t.size() - 6));
  double factor = 1;
  if (!number.empty()) {
    switch (number.back()) {
      case 'k': factor = 1e3; break;
      case 'M': factor = 1e6; break;
      case 'G': factor = 1e9; break;
      case 'T': factor = 1e12; break;
      case 'P': factor = 1e15; break;
      default: break;
    }
    if (factor != 1) number = absl::StripAsciiWhitespace(number.substr(0, number.size() - 1));
  }
  double value = 0;
  if (!absl::SimpleAtod(number, &value) || !(value > 0) || !(value * factor < 1e21)) return bad;
  return value * factor;
}

std::string format_rate(double bytes_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB/s", bytes_per_s / 1e9);
  return buf;
}

std::string format_flop_rate(double flops_per_s) {
  char buf[32];
  if (flops_per_s >= 1e12) {
    std::snprintf(buf, sizeof buf, "%.2f TFLOP/s", flops_per_s / 1e12);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f GFLOP/s", flops_per_s / 1e9);
  }
  return buf;
}

}  // namespace strata::placement
