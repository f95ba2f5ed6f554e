// The cluster config: what a good file gives, and errors that name the key.
#include "coordinator/cluster_config.h"
#include "model/placement.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace strata::coordinator {
namespace {

using placement::parse_byte_size;

TEST(ClusterConfig, ReadsEveryKey) {
  auto c = parse_cluster_config(R"(
model: /models/m.gguf
listen: 127.0.0.1:6000
context_length: 2048
max_sequences: 4
kv_type: f32
placement: explicit
health_check_interval_ms: 500
health_check_timeout_ms: 700
health_check_failures: 3
trace: /tmp/t.jsonl
workers:
  - address: 127.0.0.1:6001
    name: w0
    memory_budget: 2GiB
    blocks: [0, 10]
  - address: 127.0.0.1:6002
    blocks: [10, 30]
)", "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model, "/models/m.gguf");
  EXPECT_EQ(c->listen, "127.0.0.1:6000");
  EXPECT_EQ(c->context_length, 2048);
  EXPECT_EQ(c->max_sequences, 4);
  EXPECT_EQ(c->kv_type, GgmlType::kF32);
  EXPECT_TRUE(c->explicit_placement);
  EXPECT_EQ(c->health_check_interval_ms, 500);
  EXPECT_EQ(c->health_check_timeout_ms, 700);
  EXPECT_EQ(c->health_check_failures, 3);
  EXPECT_EQ(c->trace, "/tmp/t.jsonl");
  ASSERT_EQ(c->workers.size(), 2u);
  EXPECT_EQ(c->workers[0].name, "w0");
  EXPECT_EQ(c->workers[0].memory_budget, 2ull << 30);
  EXPECT_EQ(c->workers[0].blocks->last, 10);
  EXPECT_EQ(c->workers[1].name, "127.0.0.1:6002");
  EXPECT_EQ(c->workers[1].blocks->first, 10);
}

TEST(ClusterConfig, DefaultsAndInferredPlacement) {
  auto c = parse_cluster_config(
      "model: m.gguf\nworkers:\n  - address: 127.0.0.1:1\n", "t");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen, "127.0.0.1:50051");
  EXPECT_EQ(c->max_sequences, 8);
  EXPECT_EQ(c->kv_type, GgmlType::kF16);
  EXPECT_FALSE(c->explicit_placement);
  auto e = parse_cluster_config(
      "workers:\n  - {address: 'h:1', blocks: [0, 2]}\n", "t");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->explicit_placement);
}

TEST(ClusterConfig, PrefixCacheBlocks) {
  auto d = parse_cluster_config("workers: [{address: 'h:1'}]\n", "t");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->prefix_cache_blocks, -1);  // auto: one context's worth
  auto c = parse_cluster_config("prefix_cache_blocks: 0\nworkers: [{address: 'h:1'}]\n", "t");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->prefix_cache_blocks, 0);
  auto e = parse_cluster_config("prefix_cache_blocks: -2\nworkers: [{address: 'h:1'}]\n", "t");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("prefix_cache_blocks"), std::string::npos)
      << e.status();
}

