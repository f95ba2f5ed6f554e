// Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/NAME/):
// realistic valid inputs and a few edge cases of each surface, in the
// target's input format (a leading selector byte where the target has one).
// Usage: make_fuzz_seeds CORPUS_DIR   (rewrites the files it names; the
// regressions saved from findings, named regress-*, are left alone).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "strata/v1/inference.pb.h"
#include "strata/v1/worker.pb.h"

namespace {

using namespace strata;  // NOLINT: a small tool
namespace fs = std::filesystem;

fs::path g_root;
int g_failures = 0;

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_root / target;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary);
  out << bytes;
  if (!out) {
    std::fprintf(stderr, "%s/%s: cannot write\n", dir.c_str(), name.c_str());
    ++g_failures;
  }
}

std::string with_byte(uint8_t b, const google::protobuf::MessageLite& m) {
  return std::string(1, static_cast<char>(b)) + m.SerializeAsString();
}

std::string floats(size_t n, float v) {
  std::vector<float> f(n, v);
  return std::string(reinterpret_cast<const char*>(f.data()), n * sizeof(float));
}

// --- worker_activations: flags byte + length-prefixed MicroBatches -------

std::string frames_of(uint8_t flags, const std::vector<v1::MicroBatch>& batches) {
  std::string out(1, static_cast<char>(flags));
  for (const v1::MicroBatch& b : batches) {
    const std::string bytes = b.SerializeAsString();
    out += static_cast<char>(bytes.size() & 0xff);
    out += static_cast<char>(bytes.size() >> 8);
    out += bytes;
  }
  return out;
}
std::string frames(uint8_t flags, const v1::MicroBatch& batch) { return frames_of(flags, {batch}); }

constexpr uint64_t kActShard = 0x5eed;  // worker_activations_fuzz.cc's
const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};

v1::SequenceSlice slice(uint64_t seq, int start, const std::vector<int32_t>& tokens,
                        bool sample = true) {
  v1::SequenceSlice s;
  s.set_seq_id(seq);
  s.set_start_pos(start);
  for (int32_t t : tokens) s.add_tokens(t);
  s.set_sample(sample);
  return s;
}

v1::MicroBatch batch(std::vector<v1::SequenceSlice> slices, size_t hidden_rows = 0,
                     float value = 0.01f) {
  v1::MicroBatch b;
  b.set_shard_id(kActShard);
  b.set_batch_id(3);
  for (auto& s : slices) *b.add_slices() = s;
  if (hidden_rows > 0) b.set_hidden(floats(hidden_rows * 64, value));
  return b;
}

