// The OpenAI JSON -> v1::GenerateRequest mapping and the error objects
// (coordinator/http/openai.h), without a server or a model.
#include "coordinator/http/openai.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "coordinator/api_key.h"
#include "coordinator/prompt.h"

namespace strata::coordinator::http {
namespace {

using json = nlohmann::json;

OpenAiRequest chat(const std::string& body) {
  auto r = parse_openai_request(Endpoint::kChat, body);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : OpenAiRequest{};
}

// A request's logit_bias lists as a map.
std::map<int32_t, float> bias_of(const v1::SamplingParams& s) {
  EXPECT_EQ(s.logit_bias_ids_size(), s.logit_bias_values_size());
  std::map<int32_t, float> m;
  for (int i = 0; i < s.logit_bias_ids_size(); ++i) m[s.logit_bias_ids(i)] = s.logit_bias_values(i);
  EXPECT_EQ(m.size(), static_cast<size_t>(s.logit_bias_ids_size()));
  return m;
}

OpenAiRequest complete(const std::string& body) {
  auto r = parse_openai_request(Endpoint::kCompletion, body);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : OpenAiRequest{};
}

// The param an error names, as the OpenAI error object carries it.
std::string param_of(Endpoint endpoint, const std::string& body) {
  auto r = parse_openai_request(endpoint, body);
  EXPECT_FALSE(r.ok()) << body;
  if (r.ok()) return "<ok>";
  const ApiError e = to_api_error(r.status());
  EXPECT_EQ(e.http_status, 400) << r.status();
  return e.param;
}

TEST(OpenAiMapping, ChatMessagesAndSampling) {
  const OpenAiRequest r = chat(R"({
    "model": "m", "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null},
      {"role": "user", "content": "c", "name": "bob"}],
    "max_completion_tokens": 7, "max_tokens": 99, "temperature": 0.5, "top_p": 0.9,
    "top_k": 40, "min_p": 0.05, "presence_penalty": 0.1, "frequency_penalty": 0.2,
    "repetition_penalty": 1.1, "seed": 42, "stop": ["x", "y"], "n": 3,
    "stream": true, "stream_options": {"include_usage": true},
    "logprobs": true, "top_logprobs": 2, "user": "u1", "unknown_field": {"ignored": 1}})");
  const v1::GenerateRequest& g = r.generate;
  EXPECT_EQ(g.model(), "m");
  ASSERT_EQ(g.messages().messages_size(), 4);
  EXPECT_EQ(g.messages().messages(0).role(), "system");
  EXPECT_EQ(g.messages().messages(1).content(), "a\nb");
  EXPECT_EQ(g.messages().messages(2).content(), "");
  EXPECT_EQ(g.max_tokens(), 7);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.9f);
  EXPECT_EQ(g.sampling().top_k(), 40);
  EXPECT_FLOAT_EQ(g.sampling().min_p(), 0.05f);
  EXPECT_FLOAT_EQ(g.sampling().presence_penalty(), 0.1f);
  EXPECT_FLOAT_EQ(g.sampling().frequency_penalty(), 0.2f);
  EXPECT_FLOAT_EQ(g.sampling().repeat_penalty(), 1.1f);
  EXPECT_EQ(g.sampling().seed(), 42u);
  ASSERT_EQ(g.stop_size(), 2);
  EXPECT_EQ(g.stop(1), "y");
  EXPECT_TRUE(g.logprobs());
  EXPECT_EQ(g.top_logprobs(), 2);
  EXPECT_EQ(g.user(), "u1");
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

// Integers past int64 saturate (then fail their range check with a true
// bound); 2^63 and 2^64 - 1 were read as int64 and wrapped to negatives.
TEST(OpenAiMapping, HugeIntegersSaturateInsteadOfWrapping) {
  for (const char* v : {"9223372036854775807", "9223372036854775808", "18446744073709551615",
                        "1e30", "2147483648", "-2147483649"}) {
    // An int32 field beyond int32 is refused showing the value as sent.
    const std::string sent = std::string(v) == "1e30" ? "1e+30" : v;
    for (const char* field : {"max_tokens", "top_k"}) {
      auto r = parse_openai_request(Endpoint::kCompletion, absl::StrCat(R"({"prompt": "x", ")",
                                                                        field, "\": ", v, "}"));
      ASSERT_FALSE(r.ok()) << field << " " << v;
      EXPECT_EQ(r.status().message(), absl::StrCat(field, ": ", sent, " is out of range"));
    }
    auto top = parse_openai_request(
        Endpoint::kChat, absl::StrCat(R"({"messages": [{"role": "user", "content": "x"}],)",
                                      R"( "logprobs": true, "top_logprobs": )", v, "}"));
    ASSERT_FALSE(top.ok()) << v;
    EXPECT_EQ(top.status().message(), absl::StrCat("top_logprobs: ", sent, " is out of range"));
    if (v[0] == '-' || std::string(v) == "2147483648") continue;
    auto n = parse_openai_request(Endpoint::kCompletion,
                                  std::string(R"({"prompt": "x", "n": )") + v + "}");
    ASSERT_FALSE(n.ok()) << v;
    EXPECT_NE(n.status().message().find("n: 9223372036854775807 is out of range [1, 128]"),
              std::string::npos)
        << v << ": " << n.status();
  }
}

