// The metrics registry: exact text for known values, label and HELP
// escaping, histogram buckets (a value on a bound counts in that bucket),
// exact totals from many threads at once, and the whole page read back by
// prometheus_client's parser (an implementation independent of ours).
#include "coordinator/metrics.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace strata::coordinator {
namespace {

TEST(Metrics, RendersCountersGaugesAndHistogramsExactly) {
  Registry r;
  r.counter("strata:tokens_total", "Tokens.").get().inc(3);
  r.gauge("strata:running", "Running now.").get().set(2.5);
  Histogram& h =
      r.histogram("strata:latency_seconds", "Latency.", {0.1, 1}).get();
  h.observe(0.05);
  h.observe(0.1);  // on the bound: le="0.1"
  h.observe(0.5);
  h.observe(7);
  EXPECT_EQ(r.render(),
            "# HELP strata:tokens_total Tokens.\n"
            "# TYPE strata:tokens_total counter\n"
            "strata:tokens_total 3\n"
            "# HELP strata:running Running now.\n"
            "# TYPE strata:running gauge\n"
            "strata:running 2.5\n"
            "# HELP strata:latency_seconds Latency.\n"
            "# TYPE strata:latency_seconds histogram\n"
            "strata:latency_seconds_bucket{le=\"0.1\"} 2\n"
            "strata:latency_seconds_bucket{le=\"1\"} 3\n"
            "strata:latency_seconds_bucket{le=\"+Inf\"} 4\n"
            "strata:latency_seconds_sum 7.65\n"
            "strata:latency_seconds_count 4\n");
}

TEST(Metrics, EscapesLabelValuesAndHelp) {
  Registry r;
  auto& f = r.counter("strata:odd_total", "back\\slash and\nnewline",
                      {"worker", "path"});
  f.with({"a\"b", "c:\\d\ne"}).inc();
  EXPECT_EQ(r.render(),
            "# HELP strata:odd_total back\\\\slash and\\nnewline\n"
            "# TYPE strata:odd_total counter\n"
            "strata:odd_total{worker=\"a\\\"b\",path=\"c:\\\\d\\ne\"} 1\n");
  EXPECT_EQ(escape_label_value("plain"), "plain");
  // UTF-8 kept; each byte of a stray byte, an overlong form, a surrogate
  // and a cut sequence becomes U+FFFD (the page must stay UTF-8).
  EXPECT_EQ(escape_label_value("h\xC3\xA9 \xF0\x9F\x98\x80"),
            "h\xC3\xA9 \xF0\x9F\x98\x80");
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(escape_label_value("a\xFF"
                               "b\xC0\xAF\xED\xA0\x80\xE2\x82"),
            "a" + fffd + "b" + fffd + fffd + fffd + fffd + fffd + fffd + fffd);
}

TEST(Metrics, ConstantLabelsComeFirstInEverySample) {
  Registry r;
  r.counter("strata:a_total", "A.").get().inc();
  r.histogram("strata:h", "H.", {1}, {"worker"}).with({"w0"}).observe(2);
  r.set_constant_labels({{"model_name", "m\"1"}});
  EXPECT_EQ(
      r.render(),
      "# HELP strata:a_total A.\n# TYPE strata:a_total counter\n"
      "strata:a_total{model_name=\"m\\\"1\"} 1\n"
      "# HELP strata:h H.\n# TYPE strata:h histogram\n"
      "strata:h_bucket{model_name=\"m\\\"1\",worker=\"w0\",le=\"1\"} 0\n"
      "strata:h_bucket{model_name=\"m\\\"1\",worker=\"w0\",le=\"+Inf\"} 1\n"
      "strata:h_sum{model_name=\"m\\\"1\",worker=\"w0\"} 2\n"
      "strata:h_count{model_name=\"m\\\"1\",worker=\"w0\"} 1\n");
}

TEST(Metrics, FormatsSpecialValues) {
  EXPECT_EQ(format_value(1.0 / 0.0), "+Inf");
  EXPECT_EQ(format_value(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(format_value(0.0 / 0.0), "NaN");
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(1e21), "1e+21");
  EXPECT_EQ(format_value(12345678), "12345678");
}

TEST(Metrics, LabelledChildrenAreStableAndSorted) {
  Registry r;
  auto& f = r.gauge("strata:worker_up", "Up.", {"worker"});
  Gauge& b = f.with({"b"});
  Gauge& a = f.with({"a"});
  EXPECT_EQ(&f.with({"b"}), &b);  // the same child each time
  b.set(1);
  a.set(0);
  EXPECT_EQ(r.render(),
            "# HELP strata:worker_up Up.\n# TYPE strata:worker_up gauge\n"
            "strata:worker_up{worker=\"a\"} 0\n"
            "strata:worker_up{worker=\"b\"} 1\n");
}

TEST(Metrics, SummaryHasSumAndCount) {
  Registry r;
  auto& f = r.summary("strata:step_seconds", "Steps.", {"worker"});
  f.with({"w0"}).set(1.5, 3);
  f.with({"w1"}).observe(0.25);
  EXPECT_EQ(r.render(),
            "# HELP strata:step_seconds Steps.\n"
            "# TYPE strata:step_seconds summary\n"
            "strata:step_seconds_sum{worker=\"w0\"} 1.5\n"
            "strata:step_seconds_count{worker=\"w0\"} 3\n"
            "strata:step_seconds_sum{worker=\"w1\"} 0.25\n"
            "strata:step_seconds_count{worker=\"w1\"} 1\n");
}

TEST(Metrics, ExactTotalsFromManyThreads) {
  Registry r;
  Counter& c = r.counter("strata:c_total", "C.").get();
  Histogram& h = r.histogram("strata:h", "H.", {1, 2}).get();
  auto& fam = r.counter("strata:f_total", "F.", {"k"});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        c.inc();
        h.observe(i % 3);  // 0, 1 -> le=1; 2 -> le=2
        fam.with({t % 2 ? "odd" : "even"}).inc();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 80000);
  const std::vector<uint64_t> cum = h.cumulative();
  ASSERT_EQ(cum.size(), 3u);
  EXPECT_EQ(cum[2], 80000u);
  EXPECT_EQ(cum[1], 80000u);
  EXPECT_EQ(cum[0], 8u * (3334u + 3333u));
  EXPECT_EQ(fam.with({"odd"}).value(), 40000);
}

TEST(Metrics, ServingMetricsHaveVllmNamesAndTypes) {
  ServingMetrics m;
  m.request_finished("stop");
  m.request_finished("length");
  m.request_finished("length");
  m.request_failed(true);
  const std::string page = m.render();
  for (const char* line :
       {"# TYPE strata:num_requests_running gauge",
        "# TYPE strata:num_requests_waiting gauge",
        "# TYPE strata:kv_cache_usage_perc gauge",
        "# TYPE strata:prompt_tokens_total counter",
        "# TYPE strata:generation_tokens_total counter",
        "# TYPE strata:prefix_cache_queries_total counter",
        "# TYPE strata:prefix_cache_hits_total counter",
        "# TYPE strata:prefix_cache_usage_perc gauge",
        "# TYPE strata:time_to_first_token_seconds histogram",
        "# TYPE strata:inter_token_latency_seconds histogram",
        "# TYPE strata:e2e_request_latency_seconds histogram",
        "# TYPE strata:worker_up gauge",
        "# TYPE strata:worker_step_seconds summary",
        "strata:request_success_total{finished_reason=\"length\"} 2",
        "strata:request_success_total{finished_reason=\"stop\"} 1",
        "strata:request_failure_total{reason=\"abort\"} 1",
        "strata:time_to_first_token_seconds_count 0"}) {
    EXPECT_NE(page.find(std::string(line) + "\n"), std::string::npos) << line;
  }
}

// Runs parse_metrics.py on `page`; its output lines, or a skip.
struct Parsed {
  int status = 0;
  std::vector<std::string> lines;
};
Parsed parse_with_prometheus_client(const std::string& page) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string in =
      (dir / ("strata_metrics_" + std::to_string(::getpid()) + ".txt"))
          .string();
  const std::string out = in + ".out";
  std::ofstream(in, std::ios::binary) << page;
  const std::string cmd = std::string("\"") + STRATA_PYTHON + "\" \"" +
                          STRATA_PARSE_METRICS + "\" \"" + in + "\" > \"" +
                          out + "\" 2>&1";
  const int rc = std::system(cmd.c_str());
  Parsed p;
  p.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  std::ifstream f(out);
  for (std::string line; std::getline(f, line);) p.lines.push_back(line);
  std::filesystem::remove(in);
  std::filesystem::remove(out);
  return p;
}

