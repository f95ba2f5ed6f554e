// The parsers of one complete tool-call body, per format (tool_call_syntax.h).
#include "model/chat_template/tool_call_syntax.h"

#include <algorithm>
#include <utility>

#include "model/chat_template/tool_calls.h"

namespace strata::chat_template::tool_calls_internal {

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

namespace {

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

}  // namespace

bool parse_json(std::string_view text, ojson& out) {
  if (!nesting_ok(text)) return false;
  out = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  return !out.is_discarded();
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

namespace {

// Arguments as OpenAI gives them: the compact text of a JSON object. A JSON
// string holding an object's text counts (templates that tojson a string).
bool arguments_text(const ojson& args, std::string& out) {
  if (args.is_object()) {
    out = dump(args);
    return true;
  }
  ojson inner;
  if (!args.is_string() || !parse_json(args.get_ref<const std::string&>(), inner) || !inner.is_object()) return false;
  out = dump(inner);
  return true;
}

}  // namespace

// {"name"|"tool_name": N, "arguments"|"parameters": {...} or "..."} (also
// wrapped in "function"). Without require_args a missing arguments key means {}.
bool call_from_object(const ojson& j, bool require_args, Call& call) {
  if (!j.is_object()) return false;
  const ojson* f = &j;
  if (auto it = j.find("function"); it != j.end() && it->is_object()) f = &*it;
  auto name = f->find("name");
  if (name == f->end()) name = f->find("tool_name");  // Command R
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
  } else if (!arguments_text(*args, call.arguments)) {
    return false;
  }
  if (auto id = j.find("id"); id != j.end() && id->is_string()) call.id = id->get<std::string>();
  return true;
}

namespace {

bool is_identifier(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameBytes) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

}  // namespace

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

namespace {

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

}  // namespace

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
  return parse_json(text, j) && arguments_text(j, arguments);
}

// <｜tool▁call▁begin｜>...<｜tool▁call▁end｜> repeated, whitespace between.
bool parse_deepseek_calls(std::string_view body, std::vector<Call>& calls) {
  while (true) {
    body = trim(body);
    if (body.empty()) return !calls.empty();
    if (!starts_with(body, kDsCallBegin)) return false;
    body.remove_prefix(kDsCallBegin.size());
    std::size_t end = find_outside_strings(body, kDsCallEnd);
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

bool parse_kimi_calls(std::string_view body, std::vector<Call>& calls) {
  while (true) {
    body = trim(body);
    if (body.empty()) return !calls.empty();
    if (!starts_with(body, kKimiCallBegin)) return false;
    body.remove_prefix(kKimiCallBegin.size());
    std::size_t end = find_outside_strings(body, kKimiCallEnd);
    if (end == npos) return false;
    std::string_view one = body.substr(0, end);
    body.remove_prefix(end + kKimiCallEnd.size());
    std::size_t arg = one.find(kKimiArgBegin);
    if (arg == npos) return false;
    Call call;
    std::string_view id = trim(one.substr(0, arg));
    std::string_view name = id;
    if (starts_with(name, "functions.")) name.remove_prefix(10);
    if (std::size_t colon = name.rfind(':'); colon != npos) name = name.substr(0, colon);
    if (name.empty() || id.size() > kMaxNameBytes) return false;
    call.name = std::string(name);
    call.id = std::string(id);
    if (!parse_arguments(one.substr(arg + kKimiArgBegin.size()), call.arguments)) return false;
    calls.push_back(std::move(call));
  }
}

bool parse_json_call_lines(std::string_view body, std::vector<Call>& calls) {
  while (true) {
    body = trim(body);
    if (body.empty()) return !calls.empty();
    JsonScan scan;
    if (!scan.scan(body)) return false;
    ojson j;
    Call call;
    if (!parse_json(body.substr(0, scan.pos), j) || !call_from_object(j, /*require_args=*/false, call)) return false;
    calls.push_back(std::move(call));
    body.remove_prefix(scan.pos);
  }
}

// Strips end-of-turn tokens a body may end with when generation stopped there.
std::string_view strip_end_tokens(std::string_view s) {
  for (bool again = true; again;) {
    again = false;
    s = trim(s);
    for (std::string_view t :
         {kImEnd, kEndOfText, kEotId, kEomId, kMistralEos, kDsEos, kMiniMaxEos, kHEnd, kHCall, kHReturn}) {
      if (s.size() >= t.size() && s.substr(s.size() - t.size()) == t) {
        s.remove_suffix(t.size());
        again = true;
      }
    }
  }
  return s;
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

bool StringScan::in_string_at(std::string_view text, std::size_t end) {
  end = std::min(end, text.size());
  for (; pos < end; ++pos) {
    const char c = text[pos];
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    } else if (c == '"' && depth > 0) {
      in_string = true;
    }
  }
  return in_string;
}

std::size_t find_outside_strings(std::string_view text, std::string_view marker) {
  StringScan scan;
  for (std::size_t at = text.find(marker); at != npos; at = text.find(marker, at + 1)) {
    if (!scan.in_string_at(text, at)) return at;
  }
  return npos;
}

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
      open = c;
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

}  // namespace strata::chat_template::tool_calls_internal