// echo: the prompt's text first; with logprobs the prompt is scored with as
// many top tokens (GenerateRequest.prompt_logprobs).
TEST(OpenAiMapping, EchoScoresThePromptWithLogprobs) {
  const OpenAiRequest plain = complete(R"({"prompt": "x", "echo": true})");
  EXPECT_TRUE(plain.echo);
  EXPECT_FALSE(plain.generate.has_prompt_logprobs());
  const OpenAiRequest scored = complete(R"({"prompt": "x", "echo": true, "logprobs": 3})");
  EXPECT_TRUE(scored.echo);
  EXPECT_EQ(scored.generate.prompt_logprobs(), 3);
  const OpenAiRequest off = complete(R"({"prompt": "x", "echo": false, "logprobs": 3})");
  EXPECT_FALSE(off.echo);
  EXPECT_FALSE(off.generate.has_prompt_logprobs());
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": "x", "echo": 1})"), "echo");
}

// OpenAI's logit_bias, {"<token id>": bias}: ids as decimal strings, any
// JSON number as the bias (range and vocabulary: prompt preparation's
// check, below); null or {} is none.
// A completions prompt's special-token text is the special token, as
// llama.cpp's server and vLLM read it; "parse_special": false keeps it text.
TEST(OpenAiMapping, CompletionPromptsReadSpecialTokenText) {
  EXPECT_TRUE(complete(R"({"prompt": "<|im_start|>user"})").generate.parse_special());
  EXPECT_FALSE(complete(R"({"prompt": "<|im_start|>user", "parse_special": false})")
                   .generate.parse_special());
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": "x", "parse_special": 1})"),
            "parse_special");
}

TEST(OpenAiMapping, LogitBiasMapsTokenIdsToBiases) {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  const OpenAiRequest r =
      chat("{" + m + R"(, "logit_bias": {"15043": -100, "7": 2.5, "0": 100, "2147483647": -1e-3}})");
  const std::map<int32_t, float> b = bias_of(r.generate.sampling());
  ASSERT_EQ(b.size(), 4u);
  EXPECT_FLOAT_EQ(b.at(15043), -100.0f);
  EXPECT_FLOAT_EQ(b.at(7), 2.5f);
  EXPECT_FLOAT_EQ(b.at(0), 100.0f);
  EXPECT_FLOAT_EQ(b.at(2147483647), -1e-3f);
  EXPECT_TRUE(bias_of(chat("{" + m + R"(, "logit_bias": {}})").generate.sampling()).empty());
  EXPECT_TRUE(bias_of(chat("{" + m + R"(, "logit_bias": null})").generate.sampling()).empty());
  const OpenAiRequest c = complete(R"({"prompt": "x", "logit_bias": {"3": 1}})");
  EXPECT_FLOAT_EQ(bias_of(c.generate.sampling()).at(3), 1.0f);
  // What prompt preparation says of a bias out of range or a token past the
  // vocabulary reaches the client as param logit_bias.
  EXPECT_EQ(to_api_error(absl::InvalidArgumentError(
                             "sampling.logit_bias: 200 for token id 3 is out of range [-100, 100]"))
                .param,
            "logit_bias");
  EXPECT_EQ(to_api_error(absl::InvalidArgumentError(
                             "sampling.logit_bias: token id 99999 is out of range [0, 49152)"))
                .param,
            "logit_bias");
}

