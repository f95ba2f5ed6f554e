// The streaming tool-call parser (tool_calls.h). One buffer holds the text
// not yet decided; a mode says what it is (content, reasoning, a call being
// collected, a harmony header or body). Each step either decides a prefix of
// the buffer or waits for more text; finish() decides everything.
#include "model/chat_template/tool_calls.h"

#include <algorithm>
#include <array>
#include <span>
#include <utility>

namespace strata::chat_template {
namespace {

using ojson = nlohmann::ordered_json;  // keeps the model's key order in arguments
constexpr std::size_t npos = std::string_view::npos;

// Markers (the special tokens' text, as the templates write them).
constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParameterOpen = "<parameter=";
constexpr std::string_view kParameterClose = "</parameter>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kEomId = "<|eom_id|>";
constexpr std::string_view kEotId = "<|eot_id|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kEndOfText = "<|end_of_text|>";
constexpr std::string_view kArgKey = "<arg_key>";
constexpr std::string_view kArgKeyEnd = "</arg_key>";
constexpr std::string_view kArgValue = "<arg_value>";
constexpr std::string_view kArgValueEnd = "</arg_value>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kMistralEos = "</s>";
constexpr std::string_view kMistralThink = "[THINK]";
constexpr std::string_view kMistralThinkEnd = "[/THINK]";
constexpr std::string_view kThink = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kDsCallsBegin = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>";
constexpr std::string_view kDsCallsEnd = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>";
constexpr std::string_view kDsCallBegin = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>";
constexpr std::string_view kDsCallEnd = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>";
constexpr std::string_view kDsSep = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>";
constexpr std::string_view kDsEos = "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>";
constexpr std::string_view kHStart = "<|start|>";
constexpr std::string_view kHChannel = "<|channel|>";
constexpr std::string_view kHMessage = "<|message|>";
constexpr std::string_view kHEnd = "<|end|>";
constexpr std::string_view kHCall = "<|call|>";
constexpr std::string_view kHReturn = "<|return|>";

constexpr std::size_t kMaxNameBytes = 256;
constexpr std::size_t kMaxHeaderBytes = 1024;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Length of the longest suffix of `text` that is a proper prefix of a marker:
// text that may still become that marker.
std::size_t partial_marker_suffix(std::string_view text, std::span<const std::string_view> markers) {
  std::size_t best = 0;
  for (std::string_view m : markers) {
    for (std::size_t k = std::min(text.size(), m.size() - 1); k > best; --k) {
      if (text.substr(text.size() - k) == m.substr(0, k)) {
        best = k;
        break;
      }
    }
  }
  return best;
}

// Bytes at the end of `text` that begin a UTF-8 sequence not yet complete.
std::size_t incomplete_utf8_tail(std::string_view text) {
  for (std::size_t i = 1; i <= std::min<std::size_t>(3, text.size()); ++i) {
    auto c = static_cast<unsigned char>(text[text.size() - i]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    std::size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > i ? i : 0;
  }
  return 0;
}

struct Found {
  std::size_t pos = npos;
  std::size_t which = 0;
};

// The earliest complete marker in text[from..) (the longest at a tie).
Found find_first(std::string_view text, std::span<const std::string_view> markers, std::size_t from = 0) {
  Found f;
  for (std::size_t i = 0; i < markers.size(); ++i) {
    std::size_t p = text.find(markers[i], from);
    if (p == npos) continue;
    if (p < f.pos || (p == f.pos && markers[i].size() > markers[f.which].size())) f = {p, i};
  }
  return f;
}

// Brackets outside strings never nest deeper than kMaxJsonDepth (so the
// recursive JSON parser's stack stays small).
bool nesting_ok(std::string_view text) {
  int depth = 0;
  bool in_string = false, escape = false;
  for (char c : text) {
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

bool parse_json(std::string_view text, ojson& out) {
  if (!nesting_ok(text)) return false;
  out = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  return !out.is_discarded();
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

struct Call {
  std::string name, arguments, id;
};

// {"name": N, "arguments"|"parameters": {...} or "..."} (also wrapped in
// "function"). Without require_args a missing arguments key means {}.
bool call_from_object(const ojson& j, bool require_args, Call& call) {
  if (!j.is_object()) return false;
  const ojson* f = &j;
  if (auto it = j.find("function"); it != j.end() && it->is_object()) f = &*it;
  auto name = f->find("name");
  if (name == f->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return false;
  call.name = name->get<std::string>();
  const ojson* args = nullptr;
  for (const char* key : {"arguments", "parameters"}) {
    if (auto it = f->find(key); it != f->end()) {
      args = &*it;
      break;
    }
  }
  if (args == nullptr) {
    if (require_args) return false;
    call.arguments = "{}";
  } else if (args->is_string()) {
    call.arguments = args->get<std::string>();
  } else if (args->is_object()) {
    call.arguments = dump(*args);
  } else {
    return false;
  }
  if (auto id = j.find("id"); id != j.end() && id->is_string()) call.id = id->get<std::string>();
  return true;
}

bool is_identifier(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameBytes) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Llama 3.1 built-in tools: NAME.call(key="value", key2=3) with Python literals.
bool parse_builtin_call(std::string_view text, Call& call) {
  text = trim(text);
  std::size_t dot = text.find(".call(");
  if (dot == npos || text.back() != ')' || !is_identifier(text.substr(0, dot))) return false;
  call.name = std::string(text.substr(0, dot));
  std::string_view rest = text.substr(dot + 6, text.size() - dot - 7);
  ojson args = ojson::object();
  std::size_t i = 0;
  auto skip_ws = [&] {
    while (i < rest.size() && is_ws(rest[i])) ++i;
  };
  while (true) {
    skip_ws();
    if (i == rest.size()) break;
    std::size_t key_start = i;
    while (i < rest.size() && rest[i] != '=' && !is_ws(rest[i])) ++i;
    std::string_view key = rest.substr(key_start, i - key_start);
    if (!is_identifier(key)) return false;
    skip_ws();
    if (i == rest.size() || rest[i] != '=') return false;
    ++i;
    skip_ws();
    if (i == rest.size()) return false;
    if (rest[i] == '"' || rest[i] == '\'') {
      char quote = rest[i++];
      std::string value;
      bool closed = false;
      while (i < rest.size()) {
        char c = rest[i++];
        if (c == quote) {
          closed = true;
          break;
        }
        if (c == '\\' && i < rest.size()) {
          char e = rest[i++];
          value += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          value += c;
        }
      }
      if (!closed) return false;
      args[std::string(key)] = value;
    } else {
      std::size_t v_start = i;
      while (i < rest.size() && rest[i] != ',') ++i;
      std::string_view token = trim(rest.substr(v_start, i - v_start));
      ojson value;
      if (token == "True") {
        value = true;
      } else if (token == "False") {
        value = false;
      } else if (token == "None") {
        value = nullptr;
      } else if (!parse_json(token, value) || !value.is_number()) {
        return false;
      }
      args[std::string(key)] = value;
    }
    skip_ws();
    if (i < rest.size()) {
      if (rest[i] != ',') return false;
      ++i;
    }
  }
  call.arguments = dump(args);
  return true;
}

// The declared JSON type of a function's parameter ("" when unknown).
std::string parameter_type(const nlohmann::json& tools, std::string_view function, std::string_view param) {
  if (!tools.is_array()) return "";
  for (const auto& tool : tools) {
    if (!tool.is_object()) continue;
    const auto* f = &tool;
    if (auto it = tool.find("function"); it != tool.end() && it->is_object()) f = &*it;
    auto name = f->find("name");
    if (name == f->end() || !name->is_string() || name->get_ref<const std::string&>() != function) continue;
    auto params = f->find("parameters");
    if (params == f->end() || !params->is_object()) return "";
    auto props = params->find("properties");
    if (props == params->end() || !props->is_object()) return "";
    auto p = props->find(std::string(param));
    if (p == props->end() || !p->is_object()) return "";
    auto type = p->find("type");
    return type != p->end() && type->is_string() ? type->get<std::string>() : "";
  }
  return "";
}

// A parameter value written as text: a string when the tool's schema says so;
// otherwise JSON when it parses as JSON (without a schema: only a number, bool,
// null, object or array), else the text as a string.
ojson typed_value(const nlohmann::json& tools, std::string_view function, std::string_view param,
                  std::string_view value) {
  std::string type = parameter_type(tools, function, param);
  ojson parsed;
  if (type != "string" && parse_json(value, parsed) && (!parsed.is_string() || !type.empty())) return parsed;
  return std::string(value);
}

// Qwen3-Coder: <function=N>\n<parameter=P>\nVALUE\n</parameter>...</function>.
bool parse_xml_function(std::string_view body, const nlohmann::json& tools, Call& call) {
  body = trim(body);
  if (!starts_with(body, kFunctionOpen)) return false;
  body.remove_prefix(kFunctionOpen.size());
  std::size_t gt = body.find('>');
  if (gt == npos) return false;
  std::string_view name = trim(body.substr(0, gt));
  if (name.empty() || name.size() > kMaxNameBytes || name.find('\n') != npos) return false;
  body.remove_prefix(gt + 1);
  body = trim(body);
  if (body.size() < kFunctionClose.size() || body.substr(body.size() - kFunctionClose.size()) != kFunctionClose)
    return false;
  body.remove_suffix(kFunctionClose.size());
  call.name = std::string(name);
  if (starts_with(body, "{")) {  // <function=N>{...}</function> (Functionary, Llama 3.1 custom tools)
    ojson j;
    if (!parse_json(body, j) || !j.is_object()) return false;
    call.arguments = dump(j);
    return true;
  }
  ojson args = ojson::object();
  while (true) {
    body = trim(body);
    if (body.empty()) break;
    if (!starts_with(body, kParameterOpen)) return false;
    body.remove_prefix(kParameterOpen.size());
    std::size_t pgt = body.find('>');
    if (pgt == npos) return false;
    std::string_view pname = trim(body.substr(0, pgt));
    if (pname.empty() || pname.size() > kMaxNameBytes) return false;
    body.remove_prefix(pgt + 1);
    std::size_t end = body.find(kParameterClose);
    if (end == npos) return false;
    std::string_view value = body.substr(0, end);
    body.remove_prefix(end + kParameterClose.size());
    if (starts_with(value, "\n")) value.remove_prefix(1);
    if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
    args[std::string(pname)] = typed_value(tools, name, pname, value);
  }
  call.arguments = dump(args);
  return true;
}

// GLM 4.x, Laguna: NAME<arg_key>K</arg_key><arg_value>V</arg_value>... (the
// body of <tool_call>), whitespace allowed between the parts.
bool parse_glm_call(std::string_view body, const nlohmann::json& tools, Call& call) {
  body = trim(body);
  std::size_t k = body.find(kArgKey);
  std::string_view name = trim(body.substr(0, k));
  if (name.empty() || name.size() > kMaxNameBytes || name.find_first_of("<>{}\n\"") != npos) return false;
  call.name = std::string(name);
  ojson args = ojson::object();
  body = k == npos ? std::string_view() : body.substr(k);
  while (true) {
    body = trim(body);
    if (body.empty()) break;
    if (!starts_with(body, kArgKey)) return false;
    body.remove_prefix(kArgKey.size());
    std::size_t ke = body.find(kArgKeyEnd);
    if (ke == npos) return false;
    std::string_view key = trim(body.substr(0, ke));
    body = trim(body.substr(ke + kArgKeyEnd.size()));
    if (key.empty() || !starts_with(body, kArgValue)) return false;
    body.remove_prefix(kArgValue.size());
    std::size_t ve = body.find(kArgValueEnd);
    if (ve == npos) return false;
    args[std::string(key)] = typed_value(tools, name, key, body.substr(0, ve));
    body.remove_prefix(ve + kArgValueEnd.size());
  }
  call.arguments = dump(args);
  return true;
}

// The body between <tool_call> and </tool_call>: JSON, the XML form or GLM's.
bool parse_tagged_body(std::string_view body, const nlohmann::json& tools, Call& call) {
  body = trim(body);
  if (starts_with(body, kFunctionOpen)) return parse_xml_function(body, tools, call);
  if (!starts_with(body, "{")) return parse_glm_call(body, tools, call);
  ojson j;
  return parse_json(body, j) && call_from_object(j, /*require_args=*/false, call);
}

// JSON arguments, optionally in a ```json fence (DeepSeek R1): an object, or a
// string that is taken as the arguments text.
bool parse_arguments(std::string_view text, std::string& arguments) {
  text = trim(text);
  if (starts_with(text, "```")) {
    std::size_t nl = text.find('\n');
    if (nl == npos || text.size() < 6 || text.substr(text.size() - 3) != "```") return false;
    text = trim(text.substr(nl + 1, text.size() - 3 - nl - 1));
  }
  ojson j;
  if (!parse_json(text, j)) return false;
  if (j.is_object()) {
    arguments = dump(j);
    return true;
  }
  if (j.is_string()) {
    arguments = j.get<std::string>();
    return true;
  }
  return false;
}

// <｜tool▁call▁begin｜>...<｜tool▁call▁end｜> repeated, whitespace between.
bool parse_deepseek_calls(std::string_view body, std::vector<Call>& calls) {
  while (true) {
    body = trim(body);
    if (body.empty()) return !calls.empty();
    if (!starts_with(body, kDsCallBegin)) return false;
    body.remove_prefix(kDsCallBegin.size());
    std::size_t end = body.find(kDsCallEnd);
    if (end == npos) return false;
    std::string_view one = body.substr(0, end);
    body.remove_prefix(end + kDsCallEnd.size());
    std::size_t sep = one.find(kDsSep);
    if (sep == npos) return false;
    std::string_view before = trim(one.substr(0, sep));
    std::string_view after = one.substr(sep + kDsSep.size());
    Call call;
    if (before == "function") {  // R1: function<sep>NAME\n```json\n{...}\n```
      after = trim(after);
      std::size_t nl = after.find('\n');
      if (nl == npos) return false;
      before = trim(after.substr(0, nl));
      after = after.substr(nl + 1);
    }
    if (before.empty() || before.size() > kMaxNameBytes) return false;
    call.name = std::string(before);
    if (!parse_arguments(after, call.arguments)) return false;
    calls.push_back(std::move(call));
  }
}

// Strips end-of-turn tokens a body may end with when generation stopped there.
std::string_view strip_end_tokens(std::string_view s) {
  for (bool again = true; again;) {
    again = false;
    s = trim(s);
    for (std::string_view t : {kImEnd, kEndOfText, kEotId, kEomId, kMistralEos, kDsEos, kHEnd, kHCall, kHReturn}) {
      if (s.size() >= t.size() && s.substr(s.size() - t.size()) == t) {
        s.remove_suffix(t.size());
        again = true;
      }
    }
  }
  return s;
}

std::string_view harmony_field(std::string_view header, std::string_view key) {
  std::size_t p = header.find(key);
  if (p == npos) return {};
  std::string_view v = header.substr(p + key.size());
  std::size_t end = 0;
  while (end < v.size() && !is_ws(v[end]) && v[end] != '<') ++end;
  return v.substr(0, end);
}

// Invalid UTF-8 replaced by U+FFFD (names and ids come from raw model text).
std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && n == 2) ok = c >= 0xC2;
    if (ok && n == 3) {
      auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
    }
    if (ok && n == 4) {
      auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = c <= 0xF4 && !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace

namespace tool_calls_internal {

bool JsonScan::scan(std::string_view text) {
  while (pos < text.size() && !bad) {
    char c = text[pos++];
    if (!started) {
      if (is_ws(c)) continue;
      if (c != '{' && c != '[') {
        bad = true;
        return false;
      }
      started = true;
      depth = 1;
    } else if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) bad = true;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return true;
    }
  }
  return false;
}

}  // namespace tool_calls_internal

std::string_view tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone: return "none";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kQwen3Coder: return "qwen3_coder";
    case ToolCallFormat::kGlm: return "glm";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kHarmony: return "harmony";
    case ToolCallFormat::kDeepSeek: return "deepseek";
  }
  return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view t) {
  auto has = [&](std::string_view s) { return t.find(s) != npos; };
  if (has("<|channel|>") && (has("to=functions") || has("\"functions.\""))) return ToolCallFormat::kHarmony;
  if (has("<invoke name=")) return ToolCallFormat::kNone;  // MiniMax: not parsed yet
  if (has("<function=") && has("<parameter=")) return ToolCallFormat::kQwen3Coder;
  if (has("<arg_key>") && has("<tool_call>")) return ToolCallFormat::kGlm;
  if (has("<tool_call>")) return ToolCallFormat::kHermes;
  if (has("[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  if (has(kDsCallBegin)) return ToolCallFormat::kDeepSeek;
  if (has("<|start_header_id|>") && (has("<|python_tag|>") || has("\"parameters\": ")))
    return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kNone;
}

bool template_uses_think_tags(std::string_view t) { return t.find(kThink) != npos && t.find(kThinkEnd) != npos; }

bool prompt_opens_reasoning(std::string_view prompt) {
  prompt = trim(prompt);
  return prompt.size() >= kThink.size() && prompt.substr(prompt.size() - kThink.size()) == kThink;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, Options options)
    : format_(format), options_(std::move(options)) {
  rng_.seed(options_.id_seed != 0 ? options_.id_seed : std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}());
  if (options_.starts_in_reasoning) {
    mode_ = Mode::kReasoning;
    reasoning_.drop_leading = true;
  } else if (format_ == ToolCallFormat::kHarmony) {
    mode_ = Mode::kHarmonyHeader;
  }
  llama_json_ok_ = format_ == ToolCallFormat::kLlama3Json;
  // The markers text mode looks for: reasoning blocks, the format's call
  // openers and its end-of-turn tokens.
  auto& m = text_markers_;
  if (options_.think_tags) m.insert(m.end(), {kThink, kThinkEnd});
  switch (format_) {
    case ToolCallFormat::kNone:
    case ToolCallFormat::kHarmony: break;
    case ToolCallFormat::kLlama3Json: m.insert(m.end(), {kPythonTag, kFunctionOpen, kEotId, kEomId, kEndOfText}); break;
    case ToolCallFormat::kHermes:
    case ToolCallFormat::kGlm: m.insert(m.end(), {kToolCallOpen, kImEnd, kEndOfText, kDsEos}); break;
    case ToolCallFormat::kQwen3Coder: m.insert(m.end(), {kToolCallOpen, kFunctionOpen, kImEnd, kEndOfText}); break;
    case ToolCallFormat::kMistral: m.insert(m.end(), {kMistralCalls, kMistralThink, kMistralEos}); break;
    case ToolCallFormat::kDeepSeek: m.insert(m.end(), {kDsCallsBegin, kDsEos}); break;
  }
  reasoning_markers_ = {format_ == ToolCallFormat::kMistral ? kMistralThinkEnd : kThinkEnd};
}

std::string ToolCallParser::new_id() {
  static constexpr std::string_view kAlnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  bool mistral = format_ == ToolCallFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[rng_() % kAlnum.size()];
  return id;
}

void ToolCallParser::add_call(std::string name, std::string arguments, std::string id,
                              std::vector<ToolCallDelta>& calls) {
  ToolCallDelta d;
  d.index = static_cast<int>(calls_.size() + calls.size());
  d.id = id.empty() ? new_id() : std::move(id);
  d.id = valid_utf8(d.id);
  d.name = valid_utf8(name);
  d.arguments = valid_utf8(arguments);
  calls.push_back(std::move(d));
}

void ToolCallParser::emit(bool reasoning, std::string_view text, Delta& out) {
  Field& f = reasoning ? reasoning_ : content_;
  std::string& dst = reasoning ? out.reasoning_content : out.content;
  if (f.drop_leading) {
    while (!text.empty() && is_ws(text.front())) text.remove_prefix(1);
    if (text.empty()) return;
    f.drop_leading = false;
  }
  std::size_t k = text.size();
  while (k > 0 && is_ws(text[k - 1])) --k;
  if (k == 0) {
    f.pending_ws.append(text);
    return;
  }
  if (!reasoning) after_call_ = false;
  dst += f.pending_ws;
  dst.append(text.substr(0, k));
  f.pending_ws.assign(text.substr(k));
}

void ToolCallParser::flush_pending(Delta& out) {
  if (!after_call_) out.content += content_.pending_ws;
  content_.pending_ws.clear();
  out.reasoning_content += reasoning_.pending_ws;
  reasoning_.pending_ws.clear();
}

void ToolCallParser::begin_call(CallKind kind, std::string opener) {
  mode_ = Mode::kCall;
  call_kind_ = kind;
  opener_ = std::move(opener);
  // Whitespace before a call is dropped, unless the call turns out malformed.
  opener_.insert(0, content_.pending_ws);
  content_.pending_ws.clear();
  scan_from_ = 0;
}

void ToolCallParser::end_call(std::size_t consumed, bool ok, std::vector<ToolCallDelta> calls, Delta& out) {
  if (ok && !calls.empty()) {
    for (auto& c : calls) {
      calls_.push_back(c);
      out.tool_calls.push_back(std::move(c));
    }
    after_call_ = true;
    if (format_ == ToolCallFormat::kLlama3Json) llama_json_ok_ = true;
  } else {
    emit(false, opener_, out);
    emit(false, std::string_view(buf_).substr(0, consumed), out);
    llama_json_ok_ = false;
  }
  buf_.erase(0, consumed);
  opener_.clear();
  scan_from_ = 0;
  mode_ = format_ == ToolCallFormat::kHarmony ? Mode::kHarmonyHeader : Mode::kText;
}

ToolCallParser::Delta ToolCallParser::push(std::string_view text) {
  Delta out;
  buf_.append(text);
  while (step(false, out)) {
  }
  return out;
}

ToolCallParser::Delta ToolCallParser::finish() {
  Delta out;
  while (step(true, out)) {
  }
  // Whatever is left (a held marker prefix, an unfinished UTF-8 sequence).
  if (!buf_.empty()) {
    emit(mode_ == Mode::kReasoning || (mode_ == Mode::kHarmonyBody && harmony_channel_ == "analysis"), buf_, out);
    buf_.clear();
  }
  flush_pending(out);
  return out;
}

bool ToolCallParser::step(bool final, Delta& out) {
  switch (mode_) {
    case Mode::kText:
    case Mode::kReasoning: return step_text(final, out);
    case Mode::kCall: return step_call(final, out);
    case Mode::kHarmonyHeader: return step_harmony_header(final, out);
    case Mode::kHarmonyBody: return step_harmony_body(final, out);
  }
  return false;
}

bool ToolCallParser::step_text(bool final, Delta& out) {
  if (buf_.empty()) return false;
  const bool reasoning = mode_ == Mode::kReasoning;
  const bool mistral = format_ == ToolCallFormat::kMistral;
  const std::vector<std::string_view>& markers = reasoning ? reasoning_markers_ : text_markers_;
  // Llama 3: a turn (or what follows a call) that opens with '{' is a call.
  if (!reasoning && llama_json_ok_) {
    std::size_t i = 0;
    while (i < buf_.size() && (is_ws(buf_[i]) || (buf_[i] == ';' && !calls_.empty()))) ++i;
    if (i == buf_.size() && !final) return false;  // only whitespace so far: wait
    if (i < buf_.size() && buf_[i] == '{') {
      buf_.erase(0, i);
      begin_call(CallKind::kJson, "");
      json_ = {};
      return true;
    }
    llama_json_ok_ = false;
  }
  Found f = find_first(buf_, markers);
  if (f.pos == npos) {
    std::size_t keep = final ? 0 : std::max(partial_marker_suffix(buf_, markers), incomplete_utf8_tail(buf_));
    std::size_t n = buf_.size() - keep;
    if (n == 0) return false;
    emit(reasoning, std::string_view(buf_).substr(0, n), out);
    buf_.erase(0, n);
    return true;
  }
  std::string_view marker = markers[f.which];
  emit(reasoning, std::string_view(buf_).substr(0, f.pos), out);
  buf_.erase(0, f.pos + marker.size());
  if (reasoning) {  // </think> or [/THINK]
    reasoning_.pending_ws.clear();
    content_.drop_leading = true;
    mode_ = Mode::kText;
  } else if (marker == kThink || (mistral && marker == kMistralThink)) {
    content_.pending_ws.clear();
    reasoning_.drop_leading = true;
    mode_ = Mode::kReasoning;
  } else if (marker == kToolCallOpen) {
    begin_call(CallKind::kTagged, std::string(marker));
  } else if (marker == kFunctionOpen) {
    begin_call(CallKind::kBareFunction, std::string(marker));
  } else if (marker == kPythonTag) {
    begin_call(CallKind::kPythonTag, std::string(marker));
  } else if (marker == kMistralCalls) {
    begin_call(CallKind::kMistral, std::string(marker));
    json_ = {};
  } else if (marker == kDsCallsBegin) {
    begin_call(CallKind::kDeepSeek, std::string(marker));
  }
  // Otherwise an end-of-turn token or a stray </think>: dropped.
  return true;
}

bool ToolCallParser::step_call(bool final, Delta& out) {
  std::vector<ToolCallDelta> calls;
  auto too_big = [&] { return buf_.size() > kMaxCallBytes; };
  // Collects up to `closer`; parse(body) decides. Returns whether it progressed.
  auto until = [&](std::string_view closer, auto&& parse) -> bool {
    std::size_t q = buf_.find(closer, scan_from_);
    if (q == npos) {
      if (final) {
        bool ok = parse(strip_end_tokens(buf_));
        end_call(buf_.size(), ok, std::move(calls), out);
        return true;
      }
      if (too_big()) {
        end_call(buf_.size(), false, {}, out);
        return true;
      }
      scan_from_ = buf_.size() >= closer.size() ? buf_.size() - closer.size() + 1 : 0;
      return false;
    }
    bool ok = parse(std::string_view(buf_).substr(0, q));
    end_call(q + closer.size(), ok, std::move(calls), out);
    return true;
  };
  auto one = [&](const Call& c) {
    add_call(c.name, c.arguments, c.id, calls);
    return true;
  };
  switch (call_kind_) {
    case CallKind::kTagged:
      return until(kToolCallClose, [&](std::string_view body) {
        Call c;
        return parse_tagged_body(body, options_.tools, c) && one(c);
      });
    case CallKind::kBareFunction:
      return until(kFunctionClose, [&](std::string_view body) {
        Call c;
        std::string whole = std::string(kFunctionOpen) + std::string(body);
        if (!whole.ends_with(kFunctionClose)) whole += kFunctionClose;
        return parse_xml_function(whole, options_.tools, c) && one(c);
      });
    case CallKind::kDeepSeek:
      return until(kDsCallsEnd, [&](std::string_view body) {
        std::vector<Call> cs;
        if (!parse_deepseek_calls(body, cs)) return false;
        for (const auto& c : cs) one(c);
        return true;
      });
    case CallKind::kHarmony: {
      static constexpr std::array<std::string_view, 3> kEnds = {kHCall, kHEnd, kHReturn};
      Found f = find_first(buf_, kEnds, scan_from_);
      auto parse = [&](std::string_view body) {
        Call c;
        c.name = harmony_recipient_;
        if (starts_with(c.name, "functions.")) c.name.erase(0, 10);
        return !c.name.empty() && parse_arguments(body, c.arguments) && one(c);
      };
      if (f.pos == npos) {
        if (!final && !too_big()) {
          scan_from_ = buf_.size() >= 8 ? buf_.size() - 8 : 0;
          return false;
        }
        bool ok = final && parse(strip_end_tokens(buf_));
        end_call(buf_.size(), ok, std::move(calls), out);
        return true;
      }
      bool ok = parse(std::string_view(buf_).substr(0, f.pos));
      end_call(f.pos + kEnds[f.which].size(), ok, std::move(calls), out);
      return true;
    }
    case CallKind::kPythonTag: {
      std::size_t i = 0;
      while (i < buf_.size() && is_ws(buf_[i])) ++i;
      if (i == buf_.size() && !final) return false;
      if (i < buf_.size() && buf_[i] == '{') {
        call_kind_ = CallKind::kJson;
        json_ = {};
        return true;
      }
      static constexpr std::array<std::string_view, 2> kEnds = {kEomId, kEotId};
      Found f = find_first(buf_, kEnds, scan_from_);
      auto parse = [&](std::string_view body) {
        Call c;
        if (parse_builtin_call(body, c)) return one(c);
        body = trim(body);
        if (body.empty()) return false;
        c.name = "python";  // code_interpreter: the code itself
        c.arguments = dump(ojson{{"code", std::string(body)}});
        return one(c);
      };
      if (f.pos == npos) {
        if (!final && !too_big()) {
          scan_from_ = buf_.size() >= 9 ? buf_.size() - 9 : 0;
          return false;
        }
        bool ok = final && parse(buf_);
        end_call(buf_.size(), ok, std::move(calls), out);
        return true;
      }
      bool ok = parse(std::string_view(buf_).substr(0, f.pos));
      end_call(f.pos + kEnds[f.which].size(), ok, std::move(calls), out);
      return true;
    }
    case CallKind::kJson: {
      // Llama 3 JSON (bare, or after <|python_tag|>: then arguments may be absent).
      bool ended = json_.scan(buf_);
      if (!ended) {
        if (json_.bad || final || too_big()) {
          end_call(buf_.size(), false, {}, out);
          return true;
        }
        return false;
      }
      Call c;
      ojson j;
      bool ok = parse_json(std::string_view(buf_).substr(0, json_.pos), j) &&
                call_from_object(j, /*require_args=*/opener_.find(kPythonTag) == npos, c) && one(c);
      end_call(json_.pos, ok, std::move(calls), out);
      return true;
    }
    case CallKind::kMistral: {
      std::size_t i = 0;
      while (i < buf_.size() && is_ws(buf_[i])) ++i;
      if (i == buf_.size()) {
        if (!final) return false;
        end_call(buf_.size(), false, {}, out);
        return true;
      }
      if (buf_[i] == '[') {  // [TOOL_CALLS][{...}, ...]
        bool ended = json_.scan(buf_);
        if (!ended) {
          if (json_.bad || final || too_big()) {
            end_call(buf_.size(), false, {}, out);
            return true;
          }
          return false;
        }
        ojson j;
        bool ok = parse_json(std::string_view(buf_).substr(0, json_.pos), j) && j.is_array() && !j.empty();
        if (ok) {
          for (const auto& item : j) {
            Call c;
            if (!call_from_object(item, /*require_args=*/false, c)) {
              ok = false;
              break;
            }
            one(c);
          }
        }
        if (!ok) calls.clear();
        end_call(json_.pos, ok, std::move(calls), out);
        return true;
      }
      // [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}
      if (json_.base == 0) {
        std::size_t a = buf_.find(kMistralArgs);
        if (a == npos) {
          if (final || buf_.size() > kMaxHeaderBytes) {
            end_call(buf_.size(), false, {}, out);
            return true;
          }
          return false;
        }
        json_.base = a + kMistralArgs.size();
      }
      bool ended = json_.scan(std::string_view(buf_).substr(json_.base));
      if (!ended) {
        if (json_.bad || final || too_big()) {
          end_call(buf_.size(), false, {}, out);
          return true;
        }
        return false;
      }
      std::size_t end = json_.base + json_.pos;
      std::string_view head = std::string_view(buf_).substr(0, json_.base - kMistralArgs.size());
      Call c;
      std::size_t id_at = head.find(kMistralCallId);
      if (id_at != npos) {
        c.id = std::string(trim(head.substr(id_at + kMistralCallId.size())));
        head = head.substr(0, id_at);
      }
      head = trim(head);
      bool ok = !head.empty() && head.size() <= kMaxNameBytes && head.find_first_of(" \n\t[]{}\"") == npos &&
                parse_arguments(std::string_view(buf_).substr(json_.base, json_.pos), c.arguments);
      if (ok) {
        c.name = std::string(head);
        one(c);
      }
      end_call(end, ok, std::move(calls), out);
      return true;
    }
  }
  return false;
}

bool ToolCallParser::step_harmony_header(bool final, Delta& /*out*/) {
  if (buf_.empty()) return false;
  std::size_t m = buf_.find(kHMessage);
  if (m == npos) {
    // A header opens with one of these; anything else is plain text.
    static constexpr std::array<std::string_view, 4> kOpeners = {kHStart, kHChannel, " to=", "assistant"};
    bool plausible = false;
    for (std::string_view o : kOpeners) {
      std::size_t n = std::min(o.size(), buf_.size());
      if (std::string_view(buf_).substr(0, n) == o.substr(0, n)) plausible = true;
    }
    if (plausible && !final && buf_.size() <= kMaxHeaderBytes) return false;
    mode_ = Mode::kHarmonyBody;
    harmony_channel_ = "final";
    return true;
  }
  std::string header = buf_.substr(0, m + kHMessage.size());
  buf_.erase(0, header.size());
  harmony_channel_ = std::string(harmony_field(header, kHChannel));
  harmony_recipient_ = std::string(harmony_field(header, "to="));
  if (!harmony_recipient_.empty()) {
    begin_call(CallKind::kHarmony, header);
  } else {
    mode_ = Mode::kHarmonyBody;
  }
  return true;
}

bool ToolCallParser::step_harmony_body(bool final, Delta& out) {
  if (buf_.empty()) return false;
  static constexpr std::array<std::string_view, 4> kEnds = {kHEnd, kHReturn, kHCall, kHStart};
  const bool reasoning = harmony_channel_ == "analysis";
  Found f = find_first(buf_, kEnds);
  if (f.pos == npos) {
    std::size_t keep = final ? 0 : std::max(partial_marker_suffix(buf_, kEnds), incomplete_utf8_tail(buf_));
    std::size_t n = buf_.size() - keep;
    if (n == 0) return false;
    emit(reasoning, std::string_view(buf_).substr(0, n), out);
    buf_.erase(0, n);
    return true;
  }
  emit(reasoning, std::string_view(buf_).substr(0, f.pos), out);
  buf_.erase(0, f.pos + kEnds[f.which].size());
  if (reasoning) reasoning_.pending_ws.clear();
  mode_ = Mode::kHarmonyHeader;
  return true;
}

nlohmann::json ToolCallParser::tool_calls() const {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& c : calls_) {
    a.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return a;
}

ToolCallParser make_tool_call_parser(std::string_view template_text, std::string_view prompt,
                                     const nlohmann::json& tools) {
  ToolCallParser::Options o;
  o.tools = tools;
  o.think_tags = template_uses_think_tags(template_text);
  o.starts_in_reasoning = o.think_tags && prompt_opens_reasoning(prompt);
  return ToolCallParser(detect_tool_call_format(template_text), std::move(o));
}

nlohmann::json tool_call_delta_json(const ToolCallDelta& call) {
  return {{"index", call.index},
          {"id", call.id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

std::string finish_reason(std::string_view base_reason, const ToolCallParser& parser) {
  if (base_reason == "stop" && parser.has_tool_calls()) return "tool_calls";
  return std::string(base_reason);
}

}  // namespace strata::chat_template