TEST(Metrics, PrometheusClientParsesThePage) {
  ServingMetrics m;
  m.prompt_tokens.inc(10);
  m.generation_tokens.inc(6);
  m.time_to_first_token.observe(0.02);
  m.time_to_first_token.observe(3);
  m.iteration_tokens.observe(520);  // vLLM's name ends in _total: a histogram still
  m.request_finished("length");
  m.worker_up.with({"w0 \"quoted\" \\ back\nslash"}).set(1);
  m.worker_step_seconds.with({"w0"}).set(0.75, 12);
  const Parsed p = parse_with_prometheus_client(m.render());
  if (p.status == 77) GTEST_SKIP() << (p.lines.empty() ? "" : p.lines[0]);
  ASSERT_EQ(p.status, 0) << (p.lines.empty() ? "" : p.lines.back());
  const std::set<std::string> lines(p.lines.begin(), p.lines.end());
  for (const char* want : {
           "family strata:prompt_tokens counter \"Number of prefill tokens "
           "processed.\"",
           "sample strata:prompt_tokens_total {} 10.0",
           "sample strata:generation_tokens_total {} 6.0",
           "family strata:time_to_first_token_seconds histogram "
           "\"Histogram of time to first token in seconds (request received "
           "to first token sampled).\"",
           "sample strata:time_to_first_token_seconds_bucket {\"le\": "
           "\"0.02\"} 1.0",
           "sample strata:time_to_first_token_seconds_bucket {\"le\": \"2.5\"} "
           "1.0",
           "sample strata:time_to_first_token_seconds_bucket {\"le\": \"5\"} "
           "2.0",
           "sample strata:time_to_first_token_seconds_bucket {\"le\": "
           "\"+Inf\"} 2.0",
           "sample strata:time_to_first_token_seconds_count {} 2.0",
           "sample strata:time_to_first_token_seconds_sum {} 3.02",
           "sample strata:request_success_total {\"finished_reason\": "
           "\"length\"} 1.0",
           "sample strata:iteration_tokens_total_bucket {\"le\": \"512\"} 0.0",
           "sample strata:iteration_tokens_total_bucket {\"le\": \"1024\"} 1.0",
           "sample strata:iteration_tokens_total_count {} 1.0",
           "sample strata:worker_up {\"worker\": \"w0 \\\"quoted\\\" \\\\ "
           "back\\nslash\"} 1.0",
           "sample strata:worker_step_seconds_sum {\"worker\": \"w0\"} 0.75",
           "sample strata:worker_step_seconds_count {\"worker\": \"w0\"} 12.0",
       }) {
    EXPECT_EQ(lines.count(want), 1u) << want;
  }
  // Every family we registered came back, with its type.
  int families = 0;
  for (const std::string& l : p.lines) families += l.rfind("family ", 0) == 0;
  EXPECT_EQ(families, 20);
}

}  // namespace
}  // namespace strata::coordinator