TEST(OpenAiMapping, DefaultsFollowOpenAi) {
  const OpenAiRequest r = chat(R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_FALSE(r.generate.has_max_tokens());  // chat: the rest of the context
  EXPECT_FLOAT_EQ(r.generate.sampling().temperature(), 1.0f);
  EXPECT_FALSE(r.generate.sampling().has_seed());
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
  auto c = parse_openai_request(Endpoint::kCompletion, R"({"prompt": "x", "stop": "s"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->generate.max_tokens(), kCompletionDefaultMaxTokens);
  EXPECT_EQ(c->generate.stop(0), "s");
  EXPECT_EQ(c->generate.prompt(), "x");
}

TEST(OpenAiMapping, CompletionPromptShapesAndLogprobs) {
  auto ids = parse_openai_request(Endpoint::kCompletion, R"({"prompt": [1, 2, 3], "logprobs": 2})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->generate.prompt_ids().ids_size(), 3);
  EXPECT_TRUE(ids->generate.logprobs());
  EXPECT_EQ(ids->generate.top_logprobs(), 2);
  auto nested = parse_openai_request(Endpoint::kCompletion, R"({"prompt": [[5, 6]]})");
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(nested->generate.prompt_ids().ids(1), 6);
  auto one = parse_openai_request(Endpoint::kCompletion, R"({"prompt": ["text"]})");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->generate.prompt(), "text");
}

// OpenAI's batch: several prompts, each a copy of the request with its own
// input; at most kMaxChoices choices (prompts x n) in all.
TEST(OpenAiMapping, SeveralPromptsAreCopiesOfTheRequest) {
  const OpenAiRequest r = complete(
      R"({"prompt": ["one", [7, 8], "three"], "max_tokens": 5, "n": 2, "temperature": 0.5,)"
      R"( "stop": ["x"], "logprobs": 1, "echo": true, "seed": 9})");
  EXPECT_EQ(r.generate.prompt(), "one");
  ASSERT_EQ(r.more_prompts.size(), 2u);
  EXPECT_EQ(r.more_prompts[0].prompt_ids().ids_size(), 2);
  EXPECT_EQ(r.more_prompts[0].prompt_ids().ids(1), 8);
  EXPECT_EQ(r.more_prompts[1].prompt(), "three");
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.echo);
  for (const v1::GenerateRequest& g : r.more_prompts) {
    // Everything but the input is the first prompt's request.
    v1::GenerateRequest same = g;
    same.set_prompt("one");
    EXPECT_EQ(same.SerializeAsString(), r.generate.SerializeAsString());
  }
  // With a suffix each prompt is the text before its insertion.
  const OpenAiRequest fim = complete(R"j({"prompt": ["a(", "b("], "suffix": ")"})j");
  ASSERT_EQ(fim.more_prompts.size(), 1u);
  EXPECT_EQ(fim.more_prompts[0].infill().prefix(), "b(");
  EXPECT_EQ(fim.more_prompts[0].infill().suffix(), ")");
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"j({"prompt": ["a(", [1]], "suffix": ")"})j"),
            "suffix");
  // 64 prompts x n 2 fit; x n 3, or 129 prompts, do not.
  std::string many = "[";
  for (int i = 0; i < 64; ++i) many += i == 0 ? "\"p\"" : ", \"p\"";
  many += "]";
  EXPECT_EQ(complete(R"({"prompt": )" + many + R"(, "n": 2})").more_prompts.size(), 63u);
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": )" + many + R"(, "n": 3})"), "prompt");
  std::string too_many = "[";
  for (int i = 0; i < 129; ++i) too_many += i == 0 ? "[1]" : ", [1]";
  too_many += "]";
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": )" + too_many + "}"), "prompt");
}

TEST(OpenAiMapping, ASuffixMakesACompletionFillInTheMiddle) {
  const OpenAiRequest r = complete(R"({"prompt": "def f(", "suffix": "\n  return x", "max_tokens": 9})");
  ASSERT_EQ(r.generate.input_case(), v1::GenerateRequest::kInfill);
  EXPECT_EQ(r.generate.infill().prefix(), "def f(");
  EXPECT_EQ(r.generate.infill().suffix(), "\n  return x");
  EXPECT_EQ(r.generate.infill().prompt(), "");
  EXPECT_EQ(r.generate.infill().extra_size(), 0);
  EXPECT_FALSE(r.generate.infill().suffix_first());
  EXPECT_EQ(r.generate.max_tokens(), 9);
  // "" (what clients send for none) and null: a plain completion.
  EXPECT_EQ(complete(R"({"prompt": "a", "suffix": ""})").generate.prompt(), "a");
  EXPECT_EQ(complete(R"({"prompt": "a", "suffix": null})").generate.prompt(), "a");
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": [1, 2], "suffix": "b"})"), "suffix");
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": "a", "suffix": "b", "echo": true})"),
            "suffix");
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": "a", "suffix": 5})"), "suffix");
}

