// Metrics: counters, gauges and fixed-bucket histograms, rendered in the
// Prometheus text exposition format 0.0.4 (what GET /metrics serves):
//
//   # HELP strata:prompt_tokens_total Prompt tokens processed.
//   # TYPE strata:prompt_tokens_total counter
//   strata:prompt_tokens_total 1234
//   # TYPE strata:time_to_first_token_seconds histogram
//   strata:time_to_first_token_seconds_bucket{le="0.1"} 3
//   ...
//   strata:time_to_first_token_seconds_bucket{le="+Inf"} 4
//   strata:time_to_first_token_seconds_sum 0.52
//   strata:time_to_first_token_seconds_count 4
//
// A Registry owns metric families in registration order; a family owns its
// children, one per combination of label values. ServingMetrics is the set
// the coordinator keeps, with vLLM's meanings under the `strata:` prefix
// (vLLM docs, "Production Metrics").
//
// Hot path: Counter::inc, Gauge::set and Histogram::observe are lock-free
// (relaxed atomics); Family::with takes a lock, so callers on a hot path
// keep the child it returns (children never move and live as long as the
// registry). Threads: every method may be called from any thread.
// Ownership: the registry owns everything; references stay valid for its
// lifetime. Rendering reads the atomics one at a time, so a scrape during
// an update may see a histogram's sum ahead of its count by one
// observation; the _count always equals the +Inf bucket.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::coordinator {

class Counter {
 public:
  void inc(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `bounds`: the buckets' upper bounds (le), strictly increasing and
  // finite; +Inf is implied.
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);

  const std::vector<double>& bounds() const { return bounds_; }
  // Cumulative counts, one per bound and a last one for +Inf.
  std::vector<uint64_t> cumulative() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1
  std::atomic<double> sum_{0.0};
};

// A summary without quantiles: a sum and a count (of seconds, say). Either
// observed here or copied from a source that keeps its own totals (a
// worker's step time, read at each health check).
class Summary {
 public:
  void observe(double v) {
    sum_.fetch_add(v, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  void set(double sum, uint64_t count) {
    sum_.store(sum, std::memory_order_relaxed);
    count_.store(count, std::memory_order_relaxed);
  }
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> sum_{0.0};
  std::atomic<uint64_t> count_{0};
};

enum class MetricType { kCounter, kGauge, kHistogram, kSummary };

// All the children of one metric name, told apart by label values (in the
// order of the family's label names).
class MetricFamily {
 public:
  MetricFamily(std::string name, std::string help, MetricType type,
               std::vector<std::string> labels, std::vector<double> bounds);
  virtual ~MetricFamily() = default;
  MetricFamily(const MetricFamily&) = delete;
  MetricFamily& operator=(const MetricFamily&) = delete;

  const std::string& name() const { return name_; }
  // Appends HELP, TYPE and the samples; `constant` (rendered labels, e.g.
  // model_name="m") goes first in every sample's labels.
  void render(std::string& out, std::string_view constant = {}) const;
  bool has_label(std::string_view name) const {
    for (const std::string& l : labels_) {
      if (l == name) return true;
    }
    return false;
  }

 protected:
  // The index of the child for `values` (made on first use); aborts when
  // the count of values is not the count of label names.
  size_t child(const std::vector<std::string>& values);

  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::vector<std::string> labels_;
  const std::vector<double> bounds_;  // histograms
  mutable std::mutex mu_;             // guards the map and the deques' size
  std::map<std::vector<std::string>, size_t> index_;
  std::vector<std::vector<std::string>> values_;  // by child index
  // One of these is used, by type_; deques: children never move.
  std::deque<Counter> counters_;
  std::deque<Gauge> gauges_;
  std::deque<Histogram> histograms_;
  std::deque<Summary> summaries_;
};

template <typename T>
class Family : public MetricFamily {
 public:
  using MetricFamily::MetricFamily;
  // The child for these label values (see MetricFamily::child).
  T& with(const std::vector<std::string>& values);
  T& get() { return with({}); }  // a family without labels
};
template <>
Counter& Family<Counter>::with(const std::vector<std::string>& values);
template <>
Gauge& Family<Gauge>::with(const std::vector<std::string>& values);
template <>
Histogram& Family<Histogram>::with(const std::vector<std::string>& values);
template <>
Summary& Family<Summary>::with(const std::vector<std::string>& values);

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // `name` must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
  // [a-zA-Z_][a-zA-Z0-9_]* and not "le" or "quantile" (checked: a bad name
  // is a programming error and aborts). Counters' names end in _total.
  // Families are registered while the owner is built, before any other
  // thread sees the registry.
  Family<Counter>& counter(std::string name, std::string help,
                           std::vector<std::string> labels = {});
  Family<Gauge>& gauge(std::string name, std::string help,
                       std::vector<std::string> labels = {});
  Family<Histogram>& histogram(std::string name, std::string help,
                               std::vector<double> bounds,
                               std::vector<std::string> labels = {});
  Family<Summary>& summary(std::string name, std::string help,
                           std::vector<std::string> labels = {});

  // Labels every sample carries (vLLM's model_name), first in its label
  // set. Set while the owner is built, like the families; a name that a
  // family uses too aborts.
  void set_constant_labels(
      const std::vector<std::pair<std::string, std::string>>& labels);

  // The text exposition format 0.0.4: HELP and TYPE lines for every
  // family, then its samples (a family with no child yet prints only
  // those).
  std::string render() const;

 private:
  template <typename T>
  Family<T>& add(std::string name, std::string help, MetricType type,
                 std::vector<std::string> labels, std::vector<double> bounds);
  std::vector<std::unique_ptr<MetricFamily>> families_;
  std::string constant_;  // rendered: name="value",...
};

// Prometheus text escaping. Label values: \ " and newline, and each byte
// that is not part of well-formed UTF-8 becomes U+FFFD; HELP: \ and
// newline.
std::string escape_label_value(std::string_view v);
std::string escape_help(std::string_view v);
// A sample value: shortest round-trip decimal, +Inf, -Inf, NaN.
std::string format_value(double v);

// The coordinator's metrics (vLLM's meanings, `strata:` prefix). Fed by the
// scheduler (tokens, latencies, request ends) and the cluster (worker
// states); the gauges of the moment are set just before rendering
// (Cluster::render_prometheus).
class ServingMetrics {
  Registry registry_;  // first: the references below point into it

 public:
  ServingMetrics();

  Registry& registry() { return registry_; }
  std::string render() const { return registry_.render(); }

  // Request ends. `finished_reason` "stop" or "length" (success); failures
  // are counted by reason: "abort" (cancelled by the client) or "error".
  void request_finished(std::string_view finished_reason);
  void request_failed(bool cancelled);

  Gauge& requests_running;
  Gauge& requests_waiting;
  Gauge& kv_cache_usage;
  Counter& prompt_tokens;
  Counter& generation_tokens;
  Counter& prefix_cache_queries;
  Counter& prefix_cache_hits;
  Gauge& prefix_cache_usage;
  Histogram& time_to_first_token;
  Histogram& inter_token_latency;
  Histogram& e2e_request_latency;
  Histogram& step_seconds;
  Histogram& iteration_tokens;
  Histogram& request_prompt_tokens;
  Histogram& request_generation_tokens;
  Family<Counter>& request_success;
  Family<Counter>& request_failure;
  Family<Gauge>& worker_up;
  Family<Gauge>& worker_live_sequences;
  Family<Summary>& worker_step_seconds;

 private:
  Counter* success_stop_;
  Counter* success_length_;
  Counter* failure_abort_;
  Counter* failure_error_;
};

}  // namespace strata::coordinator