void activations() {
  const std::string t = "worker_activations";
  put(t, "first-prompt", frames(0, batch({slice(1, 0, kPrompt)})));
  put(t, "last-prompt", frames(1, batch({slice(1, 0, kPrompt)}, 5)));
  {
    v1::SequenceSlice a = slice(1, 0, kPrompt);
    a.mutable_sampling()->set_temperature(0.8f);
    a.mutable_sampling()->set_top_k(40);
    a.mutable_sampling()->set_top_p(0.9f);
    a.mutable_sampling()->set_min_p(0.05f);
    a.mutable_sampling()->set_repeat_penalty(1.1f);
    a.mutable_sampling()->set_presence_penalty(0.5f);
    a.mutable_sampling()->set_frequency_penalty(0.5f);
    a.mutable_sampling()->set_repeat_last_n(16);
    a.mutable_sampling()->set_seed(42);
    a.set_logprobs(true);
    a.set_top_logprobs(5);
    v1::SequenceSlice b = slice(2, 0, {1, 300}, false);
    put(t, "first-two-slices-sampling", frames(0, batch({a, b})));
    put(t, "last-two-slices-sampling", frames(5, batch({a, b}, 7)));
  }
  {
    v1::SequenceSlice g = slice(1, 0, kPrompt);
    g.set_grammar("root ::= [a-z]+ \" \" (\"x\" | \"y\")*");
    put(t, "first-grammar", frames(0, batch({g})));
    put(t, "last-grammar", frames(5, batch({g})));
    v1::SequenceSlice bad = slice(1, 0, kPrompt);
    bad.set_grammar("root ::= (");
    put(t, "last-grammar-bad", frames(5, batch({bad})));
  }
  {
    v1::SequenceSlice restore = slice(2, 4, {378, 300});
    restore.add_restore_blocks(0);
    restore.add_restore_keys(0x1234);
    put(t, "last-prefix-restore-empty", frames(5, batch({restore})));
  }
  {
    // A sequence over several micro-batches: the prompt, then two decode
    // steps (as the coordinator sends them), on both paths.
    std::vector<v1::MicroBatch> steps = {batch({slice(1, 0, kPrompt)}),
                                         batch({slice(1, 5, {42})}),
                                         batch({slice(1, 6, {43}), slice(2, 0, {1, 400})})};
    put(t, "multi-decode", frames_of(0, steps));
    steps[0].set_hidden(floats(5 * 64, 0.02f));
    steps[1].set_hidden(floats(64, -0.5f));
    steps[2].set_hidden(floats(3 * 64, 0.25f));
    put(t, "multi-decode-last", frames_of(1, steps));
    // A prompt saved into two blocks of 4, then another sequence that
    // restores them and goes on from position 8.
    v1::SequenceSlice save = slice(1, 0, {1, 403, 407, 261, 378, 300, 301, 302, 303});
    for (int b = 0; b < 2; ++b) {
      save.add_save_blocks(static_cast<uint32_t>(b));
      save.add_save_keys(0x1000 + static_cast<uint64_t>(b));
      save.add_save_block_index(b);
    }
    v1::SequenceSlice restore = slice(2, 8, {303, 304});
    restore.add_restore_blocks(0);
    restore.add_restore_keys(0x1000);
    restore.add_restore_blocks(1);
    restore.add_restore_keys(0x1001);
    put(t, "multi-prefix", frames_of(0, {batch({save}), batch({restore})}));
    // Restarting a live sequence at 0, and a step at the wrong position.
    put(t, "multi-restart", frames_of(0, {batch({slice(1, 0, kPrompt)}),
                                          batch({slice(1, 0, {1, 2})}),
                                          batch({slice(1, 9, {3})})}));
  }
  {
    v1::SequenceSlice resume = slice(1, 0, kPrompt);
    resume.set_generated_from(3);
    put(t, "first-generated-from", frames(0, batch({resume})));
  }
  {
    v1::MicroBatch traced = batch({slice(1, 0, kPrompt)});
    traced.set_trace(true);
    put(t, "first-trace", frames(0, traced));
  }
  // Edge cases: each must be refused and change nothing.
  put(t, "wrong-shard", frames(2, [] {
        v1::MicroBatch b = batch({slice(1, 0, kPrompt)});
        b.set_shard_id(1);
        return b;
      }()));
  put(t, "duplicate-seq", frames(0, batch({slice(1, 0, {1}), slice(1, 0, {2})})));
  put(t, "token-out-of-range", frames(0, batch({slice(1, 0, {1, 512, -1})})));
  put(t, "unknown-seq-start", frames(0, batch({slice(9, 3, {1})})));
  put(t, "past-context", frames(0, batch({slice(1, 63, {1, 2})})));
  put(t, "too-many-rows", frames(0, batch({slice(1, 0, std::vector<int32_t>(33, 1))})));
  put(t, "too-many-slices",
      frames(0, batch({slice(1, 0, {1}), slice(2, 0, {1}), slice(3, 0, {1}),
                          slice(4, 0, {1}), slice(5, 0, {1})})));
  put(t, "empty-slice", frames(0, batch({slice(1, 0, {})})));
  put(t, "no-slices", frames(0, batch({})));
  put(t, "hidden-on-first", frames(0, batch({slice(1, 0, kPrompt)}, 5)));
  put(t, "hidden-short", frames(1, batch({slice(1, 0, kPrompt)}, 4)));
  put(t, "hidden-nan", frames(1, batch({slice(1, 0, kPrompt)}, 5, std::nanf(""))));
  put(t, "hidden-inf",
      frames(1, batch({slice(1, 0, kPrompt)}, 5, std::numeric_limits<float>::infinity())));
  put(t, "hidden-huge", frames(1, batch({slice(1, 0, kPrompt)}, 5, 3e38f)));
  {
    v1::SequenceSlice s = slice(1, 0, kPrompt);
    s.mutable_sampling()->set_temperature(-1);
    s.mutable_sampling()->set_top_p(2);
    s.set_top_logprobs(21);
    put(t, "bad-sampling", frames(0, batch({s})));
  }
  {
    v1::SequenceSlice s = slice(1, 0, kPrompt);
    s.add_restore_blocks(7);
    s.add_restore_keys(1);
    s.add_save_blocks(99);
    put(t, "bad-prefix-fields", frames(0, batch({s})));
  }
}

