// libFuzzer target: the Jinja interpreter (model/jinja/jinja.h) on a
// hostile chat template, as a GGUF file's tokenizer.chat_template or a
// request's chat_template_kwargs bring it. The whole input is the
// template's source; it is parsed and rendered with one fixed context that
// holds what apply_chat_template passes (messages with tool calls, tools,
// documents, bos_token, eos_token, add_generation_prompt) and values of
// every JSON type (the language tests' context).
//
// Asserted, beyond no crash and no sanitizer report:
//   - a parse error is InvalidArgument "line N: ...";
//   - a render error is InvalidArgument or ResourceExhausted "line N: ..."
//     or FailedPrecondition (raise_exception's message), never another code;
//   - a rendered text is at most Limits::kMaxOutputBytes;
//   - rendering is a function of the template and the context: a second
//     render gives the same bytes (strftime_now's clock is pinned).
// Seeds: corpus/jinja_template/ (the language cases of
// tests/jinja/data/language_cases.json, written by make_fuzz_seeds);
// scripts/fuzz.sh adds the published templates of tests/jinja/data/templates/.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "model/jinja/jinja.h"
#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_util.h"

namespace {

using strata::fuzz::check;
using strata::jinja::Limits;
using strata::jinja::RenderOptions;
using strata::jinja::Template;

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json c = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Weather in Paris? \u00e9\u65e5"},
      {"role": "assistant", "content": null, "reasoning_content": "look it up",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"c\": 21}"},
      {"role": "user", "content": [{"type": "text", "text": "and "}, {"type": "image"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather",
               "description": "Weather for a city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                              "required": ["city"]}}}],
    "documents": [{"title": "t", "text": "body"}],
    "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true,
    "enable_thinking": false,
    "s": "Hello World", "n": 7, "f": 2.5, "l": [3, 1, 2], "d": {"b": 2, "a": 1},
    "u": "h\u00e9llo", "none": null, "t": true, "words": ["b", "A", "c", "a"],
    "big": 10000000000000000, "neg": -3, "e": "",
    "msgs": [{"role": "user", "content": "hi"},
             {"role": "assistant", "content": "yo",
              "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}]
  })");
  return c;
}

bool has_line(const absl::Status& s) { return absl::StartsWith(s.message(), "line "); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto parsed = Template::parse(source);
  if (!parsed.ok()) {
    check(parsed.status().code() == absl::StatusCode::kInvalidArgument,
          "a parse error is InvalidArgument");
    check(has_line(parsed.status()), "a parse error names its line");
    strata::fuzz::note("parse: " + std::string(parsed.status().message()));
    return 0;
  }
  RenderOptions options;
  options.now = 1700000000;  // 2023-11-14
  auto first = parsed->render(context(), options);
  if (!first.ok()) {
    const absl::StatusCode code = first.status().code();
    check(code == absl::StatusCode::kInvalidArgument ||
              code == absl::StatusCode::kResourceExhausted ||
              code == absl::StatusCode::kFailedPrecondition,
          "a render error is InvalidArgument, ResourceExhausted or FailedPrecondition");
    check(code == absl::StatusCode::kFailedPrecondition || has_line(first.status()),
          "a render error names its line");
    strata::fuzz::note("render: " + std::string(first.status().message()));
  } else {
    check(first->size() <= Limits::kMaxOutputBytes, "the output is within the limit");
    strata::fuzz::note("rendered " + std::to_string(first->size()) + " bytes");
  }
  auto second = parsed->render(context(), options);
  check(second.ok() == first.ok(), "a second render succeeds or fails as the first");
  if (first.ok()) check(*first == *second, "a second render gives the same bytes");
  if (!first.ok()) check(second.status() == first.status(), "a second render fails the same way");
  return 0;
}
