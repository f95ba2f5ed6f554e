// Internal to the tool-call parser (tool_calls.h): the markers of each
// format and the parsers of one complete call body, apart from the streaming
// state machine that finds where bodies begin and end. Nothing here throws;
// a body that does not parse gives false.
#ifndef STRATA_MODEL_CHAT_TEMPLATE_TOOL_CALL_SYNTAX_H_
#define STRATA_MODEL_CHAT_TEMPLATE_TOOL_CALL_SYNTAX_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::chat_template::tool_calls_internal {

using ojson = nlohmann::ordered_json;  // keeps the model's key order in arguments
inline constexpr std::size_t npos = std::string_view::npos;

// Markers (the special tokens' text, as the templates write them).
inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";
inline constexpr std::string_view kFunctionOpen = "<function=";
inline constexpr std::string_view kFunctionClose = "</function>";
inline constexpr std::string_view kParameterOpen = "<parameter=";
inline constexpr std::string_view kParameterClose = "</parameter>";
inline constexpr std::string_view kPythonTag = "<|python_tag|>";
inline constexpr std::string_view kEomId = "<|eom_id|>";
inline constexpr std::string_view kEotId = "<|eot_id|>";
inline constexpr std::string_view kImEnd = "<|im_end|>";
inline constexpr std::string_view kEndOfText = "<|end_of_text|>";
inline constexpr std::string_view kArgKey = "<arg_key>";
inline constexpr std::string_view kArgKeyEnd = "</arg_key>";
inline constexpr std::string_view kArgValue = "<arg_value>";
inline constexpr std::string_view kArgValueEnd = "</arg_value>";
inline constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
inline constexpr std::string_view kMistralArgs = "[ARGS]";
inline constexpr std::string_view kMistralCallId = "[CALL_ID]";
inline constexpr std::string_view kMistralEos = "</s>";
inline constexpr std::string_view kMistralThink = "[THINK]";
inline constexpr std::string_view kMistralThinkEnd = "[/THINK]";
inline constexpr std::string_view kThink = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsCallsBegin = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>";
inline constexpr std::string_view kDsCallsEnd = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>";
inline constexpr std::string_view kDsCallBegin = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>";
inline constexpr std::string_view kDsCallEnd = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>";
inline constexpr std::string_view kDsSep = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>";
inline constexpr std::string_view kDsEos = "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>";
inline constexpr std::string_view kKimiSectionBegin = "<|tool_calls_section_begin|>";
inline constexpr std::string_view kKimiSectionEnd = "<|tool_calls_section_end|>";
inline constexpr std::string_view kKimiCallBegin = "<|tool_call_begin|>";
inline constexpr std::string_view kKimiArgBegin = "<|tool_call_argument_begin|>";
inline constexpr std::string_view kKimiCallEnd = "<|tool_call_end|>";
inline constexpr std::string_view kMiniMaxCalls = "<tool_calls>";
inline constexpr std::string_view kMiniMaxCallsEnd = "</tool_calls>";
inline constexpr std::string_view kMiniMaxEos = "<end_of_sentence>";
inline constexpr std::string_view kCohereThink = "<|START_THINKING|>";
inline constexpr std::string_view kCohereThinkEnd = "<|END_THINKING|>";
inline constexpr std::string_view kCohereAction = "<|START_ACTION|>";
inline constexpr std::string_view kCohereActionEnd = "<|END_ACTION|>";
inline constexpr std::string_view kCohereResponse = "<|START_RESPONSE|>";
inline constexpr std::string_view kCohereResponseEnd = "<|END_RESPONSE|>";
inline constexpr std::string_view kCohereEndOfTurn = "<|END_OF_TURN_TOKEN|>";
inline constexpr std::string_view kHStart = "<|start|>";
inline constexpr std::string_view kHChannel = "<|channel|>";
inline constexpr std::string_view kHMessage = "<|message|>";
inline constexpr std::string_view kHEnd = "<|end|>";
inline constexpr std::string_view kHCall = "<|call|>";
inline constexpr std::string_view kHReturn = "<|return|>";

inline constexpr std::size_t kMaxNameBytes = 256;

inline bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
std::string_view trim(std::string_view s);
inline bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Parses JSON whose brackets nest at most kMaxJsonDepth deep; false otherwise.
bool parse_json(std::string_view text, ojson& out);
// Compact JSON text, invalid UTF-8 replaced by U+FFFD.
std::string dump(const ojson& j);
// Invalid UTF-8 replaced by U+FFFD (names and ids come from raw model text).
std::string valid_utf8(std::string_view s);

struct Call {
  std::string name, arguments, id;  // arguments: JSON text; id: the model's own, or ""
};

// {"name"|"tool_name": N, "arguments"|"parameters": {...} or "..."} (also
// wrapped in "function"). Without require_args a missing arguments key means {}.
bool call_from_object(const ojson& j, bool require_args, Call& call);
// Llama 3.1 built-in tools: NAME.call(key="value", key2=3) with Python literals.
bool parse_builtin_call(std::string_view text, Call& call);
// <function=N>\n<parameter=P>\nVALUE\n</parameter>...</function> (Qwen3-Coder),
// or <function=N>{...}</function> (Functionary, Llama 3.1 custom tools).
bool parse_xml_function(std::string_view body, const nlohmann::json& tools, Call& call);
// NAME<arg_key>K</arg_key><arg_value>V</arg_value>... (GLM 4.x, Laguna).
bool parse_glm_call(std::string_view body, const nlohmann::json& tools, Call& call);
// The body between <tool_call> and </tool_call>: JSON, the XML form or GLM's.
bool parse_tagged_body(std::string_view body, const nlohmann::json& tools, Call& call);
// JSON arguments, optionally in a ```json fence: an object, or a string that
// holds an object's JSON text; `arguments` gets the object's compact text.
bool parse_arguments(std::string_view text, std::string& arguments);
// <｜tool▁call▁begin｜>...<｜tool▁call▁end｜> repeated (DeepSeek V3 and R1 forms).
bool parse_deepseek_calls(std::string_view body, std::vector<Call>& calls);
// <|tool_call_begin|>functions.N:I<|tool_call_argument_begin|>{...}<|tool_call_end|>
// repeated (Kimi K2); the call's id is the model's "functions.N:I".
bool parse_kimi_calls(std::string_view body, std::vector<Call>& calls);
// {"name": N, "arguments": {...}} objects one after another (MiniMax-M1).
bool parse_json_call_lines(std::string_view body, std::vector<Call>& calls);
// Strips end-of-turn tokens a body may end with when generation stopped there.
std::string_view strip_end_tokens(std::string_view s);

}  // namespace strata::chat_template::tool_calls_internal

#endif  // STRATA_MODEL_CHAT_TEMPLATE_TOOL_CALL_SYNTAX_H_