// --- worker_control: op byte + request ----------------------------------

v1::LoadShardRequest load(int first, int last, const std::string& path = "stories.gguf") {
  v1::LoadShardRequest r;
  r.set_shard_id(11);
  r.set_model_path(path);
  r.set_first_block(first);
  r.set_last_block(last);
  r.set_embedding(first == 0);
  r.set_head(last == 5);
  r.set_n_ctx(128);
  r.set_max_sequences(2);
  r.set_max_batch_rows(16);
  if (last != 5) r.set_next_stage("127.0.0.1:50062");
  return r;
}

void control() {
  const std::string t = "worker_control";
  put(t, "load-whole", with_byte(0, load(0, 5)));
  put(t, "load-first", with_byte(0, [] {
        v1::LoadShardRequest r = load(0, 2);
        r.set_next_stage_name("w1");
        return r;
      }()));
  put(t, "load-last-f32-prefix", with_byte(0, [] {
        v1::LoadShardRequest r = load(2, 5);
        r.set_kv_type("f32");
        r.set_prefix_cache_blocks(8);
        r.set_prefix_block_tokens(16);
        r.set_trace(true);
        return r;
      }()));
  put(t, "load-raw-path", with_byte(8, load(0, 5, "stories.gguf")));
  put(t, "load-outside", with_byte(8, load(0, 5, "../../etc/passwd")));
  put(t, "load-absolute", with_byte(8, load(0, 5, "/etc/hostname")));
  put(t, "load-dir", with_byte(8, load(0, 5, ".")));
  put(t, "load-short", with_byte(8, load(0, 5, "short.gguf")));
  put(t, "load-empty", with_byte(8, load(0, 5, "empty.gguf")));
  put(t, "load-sub", with_byte(8, load(0, 5, "sub")));
  put(t, "load-over-budget", with_byte(0, [] {
        v1::LoadShardRequest r = load(0, 5);
        r.set_n_ctx(2048);
        r.set_max_sequences(1024);
        return r;
      }()));
  put(t, "load-past-blocks", with_byte(0, [] {
        v1::LoadShardRequest r = load(0, 9);
        r.set_head(true);
        r.clear_next_stage();
        return r;
      }()));
  put(t, "load-bad-next", with_byte(16, [] {
        v1::LoadShardRequest r = load(0, 2);
        r.set_next_stage("evil.example/x:99999");
        return r;
      }()));
  put(t, "load-zero-shard", with_byte(0, [] {
        v1::LoadShardRequest r = load(0, 5);
        r.set_shard_id(0);
        return r;
      }()));
  {
    v1::FreeSequenceRequest f;
    f.set_shard_id(7);
    for (uint64_t i = 1; i <= 4; ++i) f.add_seq_ids(i);
    put(t, "free", with_byte(1, f));
    f.set_shard_id(8);
    put(t, "free-wrong-shard", with_byte(9, f));
    for (uint64_t i = 0; i < 1100; ++i) f.add_seq_ids(i);
    f.set_shard_id(7);
    put(t, "free-too-many", with_byte(1, f));
  }
  {
    v1::ResultsRequest r;
    r.set_shard_id(8);
    put(t, "results-wrong-shard", with_byte(2, r));
  }
  put(t, "describe", with_byte(3, v1::DescribeRequest()));
  put(t, "health", with_byte(4, v1::WorkerHealthRequest()));
}

// --- generate_request: op byte + request --------------------------------

v1::ChatMessage message(const std::string& role, const std::string& content) {
  v1::ChatMessage m;
  m.set_role(role);
  m.set_content(content);
  return m;
}

const char* kTools = R"([{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"location":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["location"]}}}])";

