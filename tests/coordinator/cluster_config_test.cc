// The cluster config: what a good file gives, and errors that name the key.
#include "coordinator/cluster_config.h"
#include "coordinator/cluster.h"
#include "model/placement.h"

#include <cstdio>
#include <string_view>
#include <optional>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
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
prefill_chunk: 256
prefill_chunk_beside_decode: 64
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
  EXPECT_EQ(c->prefill_chunk, 256);
  EXPECT_EQ(c->prefill_chunk_beside_decode, 64);
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
  EXPECT_EQ(c->prefill_chunk, 512);
  EXPECT_EQ(c->prefill_chunk_beside_decode, kAutoPrefillChunkBesideDecode);
  EXPECT_EQ(c->kv_type, GgmlType::kF16);
  EXPECT_FALSE(c->explicit_placement);
  auto e = parse_cluster_config(
      "workers:\n  - {address: 'h:1', blocks: [0, 2]}\n", "t");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->explicit_placement);
}

// auto (the default): 128 rows beside decodes when every stage runs on the
// cpu backend, whole chunks (0) when one does not; a number is kept.
TEST(ClusterConfig, PrefillChunkBesideDecode) {
  auto a = parse_cluster_config(
      "prefill_chunk_beside_decode: auto\nworkers: [{address: 'h:1'}]\n", "t");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->prefill_chunk_beside_decode, kAutoPrefillChunkBesideDecode);
  auto z = parse_cluster_config(
      "prefill_chunk_beside_decode: 0\nworkers: [{address: 'h:1'}]\n", "t");
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->prefill_chunk_beside_decode, 0);
  const int automatic = kAutoPrefillChunkBesideDecode;
  EXPECT_EQ(prefill_chunk_beside_decode_for(automatic, {"cpu", "cpu"}),
            kDefaultPrefillChunkBesideDecode);
  EXPECT_EQ(kDefaultPrefillChunkBesideDecode, 128);
  EXPECT_EQ(prefill_chunk_beside_decode_for(automatic, {"cpu", "cuda:1"}), 0);
  EXPECT_EQ(prefill_chunk_beside_decode_for(automatic, {"cuda"}), 0);
  EXPECT_EQ(prefill_chunk_beside_decode_for(automatic, {"fake"}), 0);
  EXPECT_EQ(prefill_chunk_beside_decode_for(automatic, {""}), 0);  // not described
  EXPECT_EQ(prefill_chunk_beside_decode_for(automatic, {}), 0);
  EXPECT_EQ(prefill_chunk_beside_decode_for(64, {"cuda:0"}), 64);
  EXPECT_EQ(prefill_chunk_beside_decode_for(0, {"cpu"}), 0);
}

TEST(ClusterConfig, ActivationLink) {
  auto d = parse_cluster_config("workers: [{address: 'h:1'}]\n", "t");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->activation_link, ActivationLinkKind::kAuto);
  for (const auto& [text, kind] :
       std::vector<std::pair<std::string, ActivationLinkKind>>{
           {"auto", ActivationLinkKind::kAuto},
           {"grpc", ActivationLinkKind::kGrpc},
           {"nccl", ActivationLinkKind::kNccl}}) {
    auto c = parse_cluster_config(
        "activation_link: " + text + "\nworkers: [{address: 'h:1'}]\n", "t");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->activation_link, kind) << text;
  }
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
      {"prefill_chunk_beside_decode: -1\nworkers: [{address: 'h:1'}]",
       "t: prefill_chunk_beside_decode: -1 is out of range [0, 4096] (or auto)"},
      {"prefill_chunk_beside_decode: half\nworkers: [{address: 'h:1'}]",
       "t: prefill_chunk_beside_decode: 'half' is not an integer (or auto)"},
      {"prefill_chunk_beside_decode: [1]\nworkers: [{address: 'h:1'}]",
       "t: prefill_chunk_beside_decode: expected an integer (or auto)"},
      {"prefill_chunk: 4090\nmax_sequences: 8\nworkers: [{address: 'h:1'}]",
       "t: prefill_chunk: 4090 rows with max_sequences 8 exceed the 4096 rows"},
      {"context_length: lots\nworkers: [{address: 'h:1'}]",
       "t: context_length: 'lots' is not an integer"},
      {"kv_type: q8\nworkers: [{address: 'h:1'}]",
       "t: kv_type: 'q8' is not f16 or f32"},
      {"placement: clever\nworkers: [{address: 'h:1'}]",
       "t: placement: 'clever' is not auto or explicit"},
      {"activation_link: rdma\nworkers: [{address: 'h:1'}]",
       "t: activation_link: 'rdma' is not auto, grpc or nccl"},
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