// llama.cpp server's /completion: a prompt with /infill's fields and
// llama.cpp's defaults.
TEST(OpenAiMapping, LlamaCompletionTakesAPromptWithLlamaCppsDefaults) {
  auto r = parse_openai_request(Endpoint::kLlamaCompletion,
                                R"({"prompt": "x<|im_start|>", "n_predict": -1, "n_indent": 2})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.prompt(), "x<|im_start|>");
  EXPECT_TRUE(r->generate.parse_special());
  EXPECT_FALSE(r->generate.has_max_tokens());  // -1: the rest of the context
  EXPECT_EQ(r->n_indent, 2);
  EXPECT_FLOAT_EQ(r->generate.sampling().temperature(), 0.8f);
  EXPECT_EQ(r->generate.sampling().top_k(), 40);
  EXPECT_FLOAT_EQ(r->generate.sampling().top_p(), 0.95f);
  EXPECT_FLOAT_EQ(r->generate.sampling().min_p(), 0.05f);
  auto ids = parse_openai_request(Endpoint::kLlamaCompletion, R"({"prompt": [5, 6], "n_predict": 0})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->generate.prompt_ids().ids_size(), 2);
  EXPECT_TRUE(ids->prompt_only);
  EXPECT_EQ(param_of(Endpoint::kLlamaCompletion, R"({"n_predict": 1})"), "prompt");
  EXPECT_EQ(param_of(Endpoint::kLlamaCompletion, R"({"prompt": ["a", "b"]})"), "prompt");
  EXPECT_EQ(param_of(Endpoint::kLlamaCompletion, R"({"prompt": "a", "n": 2})"), "n");
  EXPECT_EQ(param_of(Endpoint::kLlamaCompletion, R"({"prompt": "a", "n_predict": 1e20})"),
            "n_predict");
  // -2 (llama.cpp's "until the context is full") as -1; llama.cpp's
  // top-level json_schema, its property order kept.
  auto fill = parse_openai_request(Endpoint::kLlamaCompletion, R"({"prompt": "a", "n_predict": -2,
      "json_schema": {"type": "object", "properties": {"z": {"type": "string"}, "a": {}}}})");
  ASSERT_TRUE(fill.ok()) << fill.status();
  EXPECT_FALSE(fill->generate.has_max_tokens());
  EXPECT_EQ(fill->generate.json_schema(),
            R"({"type":"object","properties":{"z":{"type":"string"},"a":{}}})");
  // llama.cpp's logit_bias array form, false for "never"; the OpenAI
  // endpoints take the object form only.
  auto bias = parse_openai_request(Endpoint::kLlamaCompletion,
                                   R"({"prompt": "a", "logit_bias": [[15, 2.5], [7, false]]})");
  ASSERT_TRUE(bias.ok()) << bias.status();
  EXPECT_EQ(bias_of(bias->generate.sampling()), (std::map<int32_t, float>{{15, 2.5f}, {7, -100.0f}}));
  for (const char* b : {R"([[15, true]])", R"([[15]])", R"([["15", 1]])", R"([[-1, 1]])",
                        R"([[15, 101]])", R"([5])"}) {
    EXPECT_EQ(param_of(Endpoint::kLlamaCompletion,
                       absl::StrCat(R"({"prompt": "a", "logit_bias": )", b, "}")),
              "logit_bias[0]")
        << b;
  }
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": "a", "logit_bias": [[15, 1]]})"),
            "logit_bias");
  auto not_object = parse_openai_request(Endpoint::kLlamaCompletion,
                                         R"({"prompt": "a", "json_schema": "x"})");
  ASSERT_FALSE(not_object.ok());
  EXPECT_TRUE(absl::StartsWith(not_object.status().message(), "json_schema: "))
      << not_object.status();
}

