// Tool calls in model output: the formats the chat templates teach their
// models, recognised from the template text, and a streaming parser that turns
// generated text into OpenAI `tool_calls`, `content` and `reasoning_content`.
//
// Formats (as the shared templates in ../shared/conformance/chat-templates
// render an assistant turn with tool_calls; the text includes the special
// tokens, so the detokenizer must render control tokens as their text):
//   kLlama3Json  Llama 3.1/3.2/3.3: the whole turn is one JSON object
//                {"name": N, "parameters": {...}} (also "arguments"), possibly
//                after <|python_tag|>, several separated by ';'. The built-in
//                tools' form <|python_tag|>brave_search.call(query="...") is a
//                call of brave_search with {"query": "..."}; any other text
//                after <|python_tag|> is code_interpreter code: a call of
//                "python" with {"code": TEXT}. A leading '{' is taken as a call
//                only when the turn starts with it (after whitespace). Also
//                <function=N>{...}</function> (Functionary v3.1, Llama 3.1's
//                custom-tool form).
//   kHermes      Hermes 2/3, Qwen 2.5, QwQ, Qwen3, Granite 4, Bielik: <tool_call>\n{"name": N,
//                "arguments": {...}}\n</tool_call>, several in a row; the XML
//                body below is accepted inside <tool_call> too.
//   kQwen3Coder  Qwen3-Coder, Qwen3.5: <tool_call>\n<function=N>\n<parameter=P>
//                \nVALUE\n</parameter>\n</function>\n</tool_call> (also bare
//                <function=...>). VALUE is a string unless the tool's schema
//                (Options::tools) says otherwise; without a schema a value that
//                parses as a JSON number, bool, null, object or array is one.
//   kGlm         GLM 4.x, Spark, Laguna: <tool_call>N<arg_key>K</arg_key>
//                <arg_value>V</arg_value>...</tool_call>, values typed as above.
//   kMistral     Mistral Nemo: [TOOL_CALLS][{"name": N, "arguments": {...},
//                "id": I}, ...]; Mistral Small 3.2, Devstral, Ministral:
//                [TOOL_CALLS]N[CALL_ID]I[ARGS]{...} (the [CALL_ID] part
//                optional), repeated. [THINK]...[/THINK] is reasoning. Ids are 9
//                letters and digits, as these templates require on the way back.
//   kHarmony     gpt-oss: messages <|start|>assistant<|channel|>C [to=R]
//                [<|constrain|>json|json]<|message|>BODY<|end|> (or <|call|>,
//                <|return|>), the recipient also before <|channel|>. Channel
//                analysis is reasoning, final (and commentary without a
//                recipient) is content, a recipient functions.N makes BODY the
//                JSON arguments of a call of N (any other recipient R: a call of
//                R). Output starts after the prompt's <|start|>assistant.
//   kDeepSeek    DeepSeek V3/V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N
//                <｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>;
//                R1: <｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}
//                \n```<｜tool▁call▁end｜>.
//   kKimiK2      Kimi K2: <|tool_calls_section_begin|><|tool_call_begin|>
//                functions.N:I<|tool_call_argument_begin|>{...}<|tool_call_end|>
//                ...<|tool_calls_section_end|>; the id is "functions.N:I", as
//                the template writes it back.
//   kMiniMax     MiniMax-M1: <tool_calls>\n{"name": N, "arguments": {...}}\n...
//                </tool_calls>, one JSON object a line.
//   kCommandR    Command R7B: <|START_THINKING|>plan<|END_THINKING|> (reasoning)
//                <|START_ACTION|>[{"tool_call_id": "0", "tool_name": N,
//                "parameters": {...}}, ...]<|END_ACTION|>, or
//                <|START_RESPONSE|>content<|END_RESPONSE|>.
// Not parsed yet (detected as kNone): MiniMax-M3 <invoke>, Kimi K3, Command R+
// (Action: ```json), Granite 3.x <|tool_call|>, Gemma, Phi, firefunction.
// Reasoning: with Options::think_tags, <think>...</think> is reasoning_content
// (Qwen3, QwQ, DeepSeek R1/V3.1); starts_in_reasoning when the prompt itself
// ended with <think>.
//
// Streaming contract: push() returns what can be decided so far. Text that
// may be the start of a marker is held back (never shown as content, never
// lost); a call is delivered whole (id, name, complete arguments) in one delta
// once its end is seen, so a call that turns out malformed can still become
// content. Whitespace just before a call, after the last call at the end, and
// around a reasoning block is dropped; trailing whitespace of content is held
// until more text follows. Any split of the same text into pushes gives the
// same concatenated result. An incomplete UTF-8 sequence at the end of a push
// is held for the next one.
//
// End-of-turn tokens a format's models write (<|im_end|>, <|eot_id|>,
// <|eom_id|>, <|end_of_text|>, </s> for Mistral, DeepSeek's end of sentence)
// are dropped where they appear outside a call (kNone keeps every byte).
//
// Malformed input: a call whose body does not parse (bad JSON, no name, no end
// before finish()) is returned as content with its markers, byte for byte,
// and parsing goes on after it; the parser never throws. JSON nested deeper
// than kMaxJsonDepth is content up to the bracket that goes too deep; a call
// that does not end within kMaxCallBytes (a Mistral name within 1 KiB, a
// harmony header within 1 KiB) is given up there, its first kMaxCallBytes
// bytes content. These limits keep memory bounded and decisions independent
// of how the text was split. Invalid UTF-8 inside names or arguments is
// replaced by U+FFFD in tool_calls().
//
// Content is passed through byte for byte: invalid UTF-8 the model wrote stays
// (dump JSON with error_handler_t::replace). Within one Delta, the order of
// content and calls is not kept; push a token at a time for that.
//
// Threads: one parser belongs to one sequence; it is not thread-safe.
//
// Usage (a server, per request with tools and tool_choice other than "none"):
//   ToolCallParser parser = make_tool_call_parser(template_text, prompt, request_tools);
//   for each detokenized piece:
//     ToolCallParser::Delta d = parser.push(piece);
//     send d.content, d.reasoning_content, tool_call_delta_json(c) for c in d.tool_calls
//   ToolCallParser::Delta last = parser.finish();   // send it too
//   finish_reason(engine_reason, parser);  parser.tool_calls() for the non-streamed answer
#ifndef STRATA_MODEL_CHAT_TEMPLATE_TOOL_CALLS_H_
#define STRATA_MODEL_CHAT_TEMPLATE_TOOL_CALLS_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace strata::chat_template {

