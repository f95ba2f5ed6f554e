// The streaming tool-call parser (tool_calls.h). One buffer holds the text
// not yet decided; a mode says what it is (content, reasoning, a call being
// collected, a harmony header or body). Each step either decides a prefix of
// the buffer or waits for more text; finish() decides everything.
#include "model/chat_template/tool_calls.h"

#include <algorithm>
#include <array>
#include <span>
#include <utility>

#include "model/chat_template/tool_call_syntax.h"

namespace strata::chat_template {
namespace {

using namespace tool_calls_internal;  // NOLINT: the markers and body parsers

constexpr std::size_t kMaxHeaderBytes = 1024;

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

// Where the next search for any of `markers` in a growing `text` must start:
// far enough back to find one that has begun but not ended.
std::size_t resume_point(std::string_view text, std::span<const std::string_view> markers) {
  std::size_t longest = 0;
  for (std::string_view m : markers) longest = std::max(longest, m.size());
  return text.size() >= longest ? text.size() - longest + 1 : 0;
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

std::string_view harmony_field(std::string_view header, std::string_view key) {
  std::size_t p = header.find(key);
  if (p == npos) return {};
  std::string_view v = header.substr(p + key.size());
  std::size_t end = 0;
  while (end < v.size() && !is_ws(v[end]) && v[end] != '<') ++end;
  return v.substr(0, end);
}

}  // namespace

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
    case ToolCallFormat::kKimiK2: return "kimi_k2";
    case ToolCallFormat::kMiniMax: return "minimax";
    case ToolCallFormat::kCommandR: return "command_r";
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
  if (has(kKimiSectionBegin)) return ToolCallFormat::kKimiK2;
  if (has(kCohereAction)) return ToolCallFormat::kCommandR;
  if (has(kMiniMaxCalls) && has("\"arguments\"")) return ToolCallFormat::kMiniMax;
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
    case ToolCallFormat::kKimiK2: m.insert(m.end(), {kKimiSectionBegin, kImEnd}); break;
    case ToolCallFormat::kMiniMax: m.insert(m.end(), {kMiniMaxCalls, kMiniMaxEos}); break;
    case ToolCallFormat::kCommandR:
      m.insert(m.end(), {kCohereThink, kCohereAction, kCohereResponse, kCohereResponseEnd, kCohereEndOfTurn});
      break;
  }
  reasoning_markers_ = {format_ == ToolCallFormat::kMistral    ? kMistralThinkEnd
                        : format_ == ToolCallFormat::kCommandR ? kCohereThinkEnd
                                                               : kThinkEnd};
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
  body_scan_ = {};
  body_scan_ended_ = false;
  section_scan_ = {};
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
  body_scan_ = {};
  body_scan_ended_ = false;
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
    if (i == buf_.size() && after_call_) {          // separators after the last call
      buf_.clear();
      return false;
    }
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
  } else if (marker == kThink || (mistral && marker == kMistralThink) || marker == kCohereThink) {
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
  } else if (marker == kKimiSectionBegin) {
    begin_call(CallKind::kKimi, std::string(marker));
  } else if (marker == kMiniMaxCalls) {
    begin_call(CallKind::kMiniMax, std::string(marker));
  } else if (marker == kCohereAction) {
    begin_call(CallKind::kCohere, std::string(marker));
  }
  // Otherwise an end-of-turn token or a stray </think>: dropped.
  return true;
}

bool ToolCallParser::in_json_string_at(std::size_t end) {
  if (!body_scan_ended_) body_scan_ended_ = body_scan_.scan(std::string_view(buf_).substr(0, end));
  return !body_scan_ended_ && !body_scan_.bad && body_scan_.open == '{' && body_scan_.in_string;
}