TEST(OpenAiMapping, InfillTakesLlamaCppServersFieldsAndDefaults) {
  auto r = parse_openai_request(Endpoint::kInfill, R"({
    "input_prefix": "int main() {", "input_suffix": "}\n", "prompt": "  ret",
    "input_extra": [{"filename": "a.h", "text": "int a;"}, {"text": "b"}],
    "n_predict": 12, "max_tokens": 99, "repeat_penalty": 1.2, "repeat_last_n": 32,
    "return_tokens": true, "spm_infill": true, "stream": true, "seed": 5,
    "samplers": ["top_k", "infill"], "t_max_predict_ms": 500, "cache_prompt": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::FillInMiddle& fim = r->generate.infill();
  EXPECT_EQ(fim.prefix(), "int main() {");
  EXPECT_EQ(fim.suffix(), "}\n");
  EXPECT_EQ(fim.prompt(), "  ret");
  ASSERT_EQ(fim.extra_size(), 2);
  EXPECT_EQ(fim.extra(0).filename(), "a.h");
  EXPECT_EQ(fim.extra(0).text(), "int a;");
  EXPECT_FALSE(fim.extra(1).has_filename());  // "tmp" in the layout
  EXPECT_TRUE(fim.suffix_first());
  EXPECT_EQ(r->generate.max_tokens(), 12);  // n_predict wins
  EXPECT_FLOAT_EQ(r->generate.sampling().repeat_penalty(), 1.2f);
  EXPECT_EQ(r->generate.sampling().repeat_last_n(), 32);
  EXPECT_EQ(r->generate.sampling().seed(), 5u);
  EXPECT_TRUE(r->return_tokens);
  EXPECT_TRUE(r->stream);
  // llama.cpp's server's sampling defaults; n_predict -1: no bound.
  auto d = parse_openai_request(Endpoint::kInfill,
                                R"({"input_prefix": "", "input_suffix": "", "n_predict": -1})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->generate.has_max_tokens());
  EXPECT_FLOAT_EQ(d->generate.sampling().temperature(), 0.8f);
  EXPECT_EQ(d->generate.sampling().top_k(), 40);
  EXPECT_FLOAT_EQ(d->generate.sampling().top_p(), 0.95f);
  EXPECT_FLOAT_EQ(d->generate.sampling().min_p(), 0.05f);
  EXPECT_FALSE(d->generate.sampling().has_seed());
  EXPECT_FALSE(d->return_tokens);
  const Endpoint kInfill = Endpoint::kInfill;
  EXPECT_EQ(param_of(kInfill, R"({"input_suffix": ""})"), "input_prefix");
  EXPECT_EQ(param_of(kInfill, R"({"input_prefix": ""})"), "input_suffix");
  EXPECT_EQ(param_of(kInfill, R"({"input_prefix": 1, "input_suffix": ""})"), "input_prefix");
  const std::string ps = R"("input_prefix": "", "input_suffix": "")";
  EXPECT_EQ(param_of(kInfill, "{" + ps + R"(, "prompt": ["a"]})"), "prompt");
  EXPECT_EQ(param_of(kInfill, "{" + ps + R"(, "input_extra": {"text": "a"}})"), "input_extra");
  EXPECT_EQ(param_of(kInfill, "{" + ps + R"(, "input_extra": ["a"]})"), "input_extra[0]");
  EXPECT_EQ(param_of(kInfill, "{" + ps + R"(, "input_extra": [{"filename": "f"}]})"),
            "input_extra[0].text");
  EXPECT_EQ(param_of(kInfill, "{" + ps + R"(, "input_extra": [{"text": "a", "filename": 3}]})"),
            "input_extra[0].filename");
  EXPECT_EQ(param_of(kInfill, "{" + ps + R"(, "n": 2})"), "n");
  EXPECT_EQ(param_of(kInfill, "{" + ps + R"(, "n_indent": -1})"), "n_indent");
  auto window = parse_openai_request(kInfill, "{" + ps + R"(, "repeat_last_n": -1})");
  ASSERT_TRUE(window.ok()) << window.status();
  EXPECT_EQ(window->generate.sampling().repeat_last_n(), 4096);  // llama.cpp's -1: the context
  EXPECT_EQ(param_of(kInfill, "{" + ps + R"(, "response_fields": "content"})"), "response_fields");
  EXPECT_EQ(param_of(kInfill, "{" + ps + R"(, "response_fields": ["a", 1]})"),
            "response_fields[1]");
  // n_predict 0: the prompt only (one token generated, not shown); the
  // code-completion limits and the fields asked for.
  auto warm = parse_openai_request(kInfill, "{" + ps + R"(, "n_predict": 0, "n_indent": 4,
      "t_max_predict_ms": 250, "response_fields": ["content", "timings/prompt_n"]})");
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_TRUE(warm->prompt_only);
  EXPECT_EQ(warm->generate.max_tokens(), 1);
  EXPECT_EQ(warm->n_indent, 4);
  EXPECT_EQ(warm->t_max_predict_ms, 250);
  EXPECT_EQ(warm->response_fields, (std::vector<std::string>{"content", "timings/prompt_n"}));
  EXPECT_EQ(param_of(kInfill, "{" + ps + R"(, "n_predict": "x"})"), "n_predict");
}

TEST(OpenAiMapping, RangesOpenAiAndVllmRefuse) {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  const Endpoint kChat = Endpoint::kChat;
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "temperature": -0.5})"), "temperature");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "presence_penalty": 2.5})"), "presence_penalty");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "frequency_penalty": -2.01})"), "frequency_penalty");
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": "x", "presence_penalty": -3})"),
            "presence_penalty");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "stream_options": {"include_usage": true}})"),
            "stream_options");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "stream": false, "stream_options": {}})"),
            "stream_options");
  // The bounds themselves pass; /infill (llama.cpp) takes any penalty.
  const OpenAiRequest ok = chat("{" + m + R"(, "temperature": 0, "presence_penalty": 2,
      "frequency_penalty": -2, "stream": true, "stream_options": {"include_usage": true},
      "stream_options_typo": 1})");
  EXPECT_FLOAT_EQ(ok.generate.sampling().presence_penalty(), 2.0f);
  EXPECT_FLOAT_EQ(ok.generate.sampling().frequency_penalty(), -2.0f);
  EXPECT_TRUE(ok.include_usage);
  auto infill = parse_openai_request(
      Endpoint::kInfill, R"({"input_prefix": "", "input_suffix": "", "presence_penalty": 5})");
  ASSERT_TRUE(infill.ok()) << infill.status();
  EXPECT_FLOAT_EQ(infill->generate.sampling().presence_penalty(), 5.0f);
  // A temperature below 0 is greedy on llama.cpp's endpoints, as its server
  // reads it.
  for (Endpoint e : {Endpoint::kInfill, Endpoint::kLlamaCompletion}) {
    auto greedy = parse_openai_request(
        e, R"({"input_prefix": "", "input_suffix": "", "prompt": "x", "temperature": -1})");
    ASSERT_TRUE(greedy.ok()) << greedy.status();
    EXPECT_EQ(greedy->generate.sampling().temperature(), 0.0f);
  }
  // Seeds: any integer in [-2^63, 2^64), none clamped onto another.
  EXPECT_EQ(chat("{" + m + R"(, "seed": 18446744073709551615})").generate.sampling().seed(),
            18446744073709551615u);
  EXPECT_EQ(chat("{" + m + R"(, "seed": 9223372036854775808})").generate.sampling().seed(),
            9223372036854775808u);
  EXPECT_EQ(chat("{" + m + R"(, "seed": 7.0})").generate.sampling().seed(), 7u);
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "seed": 18446744073709551616})"), "seed");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "seed": 1e30})"), "seed");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "seed": 1.5})"), "seed");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "seed": "7"})"), "seed");
  // seed -1: random (no seed), as llama.cpp reads it; other values kept.
  EXPECT_FALSE(chat("{" + m + R"(, "seed": -1})").generate.sampling().has_seed());
  EXPECT_EQ(chat("{" + m + R"(, "seed": -2})").generate.sampling().seed(),
            static_cast<uint64_t>(-2));
}

