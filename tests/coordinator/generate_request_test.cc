// GenerateRequest checks: every bound of inference.proto refused with
// INVALID_ARGUMENT naming the field.
#include <cmath>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "coordinator/inference_service.h"
#include "coordinator/json_nesting.h"
#include "coordinator/prompt.h"
#include "gtest/gtest.h"

namespace strata::coordinator {
namespace {

constexpr int kVocab = 1000;

void add_bias(v1::GenerateRequest& r, int32_t id, float bias) {
  r.mutable_sampling()->add_logit_bias_ids(id);
  r.mutable_sampling()->add_logit_bias_values(bias);
}

v1::GenerateRequest valid() {
  v1::GenerateRequest r;
  r.set_prompt("Hello");
  return r;
}

TEST(GenerateRequest, ValidRequestsPass) {
  EXPECT_TRUE(check_generate_request(valid(), kVocab).ok());
  v1::GenerateRequest ids;
  ids.mutable_prompt_ids()->add_ids(0);
  ids.mutable_prompt_ids()->add_ids(kVocab - 1);
  ids.set_max_tokens(1 << 20);
  ids.mutable_sampling()->set_temperature(100);
  ids.mutable_sampling()->set_top_k(kVocab);
  ids.mutable_sampling()->set_top_p(1);
  ids.set_top_logprobs(20);
  ids.mutable_sampling()->set_min_p(0.25f);
  ids.mutable_sampling()->set_presence_penalty(-100);
  ids.mutable_sampling()->set_seed(7);
  worker::SamplingParams s;
  ASSERT_TRUE(check_generate_request(ids, kVocab, &s).ok());
  // Given fields as given, absent ones at inference.proto's defaults.
  EXPECT_EQ(s.temperature, 100.0f);
  EXPECT_EQ(s.top_k, kVocab);
  EXPECT_EQ(s.top_p, 1.0f);
  EXPECT_EQ(s.min_p, 0.25f);
  EXPECT_EQ(s.presence_penalty, -100.0f);
  EXPECT_EQ(s.repeat_penalty, 1.0f);
  EXPECT_EQ(s.penalty_last_n, 64);
  EXPECT_EQ(s.seed, 7u);
  v1::GenerateRequest chat;
  auto* m = chat.mutable_messages()->add_messages();
  m->set_role("user");
  m->set_content("hi");
  EXPECT_TRUE(check_generate_request(chat, kVocab).ok());
}

TEST(GenerateRequest, EveryBoundNamesItsField) {
  struct Case {
    void (*edit)(v1::GenerateRequest&);
    const char* field;
  };
  const Case cases[] = {
      {[](v1::GenerateRequest& r) { r.clear_prompt(); }, "input:"},
      {[](v1::GenerateRequest& r) { r.set_prompt(""); }, "prompt: empty"},
      {[](v1::GenerateRequest& r) { r.set_prompt(std::string((4 << 20) + 1, 'a')); },
       "prompt: 4194305 bytes exceed"},
      {[](v1::GenerateRequest& r) { r.mutable_prompt_ids(); }, "prompt_ids.ids: empty"},
      {[](v1::GenerateRequest& r) {
         r.mutable_prompt_ids()->add_ids(3);
         r.mutable_prompt_ids()->add_ids(kVocab);
       },
       "prompt_ids.ids[1]: 1000 is not a token id"},
      {[](v1::GenerateRequest& r) { r.mutable_prompt_ids()->add_ids(-1); },
       "prompt_ids.ids[0]"},
      {[](v1::GenerateRequest& r) { r.mutable_messages(); }, "messages.messages: 0 messages"},
      {[](v1::GenerateRequest& r) {
         r.mutable_messages()->add_messages()->set_role(std::string(65, 'r'));
       },
       "messages.messages[0].role"},
      {[](v1::GenerateRequest& r) {
         auto* m = r.mutable_messages()->add_messages();
         m->set_role("tool");
         m->set_tool_call_id(std::string(257, 'i'));
       },
       "messages.messages[0].tool_call_id: 257 bytes exceed 256"},
      {[](v1::GenerateRequest& r) { r.set_max_tokens(0); }, "max_tokens: 0 is less than 1"},
      {[](v1::GenerateRequest& r) { r.set_max_tokens(10000000); },
       "max_tokens: 10000000 exceeds 1048576"},
      {[](v1::GenerateRequest& r) { r.mutable_sampling()->set_temperature(101); },
       "sampling.temperature"},
      {[](v1::GenerateRequest& r) { r.mutable_sampling()->set_top_k(-1); },
       "sampling.top_k"},
      {[](v1::GenerateRequest& r) { r.mutable_sampling()->set_top_k(kVocab + 1); },
       "sampling.top_k"},
      // An integer field's value is printed as an integer, not as 1e+08.
      {[](v1::GenerateRequest& r) { r.mutable_sampling()->set_top_k(100000000); },
       "sampling.top_k: 100000000 is out of range"},
      {[](v1::GenerateRequest& r) { r.mutable_sampling()->set_top_p(0); },
       "sampling.top_p"},
      {[](v1::GenerateRequest& r) { r.mutable_sampling()->set_min_p(1.5f); },
       "sampling.min_p"},
      {[](v1::GenerateRequest& r) { r.mutable_sampling()->set_repeat_penalty(0); },
       "sampling.repeat_penalty"},
      {[](v1::GenerateRequest& r) { r.mutable_sampling()->set_presence_penalty(-101); },
       "sampling.presence_penalty"},
      {[](v1::GenerateRequest& r) { r.mutable_sampling()->set_frequency_penalty(101); },
       "sampling.frequency_penalty"},
      {[](v1::GenerateRequest& r) { r.mutable_sampling()->set_repeat_last_n(4097); },
       "sampling.repeat_last_n"},
      {[](v1::GenerateRequest& r) { add_bias(r, kVocab, 1); }, "sampling.logit_bias: token id"},
      {[](v1::GenerateRequest& r) { add_bias(r, -1, 1); },
       "sampling.logit_bias: token id -1 is out of range"},
      {[](v1::GenerateRequest& r) { add_bias(r, 3, 100.5f); },
       "sampling.logit_bias: 100.5 for token id 3 is out of range [-100, 100]"},
      // Shown with the digits that tell it from 100.
      {[](v1::GenerateRequest& r) { add_bias(r, 5, 100.0001f); },
       "sampling.logit_bias: 100.000099 for token id 5 is out of range"},
      {[](v1::GenerateRequest& r) { r.mutable_sampling()->set_top_p(1.0000001f); },
       "sampling.top_p: 1.00000012 is out of range (0, 1]"},
      {[](v1::GenerateRequest& r) { add_bias(r, 3, std::nanf("")); },
       "sampling.logit_bias: nan for token id 3"},
      {[](v1::GenerateRequest& r) {
         add_bias(r, 3, 1);
         add_bias(r, 9, 1);
         add_bias(r, 3, -1);
       },
       "sampling.logit_bias: token id 3 appears twice"},
      {[](v1::GenerateRequest& r) { r.mutable_sampling()->add_logit_bias_ids(3); },
       "sampling.logit_bias_values: 0 values for 1 logit_bias_ids"},
      {[](v1::GenerateRequest& r) {
         for (int i = 0; i < 17; ++i) r.add_stop("x");
       },
       "stop: 17 strings"},
      {[](v1::GenerateRequest& r) { r.add_stop(std::string(257, 's')); },
       "stop[0]: 257 bytes"},
      {[](v1::GenerateRequest& r) { r.set_top_logprobs(21); }, "top_logprobs"},
      {[](v1::GenerateRequest& r) { r.set_prompt_logprobs(21); },
       "prompt_logprobs: 21 is out of range [0, 20]"},
      {[](v1::GenerateRequest& r) { r.set_prompt_logprobs(-1); }, "prompt_logprobs"},
      {[](v1::GenerateRequest& r) { r.set_cache_salt(std::string(257, 's')); },
       "cache_salt: 257 bytes exceed 256"},
      {[](v1::GenerateRequest& r) {
         r.mutable_infill()->set_prefix(std::string((4 << 20) + 1, 'a'));
       },
       "infill.prefix: 4194305 bytes exceed"},
      {[](v1::GenerateRequest& r) {
         r.mutable_infill()->set_suffix(std::string((4 << 20) + 1, 'a'));
       },
       "infill.suffix: 4194305 bytes exceed"},
      {[](v1::GenerateRequest& r) {
         r.mutable_infill()->set_prompt(std::string((4 << 20) + 1, 'a'));
       },
       "infill.prompt: 4194305 bytes exceed"},
      {[](v1::GenerateRequest& r) {
         for (int i = 0; i < 257; ++i) r.mutable_infill()->add_extra()->set_text("x");
       },
       "infill.extra: 257 files; at most 256"},
      {[](v1::GenerateRequest& r) {
         r.mutable_infill()->add_extra();
         r.mutable_infill()->add_extra()->set_filename(std::string(257, 'f'));
       },
       "infill.extra[1].filename: 257 bytes exceed 256"},
      {[](v1::GenerateRequest& r) {
         r.mutable_infill()->add_extra()->set_text(std::string((4 << 20) + 1, 'a'));
       },
       "infill.extra[0].text: 4194305 bytes exceed"},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest r = valid();
    c.edit(r);
    absl::Status st = check_generate_request(r, kVocab);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(std::string(st.message()).find(c.field), std::string::npos)
        << "want " << c.field << ", got " << st.message();
  }
}

// The JSON a request carries as text nests at most 64 levels, as an HTTP
// body does: deeper text is refused naming the field before anything
// parses it (a copy or dump() of a 100000-level value recursed until the
// stack overflowed). 64 levels pass this check.
TEST(GenerateRequest, JsonFieldsNestAtMost64Levels) {
  auto nested = [](int levels, std::string_view inner) {
    std::string text;
    for (int i = 0; i < levels; ++i) text += i % 2 ? "[" : "{\"k\":";
    text += inner;
    for (int i = levels - 1; i >= 0; --i) text += i % 2 ? "]" : "}";
    return text;
  };
  auto chat = [] {
    v1::GenerateRequest r;
    auto* m = r.mutable_messages()->add_messages();
    m->set_role("user");
    m->set_content("hi");
    return r;
  };
  struct Case {
    const char* field;
    void (*set)(v1::GenerateRequest&, const std::string&);
  };
  const Case cases[] = {
      {"json_schema", [](v1::GenerateRequest& r, const std::string& j) { r.set_json_schema(j); }},
      {"tools_json", [](v1::GenerateRequest& r, const std::string& j) { r.set_tools_json(j); }},
      {"tool_choice", [](v1::GenerateRequest& r, const std::string& j) { r.set_tool_choice(j); }},
      {"chat_template_kwargs_json",
       [](v1::GenerateRequest& r, const std::string& j) { r.set_chat_template_kwargs_json(j); }},
      {"messages.messages[0].tool_calls_json",
       [](v1::GenerateRequest& r, const std::string& j) {
         r.mutable_messages()->mutable_messages(0)->set_tool_calls_json(j);
       }},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest deep = chat();
    // Brackets inside strings do not count; those outside do.
    c.set(deep, nested(65, "\"[[[[\""));
    absl::Status st = check_generate_request(deep, kVocab);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(st.message(), absl::StrCat(c.field, ": JSON nested deeper than 64 levels"));
    v1::GenerateRequest ok = chat();
    c.set(ok, nested(64, "\"[[[[\""));
    st = check_generate_request(ok, kVocab);
    EXPECT_EQ(std::string(st.message()).find("nested deeper"), std::string::npos)
        << c.field << ": " << st;
  }
  EXPECT_EQ(json_nesting_depth(nested(100000, "1")), kMaxJsonDepth + 1);  // stops counting
  EXPECT_EQ(json_nesting_depth("\"{[\\\"{\" 1"), 0);
  EXPECT_EQ(json_nesting_depth("[1, {\"a\": [2]}, []]"), 3);
}

TEST(GenerateRequest, TotalTextIsBoundedByTheContext) {
  EXPECT_EQ(request_text_limit(2048), size_t{1} << 20);       // 128 KiB: at least 1 MiB
  EXPECT_EQ(request_text_limit(32768), size_t{2} << 20);      // 32768 x 64
  EXPECT_EQ(request_text_limit(1 << 20), size_t{8} << 20);    // at most 8 MiB
  EXPECT_EQ(request_text_limit(int64_t{1} << 40), size_t{8} << 20);  // no overflow
  // Each field is within its own bound (4 MiB), the sum is not.
  v1::GenerateRequest r;
  for (int i = 0; i < 3; ++i) {
    auto* m = r.mutable_messages()->add_messages();
    m->set_role("user");
    m->set_content(std::string(i == 1 ? 500000 : 300000, 'a'));
  }
  r.set_tools_json(std::string(1000, ' '));
  absl::Status st = check_request_size(r, 2048);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "request: 1101012 bytes of text exceed 1048576, the bound for a context of 2048 "
            "tokens (largest field: messages.messages[1].content, 500000 bytes)");
  // The same with a larger context passes.
  EXPECT_TRUE(check_request_size(r, 32768).ok());
  // Every text field counts.
  v1::GenerateRequest g;
  g.set_prompt("x");
  g.set_json_schema(std::string(1 << 20, ' '));
  st = check_request_size(g, 2048);
  EXPECT_NE(st.message().find("(largest field: json_schema, 1048576 bytes)"), std::string::npos)
      << st;
  g.clear_json_schema();
  g.set_grammar(std::string(1 << 20, ' '));
  EXPECT_NE(check_request_size(g, 2048).message().find("largest field: grammar"),
            std::string::npos);
  g.clear_grammar();
  g.set_chat_template_kwargs_json(std::string(1 << 20, ' '));
  EXPECT_NE(check_request_size(g, 2048).message().find("chat_template_kwargs_json"),
            std::string::npos);
  // A fill-in-the-middle request's files count with the rest.
  v1::GenerateRequest fim;
  for (int i = 0; i < 5; ++i) fim.mutable_infill()->add_extra()->set_text(std::string(300000, 'a'));
  fim.mutable_infill()->set_prefix("x");
  st = check_request_size(fim, 2048);
  EXPECT_NE(st.message().find("request: 1500001 bytes of text exceed 1048576"), std::string::npos)
      << st;
  EXPECT_NE(st.message().find("(largest field: infill.extra[0].text, 300000 bytes)"),
            std::string::npos)
      << st;
  EXPECT_TRUE(check_generate_request(fim, kVocab).ok());  // each file within its bound
}

// A port another server holds is refused, not shared with it (gRPC's
// default SO_REUSEPORT let two servers take one port, requests alternating).
TEST(GrpcServer, APortInUseIsRefusedNotShared) {
  v1::Inference::Service first_service, second_service;  // no methods needed
  int port = 0;
  auto first = start_grpc_server(first_service, "127.0.0.1:0", &port);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_GT(port, 0);
  const std::string taken = "127.0.0.1:" + std::to_string(port);
  auto second = start_grpc_server(second_service, taken, nullptr);
  EXPECT_FALSE(second.ok()) << "two servers listen on " << taken;
  if (second.ok()) (*second)->Shutdown();
  else EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  (*first)->Shutdown();
}

}  // namespace
}  // namespace strata::coordinator
