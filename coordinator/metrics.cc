#include "coordinator/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace strata::coordinator {
namespace {

bool valid_name(std::string_view name, bool colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    c == '_' || (colon && c == ':') ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

[[noreturn]] void misuse(const std::string& what) {
  std::fprintf(stderr, "strata: metrics: %s\n", what.c_str());
  std::abort();
}

const char* type_name(MetricType t) {
  switch (t) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
    case MetricType::kSummary:
      return "summary";
  }
  return "untyped";
}

// `name{c="k",a="x",b="y"}` (or `name` with no labels): `constant` (the
// registry's constant labels, rendered), the family's labels, then `extra`
// (le="...").
void sample_name(std::string& out, const std::string& name,
                 std::string_view suffix, std::string_view constant,
                 const std::vector<std::string>& labels,
                 const std::vector<std::string>& values,
                 std::string_view extra_label = {},
                 std::string_view extra_value = {}) {
  out += name;
  out += suffix;
  if (constant.empty() && labels.empty() && extra_label.empty()) return;
  out += '{';
  out += constant;
  bool first = constant.empty();
  for (size_t i = 0; i < labels.size(); ++i) {
    if (!first) out += ',';
    first = false;
    out += labels[i];
    out += "=\"";
    out += escape_label_value(values[i]);
    out += '"';
  }
  if (!extra_label.empty()) {
    if (!first) out += ',';
    out += extra_label;
    out += "=\"";
    out += extra_value;
    out += '"';
  }
  out += '}';
}

void sample(std::string& out, const std::string& name, std::string_view suffix,
            std::string_view constant, const std::vector<std::string>& labels,
            const std::vector<std::string>& values, double v,
            std::string_view extra_label = {},
            std::string_view extra_value = {}) {
  sample_name(out, name, suffix, constant, labels, values, extra_label,
              extra_value);
  out += ' ';
  out += format_value(v);
  out += '\n';
}

// The length of the well-formed UTF-8 sequence at s[i] (1..4), or 0 when
// the bytes there are not one (overlong, surrogate, past U+10FFFF, cut).
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size();) {
    const char c = v[i];
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      // The format is UTF-8: a byte that starts no character becomes
      // U+FFFD rather than an unparsable page.
      const size_t n = utf8_length(v, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";
        ++i;
        continue;
      }
      out.append(v.substr(i, n));
      i += n;
      continue;
    }
    ++i;
  }
  return out;
}

std::string escape_help(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) return "NaN";  // cannot happen with 64 bytes
  return std::string(buf, end);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i + 1 < bounds_.size(); ++i) {
    if (!(bounds_[i] < bounds_[i + 1])) misuse("bucket bounds not increasing");
  }
  for (double b : bounds_) {
    if (!std::isfinite(b)) misuse("bucket bound not finite (+Inf is implied)");
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::observe(double v) {
  // le: the first bound >= v (a value on a bound falls in that bucket).
  const size_t i = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::cumulative() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    out[i] = total;
  }
  return out;
}