TEST(OpenAiMapping, ToolsAndResponseFormatGoToTheirFields) {
  const OpenAiRequest r = chat(R"({"messages": [{"role": "user", "content": "x"}],
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "chat_template_kwargs": {"enable_thinking": false},
    "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}}})");
  EXPECT_EQ(json::parse(r.generate.tools_json())[0]["function"]["name"], "f");
  EXPECT_EQ(json::parse(r.generate.tool_choice())["function"]["name"], "f");
  EXPECT_EQ(json::parse(r.generate.chat_template_kwargs_json())["enable_thinking"], false);
  EXPECT_EQ(json::parse(r.generate.json_schema())["type"], "object");
  const OpenAiRequest o = chat(R"({"messages": [{"role": "user", "content": "x"}],
    "response_format": {"type": "json_object"}, "tool_choice": "none"})");
  EXPECT_TRUE(o.generate.json_object());
  EXPECT_EQ(o.generate.tool_choice(), "none");
}

// A schema's properties keep the client's order (they are generated in that
// order), though the body's parse sorts keys.
TEST(OpenAiMapping, JsonSchemaKeepsThePropertyOrder) {
  const OpenAiRequest r = chat(R"({"messages": [{"role": "user", "content": "x"}],
    "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema":
      {"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "string"}},
       "required": ["zeta", "alpha"]}}}})");
  const std::string& schema = r.generate.json_schema();
  ASSERT_NE(schema.find("zeta"), std::string::npos) << schema;
  EXPECT_LT(schema.find("zeta"), schema.find("alpha")) << schema;
}

TEST(OpenAiMapping, ToolCallTurnsGoToTheMessageFields) {
  const OpenAiRequest r = chat(R"({"messages": [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny"}]})");
  const auto& m = r.generate.messages().messages();
  ASSERT_EQ(m.size(), 3);
  EXPECT_EQ(m[1].role(), "assistant");
  EXPECT_EQ(m[1].content(), "");
  const json calls = json::parse(m[1].tool_calls_json());
  EXPECT_EQ(calls[0]["function"]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(m[2].tool_call_id(), "call_1");
  // Keys keep the client's order (templates render them with tojson).
  EXPECT_EQ(m[1].tool_calls_json().substr(0, 24), R"([{"id":"call_1","type":")");
  const OpenAiRequest t = chat(R"({"messages": [{"role": "user", "content": "x"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}]})");
  EXPECT_EQ(t.generate.tools_json(),
            R"([{"type":"function","function":{"name":"f","description":"d","parameters":{}}}])");
  EXPECT_EQ(m[2].name(), "get_weather");
  const Endpoint kChat = Endpoint::kChat;
  EXPECT_EQ(param_of(kChat, R"({"messages": [{"role": "assistant", "tool_calls": {}}]})"),
            "messages[0].tool_calls");
  EXPECT_EQ(param_of(kChat, R"({"messages": [{"role": "tool", "content": "x", "tool_call_id": 5}]})"),
            "messages[0].tool_call_id");
  EXPECT_EQ(param_of(kChat, R"({"messages": [{"role": "tool", "content": null}]})"),
            "messages[0].content");
}