bool ToolCallParser::step_call(bool final, Delta& out) {
  std::vector<ToolCallDelta> calls;
  // A call must end within kMaxCallBytes of its start; past that it is given
  // up and those bytes become content. Every decision here depends only on the
  // text, never on how it was split into pushes.
  auto give_up = [&] {
    end_call(std::min(buf_.size(), kMaxCallBytes), false, {}, out);
    return true;
  };
  // Ends the call at the first of `ends`; parse(body) decides. With
  // json_aware, an end inside a JSON string of the body is skipped (a body
  // of one JSON object; a section of several calls: section_scan_).
  const bool section = call_kind_ == CallKind::kDeepSeek || call_kind_ == CallKind::kKimi ||
                       call_kind_ == CallKind::kMiniMax;
  auto until_any = [&](std::span<const std::string_view> ends, auto&& parse, bool json_aware) -> bool {
    while (true) {
      Found f = find_first(buf_, ends, scan_from_);
      if (f.pos != npos && f.pos + ends[f.which].size() > kMaxCallBytes) f.pos = npos;
      if (f.pos == npos) {
        if (buf_.size() >= kMaxCallBytes) return give_up();
        if (!final) {
          scan_from_ = resume_point(buf_, ends);
          return false;
        }
        bool ok = parse(strip_end_tokens(buf_));
        end_call(buf_.size(), ok, std::move(calls), out);
        return true;
      }
      if (json_aware && (section ? section_scan_.in_string_at(buf_, f.pos)
                                 : in_json_string_at(f.pos))) {  // the end is text inside the JSON
        scan_from_ = f.pos + 1;
        continue;
      }
      bool ok = parse(std::string_view(buf_).substr(0, f.pos));
      end_call(f.pos + ends[f.which].size(), ok, std::move(calls), out);
      return true;
    }
  };
  auto until = [&](std::string_view closer, auto&& parse) {
    return until_any(std::span<const std::string_view>(&closer, 1), parse, /*json_aware=*/true);
  };
  // Scans the JSON value at buf_[base..): 1 when it ended (at base + json_.pos),
  // 0 when more text is needed, -1 when the call was ended as content.
  auto scan_json = [&](std::size_t base) -> int {
    if (json_.scan(std::string_view(buf_).substr(base, kMaxCallBytes - std::min(base, kMaxCallBytes)))) return 1;
    if (json_.bad) {  // not JSON, or nested too deep: content up to the offending byte
      end_call(base + json_.pos, false, {}, out);
      return -1;
    }
    if (buf_.size() >= kMaxCallBytes) {
      give_up();
      return -1;
    }
    if (!final) return 0;
    end_call(buf_.size(), false, {}, out);
    return -1;
  };
  auto one = [&](const Call& c) {
    add_call(c.name, c.arguments, c.id, calls);
    return true;
  };
  auto all = [&](const std::vector<Call>& cs) {
    for (const auto& c : cs) one(c);
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
        return parse_deepseek_calls(body, cs) && all(cs);
      });
    case CallKind::kKimi:
      return until(kKimiSectionEnd, [&](std::string_view body) {
        std::vector<Call> cs;
        return parse_kimi_calls(body, cs) && all(cs);
      });
    case CallKind::kMiniMax:
      return until(kMiniMaxCallsEnd, [&](std::string_view body) {
        std::vector<Call> cs;
        return parse_json_call_lines(body, cs) && all(cs);
      });
    case CallKind::kCohere:
      return until(kCohereActionEnd, [&](std::string_view body) {
        ojson j;
        if (!parse_json(trim(body), j) || !j.is_array() || j.empty()) return false;
        std::vector<Call> cs;
        for (const auto& item : j) {
          Call c;
          if (!call_from_object(item, /*require_args=*/false, c)) return false;
          c.id.clear();  // its "tool_call_id" counts from 0 per turn: not unique
          cs.push_back(std::move(c));
        }
        return all(cs);
      });
    case CallKind::kHarmony: {
      static constexpr std::array<std::string_view, 3> kEnds = {kHCall, kHEnd, kHReturn};
      return until_any(
          kEnds,
          [&](std::string_view body) {
            Call c;
            c.name = harmony_recipient_;
            if (starts_with(c.name, "functions.")) c.name.erase(0, 10);
            return !c.name.empty() && parse_arguments(body, c.arguments) && one(c);
          },
          /*json_aware=*/true);
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
      return until_any(
          kEnds,
          [&](std::string_view body) {
            Call c;
            if (parse_builtin_call(body, c)) return one(c);
            body = trim(body);
            if (body.empty()) return false;
            c.name = "python";  // code_interpreter: the code itself
            c.arguments = dump(ojson{{"code", std::string(body)}});
            return one(c);
          },
          /*json_aware=*/false);
    }
    case CallKind::kJson: {
      // Llama 3 JSON (bare, or after <|python_tag|>: then arguments may be absent).
      int r = scan_json(0);
      if (r <= 0) return r < 0;
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
        int r = scan_json(0);
        if (r <= 0) return r < 0;
        ojson j;
        bool ok = parse_json(std::string_view(buf_).substr(0, json_.pos), j) && j.is_array() && !j.empty();
        std::vector<Call> cs;
        for (std::size_t k = 0; ok && k < j.size(); ++k) {
          Call c;
          ok = call_from_object(j[k], /*require_args=*/false, c);
          cs.push_back(std::move(c));
        }
        if (ok) all(cs);
        end_call(json_.pos, ok, std::move(calls), out);
        return true;
      }
      // [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}: [ARGS] within kMaxHeaderBytes.
      if (json_.base == 0) {
        std::size_t a = buf_.find(kMistralArgs);
        if (a != npos && a > kMaxHeaderBytes) a = npos;
        if (a == npos) {
          if (buf_.size() >= kMaxHeaderBytes + kMistralArgs.size()) {
            end_call(kMaxHeaderBytes, false, {}, out);
            return true;
          }
          if (!final) return false;
          end_call(buf_.size(), false, {}, out);
          return true;
        }
        json_.base = a + kMistralArgs.size();
      }
      int r = scan_json(json_.base);
      if (r <= 0) return r < 0;
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
  // A header opens with one of these (the prompt ended with <|start|>assistant);
  // anything else is plain text, content up to the next message boundary.
  static constexpr std::array<std::string_view, 4> kOpeners = {kHStart, kHChannel, " to=", "assistant"};
  bool plausible = false;
  for (std::string_view o : kOpeners) {
    std::size_t n = std::min(o.size(), buf_.size());
    if (std::string_view(buf_).substr(0, n) == o.substr(0, n)) plausible = true;
  }
  std::size_t m = plausible ? buf_.find(kHMessage) : npos;
  if (m != npos && m > kMaxHeaderBytes) m = npos;  // a header is at most that long
  if (m == npos) {
    if (plausible && !final && buf_.size() < kMaxHeaderBytes + kHMessage.size()) return false;
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