TEST(ClusterConfig, ServedModelName) {
  const std::string workers = "workers:\n  - address: 127.0.0.1:6001\n";
  auto d = parse_cluster_config("model: m\n" + workers, "t.yaml");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->served_model_name, "");  // the GGUF's general.name
  auto c = parse_cluster_config("model: m\nserved_model_name: llama-70b\n" + workers, "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->served_model_name, "llama-70b");
  for (const char* bad : {"served_model_name: \"\"\n", "served_model_name: [a]\n"}) {
    auto b = parse_cluster_config("model: m\n" + std::string(bad) + workers, "t.yaml");
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("served_model_name"), std::string::npos) << b.status();
  }
}

TEST(ClusterConfig, CorsAllowOrigin) {
  const std::string workers = "workers:\n  - address: 127.0.0.1:6001\n";
  auto d = parse_cluster_config("model: m\n" + workers, "t.yaml");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->cors_allow_origin, "*");  // llama.cpp's server and vLLM allow any
  for (const char* ok : {"\"off\"", "https://ui.example.com", "http://localhost:3000"}) {
    auto c = parse_cluster_config("model: m\ncors_allow_origin: " + std::string(ok) + "\n" +
                                      workers, "t.yaml");
    ASSERT_TRUE(c.ok()) << ok << ": " << c.status();
  }
  for (const char* bad : {"nope", "https://ui.example.com/path", "\"https://a b\"", "\"://x\"",
                          "https://"}) {
    auto c = parse_cluster_config("model: m\ncors_allow_origin: " + std::string(bad) + "\n" +
                                      workers, "t.yaml");
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find("cors_allow_origin"), std::string::npos) << c.status();
  }
}

// What the name may hold: printable UTF-8, 1 .. 256 bytes.
TEST(ClusterConfig, ServedModelNameIsCheckedWhenSet) {
  ServedModel m;
  m.info.set_name("from-gguf");
  EXPECT_TRUE(set_served_model_name(m, "Llama 3 70B (prod) ü").ok());
  EXPECT_EQ(m.info.name(), "Llama 3 70B (prod) ü");
  for (const std::string& bad :
       {std::string(), std::string(257, 'x'), std::string("a\nb"), std::string("\xff")}) {
    const absl::Status st = set_served_model_name(m, bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("served_model_name"), std::string::npos) << st;
  }
  EXPECT_EQ(m.info.name(), "Llama 3 70B (prod) ü");
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
  EXPECT_FALSE(parse_byte_size("").ok());
  EXPECT_FALSE(parse_byte_size("GiB").ok());
  EXPECT_FALSE(parse_byte_size("1e30 TiB").ok());
}