void generate() {
  const std::string t = "generate_request";
  {
    v1::GenerateRequest r;
    r.set_prompt("Once upon a time");
    r.set_max_tokens(16);
    r.mutable_sampling()->set_temperature(0.7f);
    r.mutable_sampling()->set_top_p(0.9f);
    r.mutable_sampling()->set_seed(7);
    r.add_stop("\n\n");
    r.set_logprobs(true);
    r.set_top_logprobs(3);
    put(t, "prompt", with_byte(0, r));
    r.set_parse_special(true);
    r.set_add_special(false);
    r.set_prompt("<|im_start|>user\nhi<|im_end|>");
    put(t, "prompt-special", with_byte(0, r));
  }
  {
    v1::GenerateRequest r;
    for (int32_t id : {1, 2, 3, 400, 49151}) r.mutable_prompt_ids()->add_ids(id);
    r.set_ignore_eos(true);
    put(t, "prompt-ids", with_byte(0, r));
    r.mutable_prompt_ids()->add_ids(-5);
    put(t, "prompt-ids-bad", with_byte(0, r));
  }
  {
    v1::GenerateRequest r;
    v1::FillInMiddle* fim = r.mutable_infill();
    fim->set_prefix("def total(xs):\n    s = 0\n");
    fim->set_suffix("\n    return s\n");
    fim->set_prompt("    for");
    v1::FimFile* file = fim->add_extra();
    file->set_filename("util.py");
    file->set_text("def add(a, b):\n    return a + b\n");
    fim->add_extra()->set_text("MAX = 10\n");
    fim->set_suffix_first(true);
    r.set_max_tokens(8);
    put(t, "infill", with_byte(0, r));
  }
  {
    v1::GenerateRequest r;
    *r.mutable_messages()->add_messages() = message("system", "You are terse.");
    *r.mutable_messages()->add_messages() = message("user", "What is 2+2?");
    put(t, "messages", with_byte(0, r));
    r.set_tools_json(kTools);
    r.set_tool_choice("auto");
    put(t, "messages-tools", with_byte(0, r));
    r.set_tool_choice("required");
    r.set_parallel_tool_calls(false);
    put(t, "messages-tools-required", with_byte(0, r));
    r.set_tool_choice(R"({"type":"function","function":{"name":"get_weather"}})");
    put(t, "messages-tools-named", with_byte(0, r));
    v1::ChatMessage call = message("assistant", "");
    call.set_tool_calls_json(
        R"([{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris\"}"}}])");
    *r.mutable_messages()->add_messages() = call;
    v1::ChatMessage result = message("tool", "{\"temp\": 21}");
    result.set_tool_call_id("call_1");
    result.set_name("get_weather");
    *r.mutable_messages()->add_messages() = result;
    r.set_tool_choice("none");
    put(t, "messages-tool-result", with_byte(0, r));
  }
  {
    v1::GenerateRequest r;
    *r.mutable_messages()->add_messages() = message("user", "Give me JSON.");
    r.set_json_schema(
        R"({"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0},"tags":{"type":"array","items":{"type":"string"},"maxItems":3}},"required":["name"]})");
    put(t, "json-schema", with_byte(0, r));
    r.clear_json_schema();
    r.set_json_object(true);
    r.set_chat_template_kwargs_json(R"({"enable_thinking": false})");
    put(t, "json-object", with_byte(0, r));
  }
  {
    v1::GenerateRequest r;
    r.set_prompt("List:");
    r.set_grammar("root ::= item+\nitem ::= \"- \" [a-z]+ \"\\n\"");
    put(t, "grammar", with_byte(0, r));
    r.set_grammar("root ::= (((");
    put(t, "grammar-bad", with_byte(0, r));
    r.set_grammar("root ::= \"a\"");
    r.set_json_object(true);
    put(t, "grammar-and-json", with_byte(0, r));
  }
  {
    v1::GenerateRequest r;
    r.set_model("not-this-model");
    r.set_prompt("x");
    r.set_max_tokens(0);
    r.mutable_sampling()->set_temperature(1000);
    put(t, "bad-fields", with_byte(0, r));
    v1::GenerateRequest u;
    u.set_prompt(std::string("\xff\xfe bad utf-8 \xc3", 15));
    put(t, "bad-utf8", with_byte(0, u));
  }
  {
    v1::TokenizeRequest r;
    r.set_text("Hello, world! <|im_start|> \xe4\xbd\xa0\xe5\xa5\xbd");
    r.set_parse_special(true);
    put(t, "tokenize", with_byte(1, r));
    r.set_add_special(false);
    r.set_text(std::string("\x00\xff\xc0\x80", 4));
    put(t, "tokenize-bytes", with_byte(1, r));
  }
  {
    v1::DetokenizeRequest r;
    for (int32_t id : {1, 9906, 11, 1834, 0, 2}) r.add_ids(id);
    r.set_render_special(true);
    put(t, "detokenize", with_byte(2, r));
    r.add_ids(1 << 30);
    put(t, "detokenize-bad", with_byte(2, r));
  }
  put(t, "bearer-ok", std::string("\x03") + "Bearer sk-fuzz-0123456789");
  put(t, "bearer-wrong", std::string("\x03") + "Bearer sk-fuzz-0123456780");
  put(t, "bearer-scheme", std::string("\x03") + "Basic dXNlcjpwYXNz");
}