MetricFamily::MetricFamily(std::string name, std::string help, MetricType type,
                           std::vector<std::string> labels,
                           std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      labels_(std::move(labels)),
      bounds_(std::move(bounds)) {
  if (!valid_name(name_, true)) misuse("bad metric name: " + name_);
  for (const std::string& l : labels_) {
    if (!valid_name(l, false) || l.rfind("__", 0) == 0 ||
        (type_ == MetricType::kHistogram && l == "le") ||
        (type_ == MetricType::kSummary && l == "quantile")) {
      misuse("bad label name: " + l + " of " + name_);
    }
  }
}

size_t MetricFamily::child(const std::vector<std::string>& values) {
  if (values.size() != labels_.size()) {
    misuse("metric " + name_ + ": " + std::to_string(values.size()) +
           " label values for " + std::to_string(labels_.size()) + " labels");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(values);
  if (it != index_.end()) return it->second;
  const size_t i = values_.size();
  switch (type_) {
    case MetricType::kCounter:
      counters_.emplace_back();
      break;
    case MetricType::kGauge:
      gauges_.emplace_back();
      break;
    case MetricType::kHistogram:
      histograms_.emplace_back(bounds_);
      break;
    case MetricType::kSummary:
      summaries_.emplace_back();
      break;
  }
  values_.push_back(values);
  index_.emplace(values, i);
  return i;
}

template <>
Counter& Family<Counter>::with(const std::vector<std::string>& values) {
  const size_t i = child(values);
  std::lock_guard<std::mutex> lock(mu_);
  return counters_[i];
}
template <>
Gauge& Family<Gauge>::with(const std::vector<std::string>& values) {
  const size_t i = child(values);
  std::lock_guard<std::mutex> lock(mu_);
  return gauges_[i];
}
template <>
Histogram& Family<Histogram>::with(const std::vector<std::string>& values) {
  const size_t i = child(values);
  std::lock_guard<std::mutex> lock(mu_);
  return histograms_[i];
}
template <>
Summary& Family<Summary>::with(const std::vector<std::string>& values) {
  const size_t i = child(values);
  std::lock_guard<std::mutex> lock(mu_);
  return summaries_[i];
}

void MetricFamily::render(std::string& out, std::string_view constant) const {
  out += "# HELP ";
  out += name_;
  out += ' ';
  out += escape_help(help_);
  out += "\n# TYPE ";
  out += name_;
  out += ' ';
  out += type_name(type_);
  out += '\n';
  std::lock_guard<std::mutex> lock(mu_);
  // Children in label-value order: a stable page for diffs and tests.
  for (const auto& [values, i] : index_) {
    switch (type_) {
      case MetricType::kCounter:
        sample(out, name_, "", constant, labels_, values, counters_[i].value());
        break;
      case MetricType::kGauge:
        sample(out, name_, "", constant, labels_, values, gauges_[i].value());
        break;
      case MetricType::kHistogram: {
        const Histogram& h = histograms_[i];
        const std::vector<uint64_t> counts = h.cumulative();
        for (size_t b = 0; b < bounds_.size(); ++b) {
          sample(out, name_, "_bucket", constant, labels_, values,
                 static_cast<double>(counts[b]), "le",
                 format_value(bounds_[b]));
        }
        sample(out, name_, "_bucket", constant, labels_, values,
               static_cast<double>(counts.back()), "le", "+Inf");
        sample(out, name_, "_sum", constant, labels_, values, h.sum());
        sample(out, name_, "_count", constant, labels_, values,
               static_cast<double>(counts.back()));
        break;
      }
      case MetricType::kSummary: {
        const Summary& s = summaries_[i];
        sample(out, name_, "_sum", constant, labels_, values, s.sum());
        sample(out, name_, "_count", constant, labels_, values,
               static_cast<double>(s.count()));
        break;
      }
    }
  }
}

template <typename T>
Family<T>& Registry::add(std::string name, std::string help, MetricType type,
                         std::vector<std::string> labels,
                         std::vector<double> bounds) {
  for (const auto& f : families_) {
    if (f->name() == name) misuse("metric registered twice: " + name);
  }
  auto family =
      std::make_unique<Family<T>>(std::move(name), std::move(help), type,
                                  std::move(labels), std::move(bounds));
  Family<T>& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

Family<Counter>& Registry::counter(std::string name, std::string help,
                                   std::vector<std::string> labels) {
  return add<Counter>(std::move(name), std::move(help), MetricType::kCounter,
                      std::move(labels), {});
}
Family<Gauge>& Registry::gauge(std::string name, std::string help,
                               std::vector<std::string> labels) {
  return add<Gauge>(std::move(name), std::move(help), MetricType::kGauge,
                    std::move(labels), {});
}
Family<Histogram>& Registry::histogram(std::string name, std::string help,
                                       std::vector<double> bounds,
                                       std::vector<std::string> labels) {
  Histogram check(bounds);  // aborts on bad bounds at registration
  return add<Histogram>(std::move(name), std::move(help),
                        MetricType::kHistogram, std::move(labels),
                        std::move(bounds));
}
Family<Summary>& Registry::summary(std::string name, std::string help,
                                   std::vector<std::string> labels) {
  return add<Summary>(std::move(name), std::move(help), MetricType::kSummary,
                      std::move(labels), {});
}

void Registry::set_constant_labels(
    const std::vector<std::pair<std::string, std::string>>& labels) {
  constant_.clear();
  for (const auto& [name, value] : labels) {
    if (!valid_name(name, false) || name.rfind("__", 0) == 0 || name == "le" ||
        name == "quantile") {
      misuse("bad constant label name: " + name);
    }
    for (const auto& f : families_) {
      if (f->has_label(name)) misuse("constant label " + name + " clashes");
    }
    if (!constant_.empty()) constant_ += ',';
    constant_ += name;
    constant_ += "=\"";
    constant_ += escape_label_value(value);
    constant_ += '"';
  }
}

std::string Registry::render() const {
  std::string out;
  for (const auto& f : families_) f->render(out, constant_);
  return out;
}

// Buckets as vLLM's (vllm/engine/metrics.py), seconds.
ServingMetrics::ServingMetrics()
    : requests_running(
          registry_
              .gauge("strata:num_requests_running",
                     "Number of requests in model execution batches.")
              .get()),
      requests_waiting(registry_
                           .gauge("strata:num_requests_waiting",
                                  "Number of requests waiting to be processed.")
                           .get()),
      kv_cache_usage(
          registry_
              .gauge("strata:kv_cache_usage_perc",
                     "KV-cache usage. 1 means 100 percent usage (positions "
                     "held by live sequences over max_sequences x n_ctx).")
              .get()),
      prompt_tokens(registry_
                        .counter("strata:prompt_tokens_total",
                                 "Number of prefill tokens processed.")
                        .get()),
      generation_tokens(registry_
                            .counter("strata:generation_tokens_total",
                                     "Number of generation tokens processed.")
                            .get()),
      prefix_cache_queries(
          registry_
              .counter("strata:prefix_cache_queries_total",
                       "Prefix cache queries, in terms of number of queried "
                       "tokens (the prompts' tokens).")
              .get()),
      prefix_cache_hits(
          registry_
              .counter("strata:prefix_cache_hits_total",
                       "Prefix cache hits, in terms of number of cached "
                       "tokens (prompt tokens restored, not prefilled).")
              .get()),
      prefix_cache_usage(
          registry_
              .gauge("strata:prefix_cache_usage_perc",
                     "Prefix cache usage: blocks held over the stages' block "
                     "slots (1 means full; 0 when off).")
              .get()),
      time_to_first_token(
          registry_
              .histogram("strata:time_to_first_token_seconds",
                         "Histogram of time to first token in seconds "
                         "(request received to first token sampled).",
                         {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0})
              .get()),
      inter_token_latency(
          registry_
              .histogram(
                  "strata:inter_token_latency_seconds",
                  "Histogram of inter-token latency in seconds "
                  "(vLLM's time_per_output_token).",
                  {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                   0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0})
              .get()),
      e2e_request_latency(
          registry_
              .histogram("strata:e2e_request_latency_seconds",
                         "Histogram of end to end request latency in "
                         "seconds (received to last token).",
                         {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                          5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                          60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0})
              .get()),
      step_seconds(
          registry_
              .histogram("strata:step_seconds",
                         "Histogram of micro-batch round trips through the "
                         "pipeline in seconds (sent to the first stage to "
                         "result from the last).",
                         {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                          0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0})
              .get()),
      iteration_tokens(
          registry_
              .histogram("strata:iteration_tokens_total",
                         "Histogram of rows (tokens) per micro-batch: decode "
                         "rows and prompt chunks together (vLLM's "
                         "iteration_tokens_total).",
                         {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096})
              .get()),
      request_prompt_tokens(
          registry_
              .histogram("strata:request_prompt_tokens",
                         "Number of prefill tokens processed, per request.",
                         {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000,
                          10000, 20000, 50000, 100000, 200000})
              .get()),
      request_generation_tokens(
          registry_
              .histogram("strata:request_generation_tokens",
                         "Number of generation tokens processed, per request.",
                         {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000,
                          10000, 20000, 50000, 100000, 200000})
              .get()),
      request_success(registry_.counter(
          "strata:request_success_total",
          "Count of successfully processed requests.", {"finished_reason"})),
      request_failure(registry_.counter(
          "strata:request_failure_total",
          "Count of requests that ended without a finish reason: abort "
          "(cancelled by the client) or error.",
          {"reason"})),
      worker_up(registry_.gauge(
          "strata:worker_up",
          "1 while the worker answers its health checks and holds its "
          "shard, 0 otherwise.",
          {"worker"})),
      worker_live_sequences(registry_.gauge(
          "strata:worker_live_sequences",
          "Sequences with KV cache on the worker, at its last health check.",
          {"worker"})),
      worker_step_seconds(registry_.summary(
          "strata:worker_step_seconds",
          "Seconds the worker spent running micro-batches through its "
          "blocks, and their count, at its last health check.",
          {"worker"})) {
  success_stop_ = &request_success.with({"stop"});
  success_length_ = &request_success.with({"length"});
  failure_abort_ = &request_failure.with({"abort"});
  failure_error_ = &request_failure.with({"error"});
}

void ServingMetrics::request_finished(std::string_view finished_reason) {
  if (finished_reason == "stop") {
    success_stop_->inc();
  } else if (finished_reason == "length") {
    success_length_->inc();
  } else {
    request_success.with({std::string(finished_reason)}).inc();
  }
}

void ServingMetrics::request_failed(bool cancelled) {
  (cancelled ? failure_abort_ : failure_error_)->inc();
}

}  // namespace strata::coordinator