// Kubernetes quantities (resource.Quantity): what a pod's limits say can
// be pasted into a config.
TEST(ClusterConfig, KubernetesQuantities) {
  EXPECT_EQ(*parse_byte_size("2Gi"), 2ull << 30);
  EXPECT_EQ(*parse_byte_size("512Mi"), 512ull << 20);
  EXPECT_EQ(*parse_byte_size("64Ki"), 64ull << 10);
  EXPECT_EQ(*parse_byte_size("1Ti"), 1ull << 40);
  EXPECT_EQ(*parse_byte_size("1Pi"), 1ull << 50);
  EXPECT_EQ(*parse_byte_size("2Ei"), 2ull << 60);
  EXPECT_EQ(*parse_byte_size("0.5Gi"), 1ull << 29);
  EXPECT_EQ(*parse_byte_size("2G"), 2000000000ull);
  EXPECT_EQ(*parse_byte_size("129M"), 129000000ull);
  EXPECT_EQ(*parse_byte_size("3k"), 3000ull);
  EXPECT_EQ(*parse_byte_size("1T"), 1000000000000ull);
  EXPECT_EQ(*parse_byte_size("1P"), 1000000000000000ull);
  EXPECT_EQ(*parse_byte_size("2E"), 2000000000000000000ull);
  EXPECT_EQ(*parse_byte_size("2e9"), 2000000000ull);
  EXPECT_EQ(*parse_byte_size("1.5E3"), 1500ull);
  EXPECT_EQ(*parse_byte_size("128974848"), 128974848ull);
  EXPECT_EQ(*parse_byte_size("60Gi"), 60ull << 30);
  // A thousandth of a byte is a CPU's unit, not memory's.
  const absl::Status milli = parse_byte_size("500m").status();
  EXPECT_EQ(milli.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(milli.message().find("m is milli"), std::string::npos) << milli;
  EXPECT_FALSE(parse_byte_size("1e30").ok());   // past 2^64
  EXPECT_FALSE(parse_byte_size("16Ei").ok());   // 2^64: overflow
  EXPECT_FALSE(parse_byte_size("2K").ok());     // k8s says k
  EXPECT_FALSE(parse_byte_size("2g").ok());
  EXPECT_FALSE(parse_byte_size("-2Gi").ok());
  EXPECT_FALSE(parse_byte_size("+2Gi").ok());
  EXPECT_FALSE(parse_byte_size("Gi").ok());
  EXPECT_FALSE(parse_byte_size("2e-3").ok());
  EXPECT_FALSE(parse_byte_size("e9").ok());
  // In a config: a worker's memory_budget from a pod's limit.
  auto c = parse_cluster_config(
      "model: m.gguf\ninsecure: true\nworkers:\n"
      "  - {address: 127.0.0.1:1, memory_budget: 28Gi}\n",
      "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->workers[0].memory_budget, 28ull << 30);
}

config::EnvLookup fake_env(std::map<std::string, std::string> vars) {
  return [vars](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ConfigEnv, ExpandsTheShellsTwoForms) {
  const config::EnvLookup env = fake_env({{"A", "x"}, {"EMPTY", ""}, {"N", "3"}});
  auto ex = [&](std::string_view text) {
    absl::StatusOr<std::string> r = config::expand_env(text, env, "k");
    return r.ok() ? *r : std::string("ERROR ") + std::string(r.status().message());
  };
  EXPECT_EQ(ex("plain"), "plain");
  EXPECT_EQ(ex("${A}"), "x");
  EXPECT_EQ(ex("a${A}b${A}c"), "axbxc");
  EXPECT_EQ(ex("${B:-dflt}"), "dflt");
  EXPECT_EQ(ex("${EMPTY:-dflt}"), "dflt");
  EXPECT_EQ(ex("${A:-dflt}"), "x");
  EXPECT_EQ(ex("${B:-}"), "");
  EXPECT_EQ(ex("${B:-a:b/c}"), "a:b/c");
  EXPECT_EQ(ex("$$"), "$");
  EXPECT_EQ(ex("$${A}"), "${A}");
  EXPECT_EQ(ex("cost $5 $x $"), "cost $5 $x $");
  EXPECT_EQ(ex("${EMPTY}"), "");
  EXPECT_EQ(ex("${B}"), "ERROR k: ${B} is not set");
  EXPECT_EQ(ex("${A"), "ERROR k: \"${A\" has an unclosed ${");
  EXPECT_EQ(ex("${}"), "ERROR k: \"${}\" has ${}: expected ${NAME} or ${NAME:-default}");
  EXPECT_EQ(ex("${1A}"), "ERROR k: \"${1A}\" has ${1A}: expected ${NAME} or ${NAME:-default}");
  EXPECT_EQ(ex("${A-x}"), "ERROR k: \"${A-x}\" has ${A-x}: expected ${NAME} or ${NAME:-default}");
  // A value is expanded once: a variable holding ${...} stays as it is.
  EXPECT_EQ(config::expand_env("${V}", fake_env({{"V", "${A}"}}), "k").value(), "${A}");
}

// Only values are expanded, never keys, and a value stays one scalar: a
// variable holding YAML cannot add keys or workers.
TEST(ClusterConfig, ExpandsVariablesInValuesOnly) {
  const config::EnvLookup env = fake_env(
      {{"MODEL", "/models/m.gguf"}, {"KEY", "s3cret"}, {"INJECT", "x\nworkers: []"}});
  auto c = parse_cluster_config(R"(
model: ${MODEL}
api_key: ${KEY}
listen: ${LISTEN:-0.0.0.0:50051}
insecure: true
workers:
  - {address: "127.0.0.1:50061", name: "${INJECT}"}
)",
                                "c.yaml", env);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model, "/models/m.gguf");
  EXPECT_EQ(c->api_key, "s3cret");
  EXPECT_EQ(c->listen, "0.0.0.0:50051");
  ASSERT_EQ(c->workers.size(), 1u);
  EXPECT_EQ(c->workers[0].name, "x\nworkers: []");
  auto keyed = parse_cluster_config("model: m\n${K}: 1\ninsecure: true\nworkers: [{address: 127.0.0.1:1}]\n",
                                    "c.yaml", fake_env({{"K", "listen"}}));
  ASSERT_FALSE(keyed.ok());
  EXPECT_NE(keyed.status().message().find("${K}: unknown key"), std::string::npos)
      << keyed.status();
  auto unset = parse_cluster_config(
      "model: m\ninsecure: true\nworkers:\n  - {address: 127.0.0.1:1}\n  - {address: \"${W1}\"}\n",
      "c.yaml", fake_env({}));
  ASSERT_FALSE(unset.ok());
  EXPECT_EQ(unset.status().message(), "c.yaml: workers[1].address: ${W1} is not set");
}

// yaml-cpp gives an alias its anchor's node, not a copy: a node may be in a
// document many times, or inside itself. The expansion walks each node
// once: a node holding itself is an error of the config, not a stack
// overflow (the cluster_config fuzzer's 33-byte find, below verbatim); a
// value in two places is expanded once ("$$" from a variable stays two);
// a chain of aliases each naming the one before twice (2^40 paths) ends
// at the first unknown key, not after 2^40 steps.
TEST(ClusterConfig, AliasesAreExpandedOnceAndMayHoldThemselves) {
  auto fuzzed = parse_cluster_config("bbase: &w {!!int ss:  *w, !!in2}\n", "c.yaml", fake_env({}));
  ASSERT_FALSE(fuzzed.ok());
  EXPECT_NE(fuzzed.status().message().find("bbase: unknown key"), std::string::npos)
      << fuzzed.status();
  auto self = parse_cluster_config("model: m\ninsecure: true\nworkers: &w [*w]\n", "c.yaml",
                                   fake_env({}));
  ASSERT_FALSE(self.ok());
  EXPECT_NE(self.status().message().find("workers"), std::string::npos) << self.status();

  auto twice = parse_cluster_config(
      "model: &m \"${V}\"\napi_key: *m\ninsecure: true\nworkers: [{address: 127.0.0.1:1}]\n",
      "c.yaml", fake_env({{"V", "p$$q${A}"}}));
  ASSERT_TRUE(twice.ok()) << twice.status();
  EXPECT_EQ(twice->model, "p$$q${A}");
  EXPECT_EQ(twice->api_key, "p$$q${A}");

  std::string chain = "l0: &l0 [\"${A}\", \"${A}\"]\n";
  for (int i = 1; i <= 40; ++i) {
    chain += absl::StrCat("l", i, ": &l", i, " [*l", i - 1, ", *l", i - 1, "]\n");
  }
  auto laughs = parse_cluster_config(chain, "c.yaml", fake_env({{"A", "x"}}));
  ASSERT_FALSE(laughs.ok());
  EXPECT_NE(laughs.status().message().find("l0: unknown key"), std::string::npos)
      << laughs.status();
}

// Values nest at most 64 levels (configs nest 4 or 5): deeper is refused
// by the expansion, with where.
TEST(ClusterConfig, ValuesNestedDeeperThan64LevelsAreRefused) {
  auto nested = [](int levels) {
    return parse_cluster_config(absl::StrCat("model: m\ninsecure: true\nworkers: ",
                                             std::string(levels, '['), std::string(levels, ']'),
                                             "\n"),
                                "c.yaml", fake_env({}));
  };
  auto deep = nested(70);
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("c.yaml: workers[0][0]"), std::string::npos)
      << deep.status();
  EXPECT_NE(deep.status().message().find(": nested deeper than 64 levels"), std::string::npos)
      << deep.status();
  auto shallow = nested(60);
  ASSERT_FALSE(shallow.ok());  // workers of sequences: refused by the parser
  EXPECT_EQ(shallow.status().message().find("nested deeper"), std::string::npos)
      << shallow.status();
}