TEST(ClusterConfig, ErrorsNameTheKey) {
  struct Case {
    const char* yaml;
    const char* message;
  };
  const Case cases[] = {
      {"workers: []", "t: workers: expected a list of at least one worker"},
      {"model: m", "t: workers: missing"},
      {"modle: m\nworkers: [{address: 'h:1'}]", "t: modle: unknown key"},
      {"workers: [{adress: 'h:1'}]", "t: workers[0].adress: unknown key"},
      {"workers: [{name: x}]", "t: workers[0].address: missing"},
      {"workers: [{address: 'h'}]", "t: workers[0].address: 'h' is not HOST:PORT"},
      {"workers: [{address: 'h:99999'}]", "port must be 1 .. 65535"},
      {"max_sequences: 0\nworkers: [{address: 'h:1'}]",
       "t: max_sequences: 0 is out of range [1, 1024]"},
      {"prefill_chunk: 0\nworkers: [{address: 'h:1'}]",
       "t: prefill_chunk: 0 is out of range [1, 4096]"},
      {"prefill_chunk: 4090\nmax_sequences: 8\nworkers: [{address: 'h:1'}]",
       "t: prefill_chunk: 4090 rows with max_sequences 8 exceed the 4096 rows"},
      {"context_length: lots\nworkers: [{address: 'h:1'}]",
       "t: context_length: 'lots' is not an integer"},
      {"kv_type: q8\nworkers: [{address: 'h:1'}]",
       "t: kv_type: 'q8' is not f16 or f32"},
      {"placement: clever\nworkers: [{address: 'h:1'}]",
       "t: placement: 'clever' is not auto or explicit"},
      {"workers: [{address: 'h:1', blocks: [0, 2]}, {address: 'h:2'}]",
       "t: workers[1].blocks: missing (explicit placement"},
      {"placement: auto\nworkers: [{address: 'h:1', blocks: [0, 2]}]",
       "t: placement: auto, but workers give `blocks`"},
      {"workers: [{address: 'h:1', blocks: [3]}]",
       "t: workers[0].blocks: expected [first, last]"},
      {"workers: [{address: 'h:1', blocks: [3, 3]}]",
       "t: workers[0].blocks: [3, 3] is empty"},
      {"workers: [{address: 'h:1', memory_budget: 2XB}]",
       "t: workers[0].memory_budget: \"2XB\" is not a size"},
      {"workers: [{name: a, declared: true, memory_budget: 0}]",
       "t: workers[0].memory_budget: 0 (a declared worker needs a budget"},
      {"workers: [{name: a, declared: true}]",
       "t: workers[0].memory_budget: missing (a declared worker"},
      {"workers: [{address: 'h:1'}, {address: 'h:1'}]",
       "t: workers[1].address: h:1 appears twice"},
      {"workers: [{address: 'h:1', name: a}, {address: 'h:2', name: a}]",
       "t: workers[1].name: 'a' names two workers"},
      {"workers: [{address: 'http://x:1'}]",
       "t: workers[0].address: 'http://x:1' has a scheme"},
      {"workers: [{address: '::1:50061'}]",
       "t: workers[0].address: '::1:50061': an IPv6 host is written in brackets"},
      {"workers: [{address: 'h:1'}]\nlisten: nowhere",
       "t: listen: 'nowhere' is not HOST:PORT"},
      {"[1, 2", "t: not valid YAML"},
      {"- a\n- b", "t: expected a map of settings"},
      {"model: a\nworkers: [{address: 'h:1'}]\nmodel: b", "t: model: given twice (line 3)"},
  };
  for (const Case& c : cases) {
    auto r = parse_cluster_config(c.yaml, "t");
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_NE(std::string(r.status().message()).find(c.message),
              std::string::npos)
        << "yaml: " << c.yaml << "\ngot: " << r.status().message();
  }
}

TEST(ClusterConfig, HttpListenAndApiKey) {
  const std::string workers = "workers:\n  - address: 127.0.0.1:6001\n";
  auto d = parse_cluster_config("model: m\n" + workers, "t.yaml");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->http_listen, "127.0.0.1:8080");  // on by default, loopback
  EXPECT_FALSE(d->http_listen_given);            // so a taken port falls back
  EXPECT_EQ(d->api_key, "");
  auto c = parse_cluster_config(
      "model: m\nhttp_listen: 0.0.0.0:9000\napi_key: k\n" + workers, "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->http_listen, "0.0.0.0:9000");
  EXPECT_TRUE(c->http_listen_given);
  EXPECT_EQ(c->api_key, "k");
  auto off = parse_cluster_config("model: m\nhttp_listen: \"off\"\n" + workers, "t.yaml");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->http_listen, "off");
  auto bad = parse_cluster_config("model: m\nhttp_listen: nowhere\n" + workers, "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("http_listen"), std::string::npos) << bad.status();
  auto empty_key = parse_cluster_config("model: m\napi_key: \"\"\n" + workers, "t.yaml");
  ASSERT_FALSE(empty_key.ok());
  EXPECT_NE(empty_key.status().message().find("api_key"), std::string::npos);
}

TEST(ClusterConfig, DirectoryIsRefused) {
  auto r = load_cluster_config(::testing::TempDir());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("a directory, not a config file"),
            std::string::npos)
      << r.status();
}

TEST(ClusterConfig, MissingFileIsNotFound) {
  auto r = load_cluster_config("/nonexistent/cluster.yaml");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

TEST(ClusterConfig, ByteSizes) {
  EXPECT_EQ(*parse_byte_size("1000"), 1000u);
  EXPECT_EQ(*parse_byte_size("512MiB"), 512ull << 20);
  EXPECT_EQ(*parse_byte_size("1.5 GiB"), 3ull << 29);
  EXPECT_FALSE(parse_byte_size("2G").ok());  // GiB or GB?
  EXPECT_FALSE(parse_byte_size("").ok());
  EXPECT_FALSE(parse_byte_size("GiB").ok());
  EXPECT_FALSE(parse_byte_size("1e30 TiB").ok());
}

// An unwritable trace path stops a cluster's start; a writable one is
// created (empty).
TEST(ClusterConfig, TracePathMustBeWritable) {
  const absl::Status bad = check_trace_writable("/nonexistent-dir/trace.jsonl");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("cannot write /nonexistent-dir/trace.jsonl"), std::string::npos)
      << bad;
  const std::string ok_path = ::testing::TempDir() + "strata_trace_check.jsonl";
  EXPECT_TRUE(check_trace_writable(ok_path).ok());
  std::remove(ok_path.c_str());
}

}  // namespace
}  // namespace strata::coordinator