// --- openai_request: endpoint byte + JSON body ---------------------------

void openai() {
  const std::string t = "openai_request";
  const std::string chat(1, '\0'), completion(1, '\1'), object(1, '\2');
  put(t, "chat", chat + R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":8,"temperature":0.5,"top_p":0.9,"seed":3,"stop":["\n"],"stream":true,"stream_options":{"include_usage":true}})");
  put(t, "chat-parts", chat + R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"logprobs":true,"top_logprobs":2,"n":2,"user":"u1"})");
  put(t, "chat-tools", chat + R"({"messages":[{"role":"user","content":"Weather in Paris?"}],"tools":)" + std::string(kTools) + R"(,"tool_choice":"required","parallel_tool_calls":false})");
  put(t, "chat-tool-history", chat + R"({"messages":[{"role":"user","content":"w?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Oslo\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"-3C"}],"tools":)" + std::string(kTools) + "}");
  put(t, "chat-json-schema", chat + R"({"messages":[{"role":"user","content":"json"}],"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"boolean"}},"required":["a"]}}}})");
  put(t, "chat-json-object", chat + R"({"messages":[{"role":"user","content":"json"}],"response_format":{"type":"json_object"},"chat_template_kwargs":{"enable_thinking":false}})");
  put(t, "chat-grammar", chat + R"({"messages":[{"role":"user","content":"yes?"}],"grammar":"root ::= \"yes\" | \"no\"","max_completion_tokens":4,"top_k":5,"min_p":0.1,"presence_penalty":0.2,"frequency_penalty":0.1,"repetition_penalty":1.1,"ignore_eos":true})");
  put(t, "chat-refused", chat + R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})");
  put(t, "chat-logit-bias", chat + R"({"messages":[{"role":"user","content":"yes?"}],"temperature":0,"logit_bias":{"1":2,"15043":-100,"99999999":5,"7":-100.5}})");
  put(t, "chat-deep", chat + std::string(100, '[') + std::string(100, ']'));
  put(t, "completion", completion + R"({"model":"m","prompt":"Once upon a time","max_tokens":16,"logprobs":2,"echo":false})");
  put(t, "completion-echo", completion + R"({"prompt":"<|im_start|>user\nhi<|im_end|>","max_tokens":1,"logprobs":5,"echo":true,"parse_special":true})");
  put(t, "completion-ids", completion + R"({"prompt":[1,403,407],"max_tokens":1})");
  put(t, "completion-suffix", completion + R"({"prompt":"def f(x):\n    ","suffix":"\n    return y\n","max_tokens":4,"temperature":0})");
  put(t, "infill", std::string(1, '\3') + R"({"input_prefix":"int main() {\n","input_suffix":"}\n","prompt":"  ret","input_extra":[{"filename":"a.h","text":"int a;"},{"text":"b"}],"n_predict":8,"spm_infill":true,"return_tokens":true,"repeat_penalty":1.1,"seed":-1})");
  put(t, "embeddings", object + R"({"model":"m","input":["The quick brown fox","<|im_start|>hi"],"encoding_format":"float","pooling":"mean","normalize":false})");
  put(t, "embeddings-ids", object + R"({"input":[[1,403,407],[9]],"encoding_format":"base64","dimensions":576,"cache_salt":"t1"})");
  put(t, "completion-batch", completion + R"({"prompt":[[1,2],[3]],"n":1,"best_of":1})");
  put(t, "completion-list", completion + R"({"prompt":["a","b"],"stop":"x","temperature":1e308,"seed":-1})");
  put(t, "completion-bad-utf8", completion + "{\"prompt\":\"\xff\xfe\"}");
  put(t, "object", object + R"({"text":"hello","add_special":true})");
  put(t, "object-not", object + "[1,2,3]");
  put(t, "object-garbage", object + "{\"a\":");
}