enum class ToolCallFormat {
  kNone, kLlama3Json, kHermes, kQwen3Coder, kGlm, kMistral, kHarmony, kDeepSeek, kKimiK2, kMiniMax, kCommandR
};

// "none", "llama3_json", "hermes", "qwen3_coder", "glm", "mistral", "harmony",
// "deepseek", "kimi_k2", "minimax", "command_r".
std::string_view tool_call_format_name(ToolCallFormat format);

// The format a chat template teaches, recognised by the markers it writes for
// an assistant's tool_calls (kNone when it writes none we know).
ToolCallFormat detect_tool_call_format(std::string_view template_text);

// True when the template writes <think>...</think> reasoning blocks.
bool template_uses_think_tags(std::string_view template_text);

// True when a rendered prompt leaves the model inside a reasoning block (it
// ends with "<think>" and optional whitespace), e.g. DeepSeek R1 distills.
bool prompt_opens_reasoning(std::string_view prompt);

inline constexpr int kMaxJsonDepth = 128;
inline constexpr std::size_t kMaxCallBytes = std::size_t{8} << 20;

// One call as it appears in a streamed chunk: OpenAI's choices[].delta.tool_calls[].
struct ToolCallDelta {
  int index = 0;          // position among this output's calls, from 0
  std::string id;         // "call_" + 24 letters/digits (Mistral: 9 letters/digits)
  std::string name;
  std::string arguments;  // the complete arguments, JSON text (an object)
};

namespace tool_calls_internal {
// Where a JSON object or array ends, found a byte at a time across pushes.
struct JsonScan {
  std::size_t base = 0;  // where the value starts in the parser's buffer
  std::size_t pos = 0;   // bytes scanned from base
  int depth = 0;
  bool started = false, in_string = false, escape = false, bad = false;
  char open = 0;  // the value's first byte, '{' or '[', once started
  // True when the value ends at pos (one past its last byte); bad when the
  // text does not open with '{' or '[' or nests deeper than kMaxJsonDepth.
  bool scan(std::string_view text);
};

// Where the JSON strings are in text that mixes markers, names and JSON
// values (DeepSeek's and Kimi K2's call sections, MiniMax's lines): a '"'
// opens a string only inside an object or array, so a name or marker before
// a value has none. Scanned a byte at a time over a growing buffer.
struct StringScan {
  std::size_t pos = 0;  // bytes scanned
  int depth = 0;
  bool in_string = false, escape = false;
  // Scans text[pos, end): whether `end` is inside a string. `end` must not
  // decrease between calls on one text.
  bool in_string_at(std::string_view text, std::size_t end);
};

// The first `marker` in `text` that is not inside a JSON string (StringScan);
// npos when none.
std::size_t find_outside_strings(std::string_view text, std::string_view marker);
}  // namespace tool_calls_internal

class ToolCallParser {
 public:
  struct Options {
    nlohmann::json tools;             // null or the OpenAI tools array (parameter types)
    bool think_tags = false;          // <think>...</think> is reasoning_content
    bool starts_in_reasoning = false; // the output begins inside a reasoning block
    std::uint64_t id_seed = 0;        // 0: random ids; else reproducible ones (tests)
  };

  struct Delta {
    std::string content;
    std::string reasoning_content;
    std::vector<ToolCallDelta> tool_calls;
    bool empty() const { return content.empty() && reasoning_content.empty() && tool_calls.empty(); }
  };

