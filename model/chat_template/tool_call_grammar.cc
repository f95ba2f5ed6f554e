// GBNF for tool_choice "required" or a named function (tool_calls.h): the
// call syntax of each format around a generic JSON object for the arguments.
// The grammar is over text, special tokens included as their text
// (<tool_call>, [TOOL_CALLS], <|channel|>...); function names are restricted
// to OpenAI's [a-zA-Z0-9_-]{1,64}, so they need no escaping in literals.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/chat_template/tool_calls.h"

namespace strata::chat_template {
namespace {

// JSON values (RFC 8259), whitespace bounded so a model cannot loop on it,
// numbers to 16 integer digits and a 2-digit exponent so that every one is
// a finite double (the arguments are parsed here and by the client: 1e400
// is refused by nlohmann and read as infinity by Python).
constexpr std::string_view kJsonRules = R"(object ::= "{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* )? ws "}"
array ::= "[" ws ( value ( ws "," ws value )* )? ws "]"
value ::= object | array | string | number | "true" | "false" | "null"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" hex hex hex hex ) )* "\""
hex ::= [0-9a-fA-F]
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9] [0-9]? )?
ws ::= ( " " | "\n" | "\t" )? ( " " | "\n" | "\t" )? ( " " | "\n" | "\t" )? ( " " | "\n" | "\t" )?
)";

bool valid_name(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> tool_call_gbnf(ToolCallFormat format, const nlohmann::json& tools,
                                           const nlohmann::json& tool_choice, bool parallel) {
  if (!tools.is_array() || tools.empty()) return absl::InvalidArgumentError("tools: expected a non-empty array");
  std::vector<std::string> names;
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const auto& t = tools[i];
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object() ||
        !t["function"].contains("name") || !t["function"]["name"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("tools[", i, "].function.name: expected a string"));
    }
    std::string name = t["function"]["name"].get<std::string>();
    if (!valid_name(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tools[", i, "].function.name: expected 1-64 of a-z A-Z 0-9 _ -, got \"", name, "\""));
    }
    names.push_back(std::move(name));
  }
  bool single = !parallel;  // a named function or no parallel calls: exactly one call
  if (tool_choice.is_object()) {
    const auto& f = tool_choice.contains("function") ? tool_choice["function"] : nlohmann::json();
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string()) {
      return absl::InvalidArgumentError("tool_choice.function.name: expected a string");
    }
    std::string want = f["name"].get<std::string>();
    bool known = false;
    for (const auto& n : names) known = known || n == want;
    if (!known) return absl::InvalidArgumentError(absl::StrCat("tool_choice.function.name: no tool named \"", want, "\""));
    names = {want};
    single = true;
  } else if (!(tool_choice.is_string() && tool_choice.get<std::string>() == "required")) {
    return absl::InvalidArgumentError(
        "tool_choice: a grammar is made only for \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  std::string name_rule = "name ::= ";
  for (std::size_t i = 0; i < names.size(); ++i) absl::StrAppend(&name_rule, i ? " | " : "", "\"", names[i], "\"");
  std::string calls;  // root: one call, or calls in a row
  std::string call;
  switch (format) {
    case ToolCallFormat::kNone:
      return absl::InvalidArgumentError("tool_choice: the chat template has no tool-call format");
    case ToolCallFormat::kLlama3Json:
      call = R"(call ::= "{\"name\": \"" name "\", \"parameters\": " object "}")";
      calls = "root ::= call";  // Llama 3.x templates take one call a turn
      break;
    case ToolCallFormat::kHermes:
      call = R"(call ::= "<tool_call>\n{\"name\": \"" name "\", \"arguments\": " object "}\n</tool_call>")";
      calls = single ? "root ::= call" : R"(root ::= call ( "\n" call )*)";
      break;
    case ToolCallFormat::kQwen3Coder:
      call = R"(call ::= "<tool_call>\n<function=" name ">\n" param* "</function>\n</tool_call>"
param ::= "<parameter=" [a-zA-Z0-9_-]+ ">\n" [^<]* "\n</parameter>\n")";
      calls = single ? "root ::= call" : R"(root ::= call ( "\n" call )*)";
      break;
    case ToolCallFormat::kGlm:
      call = R"(call ::= "<tool_call>" name arg* "</tool_call>"
arg ::= "<arg_key>" [a-zA-Z0-9_-]+ "</arg_key><arg_value>" [^<]* "</arg_value>")";
      calls = single ? "root ::= call" : "root ::= call+";
      break;
    case ToolCallFormat::kMistral:
      // Both generations: Nemo's JSON array and [TOOL_CALLS]NAME[ARGS]{...}.
      call = R"(call ::= "[TOOL_CALLS]" name "[ARGS]" object
item ::= "{\"name\": \"" name "\", \"arguments\": " object "}")";
      calls = single ? R"(root ::= "[TOOL_CALLS][" item "]" | call)"
                     : R"(root ::= "[TOOL_CALLS][" item ( ", " item )* "]" | call call*)";
      break;
    case ToolCallFormat::kHarmony:
      call = R"(call ::= "<|channel|>commentary to=functions." name " <|constrain|>json<|message|>" object "<|call|>"
analysis ::= "<|channel|>analysis<|message|>" [^<]* "<|end|><|start|>assistant")";
      calls = "root ::= analysis? call";  // the template carries one call a message
      break;
    case ToolCallFormat::kKimiK2:
      call = R"(call ::= "<|tool_call_begin|>functions." name ":" [0-9] [0-9]? "<|tool_call_argument_begin|>" object "<|tool_call_end|>")";
      calls = single ? R"(root ::= "<|tool_calls_section_begin|>" call "<|tool_calls_section_end|>")"
                     : R"(root ::= "<|tool_calls_section_begin|>" call+ "<|tool_calls_section_end|>")";
      break;
    case ToolCallFormat::kMiniMax:
      call = R"(call ::= "{\"name\": \"" name "\", \"arguments\": " object "}\n")";
      calls = single ? R"(root ::= "<tool_calls>\n" call "</tool_calls>")" : R"(root ::= "<tool_calls>\n" call+ "</tool_calls>")";
      break;
    case ToolCallFormat::kCommandR:
      call = R"(call ::= "{\"tool_call_id\": \"" [0-9]+ "\", \"tool_name\": \"" name "\", \"parameters\": " object "}")";
      calls = single ? R"(root ::= "<|START_THINKING|>" [^<]* "<|END_THINKING|><|START_ACTION|>[" call "]<|END_ACTION|>")"
                     : R"(root ::= "<|START_THINKING|>" [^<]* "<|END_THINKING|><|START_ACTION|>[" call ( ", " call )* "]<|END_ACTION|>")";
      break;
    case ToolCallFormat::kDeepSeek:
      call = "call ::= \"<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>\" name "
             "\"<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>\" object "
             "\"<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>\"";
      calls = absl::StrCat("root ::= \"<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>\" ",
                           single ? "call" : "call+",
                           " \"<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>\"");
      break;
  }
  return absl::StrCat(calls, "\n", call, "\n", name_rule, "\n", std::string(kJsonRules));
}

}  // namespace strata::chat_template