// --- http_request: raw bytes ----------------------------------------------

void http() {
  const std::string t = "http_request";
  auto post = [](const std::string& path, const std::string& body, const std::string& extra = "") {
    return "POST " + path + " HTTP/1.1\r\nHost: localhost:8080\r\nAuthorization: Bearer sk-fuzz\r\n"
           "Content-Type: application/json\r\n" + extra + "Content-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  put(t, "chat", post("/v1/chat/completions",
                      R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":4})"));
  put(t, "completion", post("/v1/completions?x=1", R"({"prompt":"Once","max_tokens":2})"));
  {
    const std::string body = R"({"input_prefix":"a","input_suffix":"b","n_predict":2})";
    put(t, "infill-lower-case-bearer",
        "POST /infill HTTP/1.1\r\nHost: localhost:8080\r\nAuthorization: bearer   sk-fuzz\r\n"
        "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  }
  put(t, "tokenize", post("/tokenize", R"({"text":"hello"})", "Expect: 100-continue\r\n"));
  put(t, "detokenize", post("/detokenize", R"({"tokens":[1,2,3]})"));
  put(t, "chunked", "POST /v1/completions HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "a\r\n{\"prompt\":\r\n6\r\n\"x\"}  \r\n0\r\n\r\n");
  put(t, "get-models", "GET /v1/models/Smollm2%20135M HTTP/1.1\r\nHost: h\r\n\r\n");
  put(t, "get-health-10", "GET /health HTTP/1.0\r\n\r\n");
  put(t, "bad-auth", post("/v1/chat/completions", "{}", "Authorization: Basic eA==\r\n"));
  put(t, "bad-length", "POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n{}");
  put(t, "no-length-eof", "POST /tokenize HTTP/1.1\r\nHost: h\r\n\r\n{\"text\":\"a\"}");
  put(t, "garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03");
}

// --- configs ----------------------------------------------------------------

void configs() {
  put("cluster_config", "quickstart.yaml",
      "model: ~/.cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf\n"
      "listen: 127.0.0.1:50051\n"
      "http_listen: 127.0.0.1:8080\n"
      "workers:\n"
      "  - address: 127.0.0.1:50061\n"
      "    name: w0\n"
      "  - address: 127.0.0.1:50062\n"
      "    name: w1\n"
      "    memory_budget: 2GiB\n");
  put("cluster_config", "explicit.yaml",
      "model: /models/m.gguf\n"
      "placement: explicit\n"
      "context_length: 4096\n"
      "max_sequences: 16\n"
      "prefill_chunk: 256\n"
      "kv_type: f32\n"
      "health_check_interval_ms: 500\n"
      "health_check_timeout_ms: 750\n"
      "health_check_failures: 3\n"
      "prefix_cache_blocks: 0\n"
      "api_key: secret\n"
      "chat_template: /models/t.jinja\n"
      "trace: /tmp/trace.jsonl\n"
      "workers:\n"
      "  - {address: \"[::1]:7001\", blocks: [0, 15]}\n"
      "  - {address: \"10.0.0.2:7001\", name: b, blocks: [15, 30]}\n");
  put("cluster_config", "http-off.yaml",
      "model: m.gguf\nhttp_listen: \"off\"\nworkers: [{address: h:1}]\n");
  put("cluster_config", "bad-dup.yaml",
      "model: m\nworkers:\n  - address: a:1\n  - address: a:1\n");
  put("cluster_config", "bad-types.yaml",
      "model: [1, 2]\nmax_sequences: 1e99\nworkers: {a: 1}\nunknown_key: 1\n");
  put("cluster_config", "anchors.yaml",
      "base: &w {address: h:1}\nmodel: m\nworkers: [*w, {<<: *w, address: h:2}]\n");
  put("worker_config", "worker.yaml",
      "listen: 127.0.0.1:50061\n"
      "backend: cpu\n"
      "threads: 2\n"
      "memory_budget: 4GiB\n"
      "model_dirs: [~/.cache/strata/models, /models]\n"
      "name: w0\n"
      "max_message_bytes: 64MiB\n"
      "answer_timeout_ms: 30000\n");
  put("worker_config", "fake.yaml",
      "listen: \"[::]:0\"\nbackend: fake\nmemory_budget: 512MB\nmodel_dirs: [/m]\n");
  put("worker_config", "sizes.yaml",
      "memory_budget: 18446744073709551615\nmax_message_bytes: 2TB\nmodel_dirs: []\n");
  put("worker_config", "bad-types.yaml",
      "threads: [1]\nlisten: {a: b}\nmodel_dirs: x\nbogus: 1\n");
}


// --- jinja_template: the language cases of the Jinja tests ------------------

void templates() {
  const fs::path cases = g_root / ".." / ".." / "jinja" / "data" / "language_cases.json";
  std::ifstream in(cases);
  const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!json.is_array()) {
    std::fprintf(stderr, "%s: not a JSON array of cases\n", cases.c_str());
    ++g_failures;
    return;
  }
  for (size_t i = 0; i < json.size(); ++i) {
    const auto& c = json[i];
    if (!c.is_object() || !c.contains("template") || !c["template"].is_string()) continue;
    char name[32];
    std::snprintf(name, sizeof name, "case-%03zu.jinja", i);
    put("jinja_template", name, c["template"].get<std::string>());
  }
  // The shapes of chat templates: a loop over messages, tool calls, macros.
  put("jinja_template", "chat.jinja",
      "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}<<SYS>>{{ m.content }}"
      "{% elif m.tool_calls is defined %}{% for c in m.tool_calls %}{{ c.function.name }}"
      "({{ c.function.arguments | tojson }}){% endfor %}{% else %}[{{ m.role | upper }}] "
      "{{ m.content if m.content is string else m.content | map(attribute='type') | join(',') }}"
      "{% endif %}{% if not loop.last %}\n{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}[ASSISTANT]{% endif %}");
  put("jinja_template", "macro-namespace.jinja",
      "{% macro f(x, y=2) %}{{ x * y }}{% endmacro %}{% set ns = namespace(n=0) %}"
      "{% for t in tools %}{% set ns.n = ns.n + 1 %}{{ f(ns.n) }}{{ t | tojson(indent=2) }}"
      "{% endfor %}{{ raise_exception('done') if ns.n > 5 }}{{ strftime_now('%Y') }}");
}

// --- grammar: GBNF, NUL, the text to generate --------------------------------

void grammars() {
  const std::string nul(1, '\0');
  put("grammar", "json.gbnf",
      "root ::= value\n"
      "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
      "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
      "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
      "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
      "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,3})? ws\n"
      "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n" +
          nul + "{\"a\": [1, -0.5e+3, true, null], \"b\": \"x\\u00e9\xc3\xa9\"}");
  put("grammar", "arith.gbnf",
      "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\nterm ::= factor ((\"*\" | \"/\") factor)*\n"
      "factor ::= [0-9]+ | \"(\" expr \")\"\n" + nul + "(1+23)*4-5/(6)");
  put("grammar", "unicode.gbnf",
      "root ::= \"\\u00e9\" [\\U0001F600-\\U0001F64F]+ [^a-z] . \"\xe6\x97\xa5\"?\n" + nul +
          "\xc3\xa9\xf0\x9f\x98\x80\xf0\x9f\x98\x81Z\xe6\x97\xa5\xe6\x97\xa5");
  put("grammar", "repeat.gbnf",
      "root ::= (\"ab\" | \"a\" \"b\"?){2,5} x{0,3} [0-9]{3}\nx ::= \"12\" | \"1\"\n" + nul + "abab1212123");
  put("grammar", "nullable-tail.gbnf",
      "root ::= list\nlist ::= item list | \nitem ::= \"abc\" ws\nws ::= \" \"*\n" + nul + "abc  abcabc ");
  put("grammar", "ambiguous.gbnf",
      "root ::= a*\na ::= \"a\" | \"a\" \"a\" | b\nb ::= \"a\"?\n" + nul + "aaaaaaaa");
  put("grammar", "comments-classes.gbnf",
      "# a comment\nroot ::= [\\x00-\\x7F]* \"\\\\\" [\\[\\]\\-\\^] # tail\n" + nul + "ab\\^");
  put("grammar", "bad-left-recursion.gbnf", "root ::= root \"x\" | \"y\"\n");
  put("grammar", "bad-undefined.gbnf", "root ::= missing\n");
  put("grammar", "bad-range.gbnf", "root ::= [z-a] \"\\uD800\" x{5,2}\n");
}

// --- json_schema: the schema, NUL, a candidate JSON text ---------------------

void schemas() {
  const std::string nul(1, '\0');
  put("json_schema", "object.json",
      R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string","maxLength":4},)"
      R"("c":{"type":"boolean"}},"required":["a","c"]})" + nul + R"({"a": "x\u00e9", "c": false, "b": -12})");
  put("json_schema", "array.json",
      R"({"type":"array","items":{"type":"number"},"minItems":1,"maxItems":3})" + nul + "[1.5, -2e10]");
  put("json_schema", "refs.json",
      R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},)"
      R"("next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},)"
      R"("$ref":"#/$defs/node"})" + nul + R"({"v":1,"next":{"v":2,"next":null}})");
  put("json_schema", "enum-const.json",
      R"({"anyOf":[{"enum":["a",1,null,[true]]},{"const":{"k":"v"}}]})" + nul + R"({"k":"v"})");
  put("json_schema", "types.json",
      R"({"type":["string","null","integer"],"nullable":true,"minLength":2})" + nul + "\"ab\"");
  put("json_schema", "additional.json",
      R"({"type":"object","properties":{"id":{"type":"integer"}},"additionalProperties":)"
      R"({"type":"array","items":{"type":"string"}}})" + nul + R"({"id": 3, "tags": ["x", "y"]})");
  put("json_schema", "any-object.json", R"({"type":"object"})" + nul + "{\n  \"x\": [1, {}]\n}");
  put("json_schema", "oneof-allof.json",
      R"({"oneOf":[{"type":"string","enum":["x","y"]},{"allOf":[{"type":"integer"}]}],)"
      R"("title":"t","description":"d","default":1})" + nul + "7");
  put("json_schema", "bad-pattern.json", R"({"type":"string","pattern":"^a+$"})");
  put("json_schema", "bad-ref.json", R"({"$ref":"https://example.com/s.json"})");
  put("json_schema", "bad-required.json",
      R"({"type":"object","properties":{"a":{}},"required":["b"]})");
  put("json_schema", "not-json.json", R"({"type":)");
}

// --- tokenizer: a vocabulary byte, then text ----------------------------------

void texts() {
  const std::vector<std::string> samples = {
      "Hello world",
      " leading space, trailing space ",
      "  two\n\nlines\t\ttabs\r\n",
      "I've we'll they're DON'T 's",
      "3.14159 1234567890 100,000 $5.00",
      "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
      "def f(x):\n    return x ** 2  # comment\n",
      "<|im_start|>user\nhi<|im_end|><s></s>[INST]",
      "\xE2\x96\x81\xE2\x96\x81 sentencepiece's space \xE2\x96\x81",
      "\xF0\x9F\x98",            // a cut character
      "a\xFF\xFE\xC0\xAFz",     // bytes that are never UTF-8
      std::string("nul\0byte", 8),
  };
  for (size_t i = 0; i < samples.size(); ++i) {
    // Vocabulary bytes 0..11 cover each of tokenizer_fuzz's list once.
    put("tokenizer", "text-" + std::to_string(i), std::string(1, static_cast<char>(i)) + samples[i]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  activations();
  control();
  generate();
  openai();
  http();
  configs();
  templates();
  grammars();
  schemas();
  texts();
  return g_failures == 0 ? 0 : 1;
}