TEST(OpenAiMapping, WrongTypesNameTheParam) {
  const Endpoint kChat = Endpoint::kChat;
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "temperature": "hot"})"), "temperature");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "max_tokens": 1.5})"), "max_tokens");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "stream": 1})"), "stream");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "stop": 3})"), "stop");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "stop": ["a", 1]})"), "stop[1]");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "n": 0})"), "n");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "logit_bias": [[1, 5]]})"), "logit_bias");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "logit_bias": {"AI": 5}})"), "logit_bias");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "logit_bias": {"-1": 5}})"), "logit_bias");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "logit_bias": {"+1": 5}})"), "logit_bias");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "logit_bias": {"": 5}})"), "logit_bias");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "logit_bias": {"4294967296": 5}})"), "logit_bias");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "logit_bias": {"1": "5"}})"), "logit_bias[1]");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "logit_bias": {"1": true}})"), "logit_bias[1]");
  // Checked as sent, before the float rounds it to 100.
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "logit_bias": {"1": 100.0000001}})"), "logit_bias");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "logit_bias": {"1": -1e300}})"), "logit_bias");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "top_logprobs": 3})"), "top_logprobs");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "stream_options": {"include_usage": 1}})"),
            "stream_options.include_usage");
  EXPECT_EQ(param_of(kChat, R"({"messages": "hi"})"), "messages");
  EXPECT_EQ(param_of(kChat, R"({"messages": []})"), "messages");
  EXPECT_EQ(param_of(kChat, R"({})"), "messages");
  EXPECT_EQ(param_of(kChat, R"({"messages": [{"content": "x"}]})"), "messages[0].role");
  EXPECT_EQ(param_of(kChat, R"({"messages": [{"role": 5, "content": "x"}]})"), "messages[0].role");
  EXPECT_EQ(param_of(kChat, R"({"messages": [{"role": "user"}]})"), "messages[0].content");
  EXPECT_EQ(param_of(kChat, R"({"messages": [{"role": "user", "content": 5}]})"),
            "messages[0].content");
  EXPECT_EQ(param_of(kChat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
            "messages[0].content[0].type");
  EXPECT_EQ(param_of(kChat, "{" + m + R"(, "response_format": {"type": "xml"}})"),
            "response_format.type");
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": 5})"), "prompt");
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": ["a", 5]})"), "prompt[1]");
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": ["a", []]})"), "prompt[1]");
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": [[1], [2, "x"]]})"), "prompt[1][1]");
  // An id beyond int32, as sent.
  auto huge = parse_openai_request(Endpoint::kCompletion, R"({"prompt": [[1], [2, 1099511627776]]})");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().message(), "prompt[1][1]: 1099511627776 is not a token id");
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": [1, "x"]})"), "prompt[1]");
  EXPECT_EQ(param_of(Endpoint::kCompletion, R"({"prompt": "x", "logprobs": 50})"), "logprobs");
}

TEST(OpenAiMapping, MalformedJsonIsRefused) {
  for (const char* body : {"", "{", "[1]", "nul", "{\"messages\": [}", "\"text\""}) {
    auto r = parse_openai_request(Endpoint::kChat, body);
    ASSERT_FALSE(r.ok()) << body;
    const ApiError e = to_api_error(r.status());
    EXPECT_EQ(e.http_status, 400);
    EXPECT_EQ(e.param, "") << e.message;
  }
  // Invalid UTF-8 inside a string.
  auto bad = parse_openai_request(Endpoint::kChat,
                                  "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}");
  EXPECT_FALSE(bad.ok());
  // Nesting that would cost recursion.
  std::string deep(100000, '[');
  EXPECT_FALSE(parse_openai_request(Endpoint::kChat, deep).ok());
}

// Bodies mutated byte by byte (a deterministic seed): every one either
// maps or is refused with a 400 and a valid error object; none crashes.
TEST(OpenAiMapping, MutatedBodiesAreMappedOrRefused) {
  const std::string seeds[] = {
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],)"
      R"("max_tokens":5,"stop":["x"],"n":2,"logprobs":true,"top_logprobs":1,)"
      R"("response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object"}}}})",
      R"({"prompt":[[1,2,3]],"logprobs":3,"stream":true,"stream_options":{"include_usage":true},)"
      R"("seed":18446744073709551615,"temperature":1e308,"top_k":-5})",
  };
  std::mt19937 rng(28);
  for (int i = 0; i < 20000; ++i) {
    std::string body = seeds[i % 2];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      const size_t at = rng() % body.size();
      switch (rng() % 3) {
        case 0: body[at] = static_cast<char>(rng()); break;
        case 1: body.erase(at, 1 + rng() % 8); break;
        default: body.insert(at, 1, "{}[]\",:0\\\xff"[rng() % 11]); break;
      }
      if (body.empty()) body = "{";
    }
    const Endpoint e = i % 2 == 0 ? Endpoint::kChat : Endpoint::kCompletion;
    auto r = parse_openai_request(e, body);
    if (!r.ok()) {
      const ApiError err = to_api_error(r.status());
      ASSERT_EQ(err.http_status, 400) << body << "\n" << r.status();
      ASSERT_TRUE(json::accept(error_json(err)));
    }
  }
}