// workers: {from: lws}: the LeaderWorkerSet's stable DNS names of the
// group's workers (index 0 is the leader, the coordinator itself).
TEST(ClusterConfig, WorkersFromTheLeaderWorkerSet) {
  const char* yaml = R"(
model: m.gguf
tls: {ca: a, cert: b, key: c}
workers: {from: lws, port: 50061, memory_budget: 28Gi}
)";
  auto c = parse_cluster_config(
      yaml, "c.yaml",
      fake_env({{"LWS_LEADER_ADDRESS", "strata-0.strata.llm"}, {"LWS_GROUP_SIZE", "4"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->workers.size(), 3u);
  for (int i = 1; i <= 3; ++i) {
    const WorkerConfig& w = c->workers[i - 1];
    EXPECT_EQ(w.address, absl::StrCat("strata-0-", i, ".strata.llm:50061"));
    EXPECT_EQ(w.name, absl::StrCat("w", i));
    EXPECT_EQ(w.memory_budget, 28ull << 30);
  }
  // The second group of the same LeaderWorkerSet.
  c = parse_cluster_config(
      yaml, "c.yaml",
      fake_env({{"LWS_LEADER_ADDRESS", "big-7.big.default.svc.cluster.local"},
                {"LWS_GROUP_SIZE", "2"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->workers.size(), 1u);
  EXPECT_EQ(c->workers[0].address, "big-7-1.big.default.svc.cluster.local:50061");

  auto error = [&](std::map<std::string, std::string> vars, const char* text = nullptr) {
    auto r = parse_cluster_config(text ? text : yaml, "c.yaml", fake_env(vars));
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_NE(error({{"LWS_GROUP_SIZE", "3"}}).find("LWS_LEADER_ADDRESS is not set"),
            std::string::npos);
  EXPECT_NE(error({{"LWS_LEADER_ADDRESS", "a-0.a.ns"}}).find("LWS_GROUP_SIZE \"\""),
            std::string::npos);
  EXPECT_NE(error({{"LWS_LEADER_ADDRESS", "a-0.a.ns"}, {"LWS_GROUP_SIZE", "1"}})
                .find("is not a group size in [2, 257]"),
            std::string::npos);
  EXPECT_NE(error({{"LWS_LEADER_ADDRESS", "a-0.a.ns"}, {"LWS_GROUP_SIZE", "x"}})
                .find("is not a group size"),
            std::string::npos);
  EXPECT_NE(error({{"LWS_LEADER_ADDRESS", "10.0.0.5"}, {"LWS_GROUP_SIZE", "3"}})
                .find("is not a DNS name"),
            std::string::npos);
  EXPECT_NE(error({{"LWS_LEADER_ADDRESS", "leader"}, {"LWS_GROUP_SIZE", "3"}})
                .find("is not a DNS name"),
            std::string::npos);
  EXPECT_NE(error({}, "model: m\ninsecure: true\nworkers: {from: lws}\n").find("workers.port: missing"),
            std::string::npos);
  EXPECT_NE(error({}, "model: m\ninsecure: true\nworkers: {from: k8s, port: 1}\n")
                .find("workers.from: \"k8s\" is not lws or dns"),
            std::string::npos);
  EXPECT_NE(error({}, "model: m\ninsecure: true\nworkers: {from: lws, port: 1, count: 2}\n")
                .find("workers.count: unknown key"),
            std::string::npos);
}

// workers: {from: dns}: a name pattern with {index} and a count (a
// StatefulSet's pods behind a headless Service, or numbered machines).
TEST(ClusterConfig, WorkersFromADnsPattern) {
  auto c = parse_cluster_config(R"(
model: m.gguf
tls: {ca: a, cert: b, key: c}
workers: {from: dns, address: "strata-worker-{index}.strata-worker.llm.svc:50061", count: "${N}", name: "node{index}"}
)",
                                "c.yaml", fake_env({{"N", "3"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->workers.size(), 3u);
  EXPECT_EQ(c->workers[0].address, "strata-worker-0.strata-worker.llm.svc:50061");
  EXPECT_EQ(c->workers[2].address, "strata-worker-2.strata-worker.llm.svc:50061");
  EXPECT_EQ(c->workers[2].name, "node2");
  c = parse_cluster_config(
      "model: m\ninsecure: true\nworkers: {from: dns, address: \"127.0.0.{index}:5000\", "
      "first: 2, count: 2}\n",
      "c.yaml", fake_env({}));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->workers.size(), 2u);
  EXPECT_EQ(c->workers[0].address, "127.0.0.2:5000");
  EXPECT_EQ(c->workers[1].name, "w3");
  auto error = [](const char* text) {
    auto r = parse_cluster_config(text, "c.yaml", fake_env({}));
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_NE(error("model: m\ninsecure: true\nworkers: {from: dns, address: \"w:1\", count: 2}\n")
                .find("has no {index}"),
            std::string::npos);
  EXPECT_NE(error("model: m\ninsecure: true\nworkers: {from: dns, address: \"w{index}:1\", count: 0}\n")
                .find("workers.count: 0 is out of range [1, 256]"),
            std::string::npos);
  EXPECT_NE(error("model: m\ninsecure: true\nworkers: {from: dns, address: \"w{index}:1\"}\n")
                .find("workers.count: missing"),
            std::string::npos);
  EXPECT_NE(error("model: m\ninsecure: true\nworkers: {from: dns, address: \"w{index}\", count: 1}\n")
                .find("workers[0].address"),
            std::string::npos);
  EXPECT_NE(error("model: m\ninsecure: true\nworkers: {from: dns, address: \"w{index}:1\", count: 2, name: same}\n")
                .find("has no {index}"),
            std::string::npos);
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