  explicit ToolCallParser(ToolCallFormat format) : ToolCallParser(format, Options{}) {}
  ToolCallParser(ToolCallFormat format, Options options);

  // Generated text as it streams (any split, bytes included).
  Delta push(std::string_view text);
  // End of generation: releases what was held back; an unfinished call is
  // completed if its body parses, else returned as content.
  Delta finish();

  // OpenAI array [{"id", "type": "function", "function": {"name", "arguments"}}]
  // (arguments as a JSON string); an empty array when no call was parsed.
  nlohmann::json tool_calls() const;
  bool has_tool_calls() const { return !calls_.empty(); }

 private:
  enum class Mode { kText, kReasoning, kCall, kHarmonyHeader, kHarmonyBody };
  // What a kCall collects.
  enum class CallKind {
    kTagged, kBareFunction, kJson, kPythonTag, kMistral, kDeepSeek, kHarmony, kKimi, kMiniMax, kCohere
  };
  struct Field {  // content or reasoning_content, with its whitespace handling
    std::string pending_ws;
    bool drop_leading = false;
  };

  bool step(bool final, Delta& out);
  bool step_text(bool final, Delta& out);
  bool step_call(bool final, Delta& out);
  bool step_harmony_header(bool final, Delta& out);
  bool step_harmony_body(bool final, Delta& out);

  void emit(bool reasoning, std::string_view text, Delta& out);
  void flush_pending(Delta& out);
  void begin_call(CallKind kind, std::string opener);
  // Ends the call that occupies buf_[0, consumed): its calls, or its raw text as content.
  void end_call(std::size_t consumed, bool ok, std::vector<ToolCallDelta> calls, Delta& out);
  void add_call(std::string name, std::string arguments, std::string id, std::vector<ToolCallDelta>& calls);
  // Whether the call's text buf_[0, end) opens a JSON object that is not
  // finished and is inside a string at `end`: a closing marker found there
  // belongs to the string. `end` only grows within a call, and each byte is
  // scanned once (body_scan_), so a call with k closing markers inside its
  // strings costs O(n), not O(k n).
  bool in_json_string_at(std::size_t end);
  std::string new_id();

  ToolCallFormat format_;
  Options options_;
  std::vector<std::string_view> text_markers_;       // what ends plain text
  std::vector<std::string_view> reasoning_markers_;  // what ends a reasoning block
  std::string buf_;          // text not yet decided
  Mode mode_ = Mode::kText;
  CallKind call_kind_ = CallKind::kTagged;
  std::string opener_;       // the marker that opened the current call
  std::size_t scan_from_ = 0;  // kCall: where the search for its end resumes
  bool llama_json_ok_ = true;
  bool after_call_ = false;    // no content but whitespace since the last call  // kLlama3Json: only whitespace since the start or the last call
  tool_calls_internal::JsonScan json_;  // kCall kinds kJson and kMistral
  tool_calls_internal::JsonScan body_scan_;  // in_json_string_at's scan of the call's text
  bool body_scan_ended_ = false;             // ... which found the JSON value's end
  tool_calls_internal::StringScan section_scan_;  // kDeepSeek, kKimi, kMiniMax: their strings
  std::string harmony_recipient_;
  std::string harmony_channel_;
  Field content_;
  Field reasoning_;
  std::vector<ToolCallDelta> calls_;
  std::mt19937_64 rng_;
};

// The parser a template and its rendered prompt call for: the template's
// format (detect_tool_call_format), think tags when it writes them, the output
// starting inside a reasoning block when the prompt opened one, and `tools`
// (the OpenAI tools array, or null) for parameter types.
ToolCallParser make_tool_call_parser(std::string_view template_text, std::string_view prompt,
                                     const nlohmann::json& tools);

// One call as OpenAI streams it in choices[].delta.tool_calls[]:
// {"index", "id", "type": "function", "function": {"name", "arguments"}}.
nlohmann::json tool_call_delta_json(const ToolCallDelta& call);

// OpenAI finish_reason: "tool_calls" when the parser found a call and the
// generation stopped by itself (base_reason "stop"); base_reason otherwise.
std::string finish_reason(std::string_view base_reason, const ToolCallParser& parser);

// A GBNF grammar (llama.cpp's syntax, root rule "root") that forces output to
// be one or more calls in `format` (tool_choice "required") or calls of the one
// named function (tool_choice {"type":"function","function":{"name":N}}).
// Arguments are constrained to a JSON object (not to the tool's schema).
// InvalidArgument naming the field for a bad tools array / tool_choice or an
// unknown function; InvalidArgument for kNone.
// parallel false: "required" forces exactly one call too.
absl::StatusOr<std::string> tool_call_gbnf(ToolCallFormat format, const nlohmann::json& tools,
                                           const nlohmann::json& tool_choice,
                                           bool parallel = true);

}  // namespace strata::chat_template

#endif  // STRATA_MODEL_CHAT_TEMPLATE_TOOL_CALLS_H_