TEST(OpenAiErrors, StatusMapsToHttpAndParam) {
  struct Case {
    absl::Status status;
    int http;
    const char* param;
    const char* code;
  };
  const Case cases[] = {
      {absl::InvalidArgumentError("sampling.temperature: 200 is out of range [0, 100]"), 400,
       "temperature", ""},
      {absl::InvalidArgumentError("sampling.repeat_penalty: 0 is out of range (0, 100]"), 400,
       "repetition_penalty", ""},
      {absl::InvalidArgumentError("messages.messages[2].role: 0 bytes; expected 1 .. 64"), 400,
       "messages[2].role", ""},
      {absl::InvalidArgumentError("tools_json: not supported yet"), 400, "tools", ""},
      {absl::OutOfRangeError("prompt: 9000 tokens exceed the context of 8192"), 400, "prompt",
       "context_length_exceeded"},
      {absl::NotFoundError("model: 'x' is not served here"), 404, "model", "model_not_found"},
      {absl::UnauthenticatedError("incorrect API key"), 401, "", "invalid_api_key"},
      {absl::ResourceExhaustedError("too many requests: 8 running and 256 waiting"), 429, "", ""},
      {absl::UnavailableError("worker w1 (127.0.0.1:1): unreachable"), 503, "", ""},
      {absl::InternalError("boom"), 500, "", ""},
  };
  for (const Case& c : cases) {
    const ApiError e = to_api_error(c.status);
    EXPECT_EQ(e.http_status, c.http) << c.status;
    EXPECT_EQ(e.param, c.param) << c.status;
    EXPECT_EQ(e.code, c.code) << c.status;
    const json j = json::parse(error_json(e));
    ASSERT_TRUE(j.contains("error"));
    for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(k)) << k;
    if (c.param[0] == '\0') {
      EXPECT_TRUE(j["error"]["param"].is_null());
    }
  }
  // The message says the OpenAI name too.
  EXPECT_EQ(to_api_error(absl::InvalidArgumentError("sampling.top_p: 2 is out of range (0, 1]"))
                .message,
            "top_p: 2 is out of range (0, 1]");
  EXPECT_EQ(to_api_error(absl::ResourceExhaustedError("x")).retry_after_s, 1);
  EXPECT_EQ(to_api_error(absl::UnavailableError("x")).retry_after_s, 1);
}

TEST(OpenAiErrors, JsonIsValidUtf8WhateverTheMessage) {
  const std::string text = dump_json(json{{"s", std::string("a\xff\xc3")}});
  EXPECT_TRUE(json::accept(text));
}

// Prompt preparation refuses the fields nothing honours yet, and the
// structured-output fields it cannot compile, naming them (OpenAI's names
// once through to_api_error), rather than ignore them.
TEST(PromptPreparation, RefusesWhatItCannotHonour) {
  auto base = [] {
    v1::GenerateRequest r;
    r.set_prompt("hi");
    return r;
  };
  struct Case {
    void (*set)(v1::GenerateRequest&);
    const char* param;
  };
  const Case cases[] = {
      {[](v1::GenerateRequest& r) { r.set_tools_json("[{}]"); }, "tools"},
      {[](v1::GenerateRequest& r) { r.set_tool_choice("required"); }, "tool_choice"},
      {[](v1::GenerateRequest& r) { r.set_chat_template_kwargs_json("{\"a\":1}"); },
       "chat_template_kwargs"},
      {[](v1::GenerateRequest& r) { r.set_grammar("root ::= (\"a\""); }, "grammar"},
      {[](v1::GenerateRequest& r) { r.set_json_schema(R"({"type":"string","pattern":"a+"})"); },
       "response_format"},
      {[](v1::GenerateRequest& r) {
         r.set_json_object(true);
         r.set_grammar("root ::= \"a\"");
       },
       ""},  // two fields: no one param
      {[](v1::GenerateRequest& r) { r.set_user(std::string(300, 'u')); }, "user"},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest r = base();
    c.set(r);
    const absl::Status st = check_generate_request(r, 1000);
    ASSERT_TRUE(absl::IsInvalidArgument(st)) << c.param << ": " << st;
    EXPECT_EQ(to_api_error(st).param, c.param) << st;
  }
  v1::GenerateRequest fine = base();
  fine.set_tool_choice("auto");
  fine.set_user("someone");
  EXPECT_TRUE(check_generate_request(fine, 1000).ok()) << check_generate_request(fine, 1000);
  fine.set_json_schema(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  EXPECT_TRUE(check_generate_request(fine, 1000).ok()) << check_generate_request(fine, 1000);
}

TEST(ApiKey, BearerComparedWhole) {
  EXPECT_TRUE(check_bearer("", "").ok());
  EXPECT_TRUE(check_bearer("", "Bearer anything").ok());
  EXPECT_TRUE(check_bearer("k3y", "Bearer k3y").ok());
  EXPECT_TRUE(absl::IsUnauthenticated(check_bearer("k3y", "")));
  EXPECT_TRUE(absl::IsUnauthenticated(check_bearer("k3y", "Bearer k3")));
  EXPECT_TRUE(absl::IsUnauthenticated(check_bearer("k3y", "Bearer k3yy")));
  EXPECT_TRUE(absl::IsUnauthenticated(check_bearer("k3y", "Basic k3y")));
  EXPECT_TRUE(absl::IsUnauthenticated(check_bearer("k3y", "Bearer K3Y")));
}

TEST(ApiKey, TheSchemeInAnyCaseAndSpacesBeforeTheKey) {  // RFC 9110 11.1
  for (const char* header : {"bearer k3y", "BEARER k3y", "bEaReR   k3y"}) {
    EXPECT_TRUE(check_bearer("k3y", header).ok()) << header;
  }
  for (const char* header : {"Bearerk3y", "Bearer", "Bearer ", "Bearer\tk3y", "Bearers k3y",
                             "Bear k3y", "Bearer k3y ", " Bearer k3y"}) {
    EXPECT_TRUE(absl::IsUnauthenticated(check_bearer("k3y", header))) << header;
  }
}

}  // namespace
}  // namespace strata::coordinator::http
