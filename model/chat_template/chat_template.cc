// Chat templates rendered by the Jinja interpreter (model/jinja), with the
// variables transformers' apply_chat_template passes.
#include "model/chat_template/chat_template.h"

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strata::chat_template {

namespace {

// Whether code point `c` is whitespace to Python's str.isspace().
bool is_python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 ||
         c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Decodes the UTF-8 character starting at `pos`; its length in `len`, or
// 0 for bytes that are not a well-formed character (never whitespace then).
uint32_t decode_at(std::string_view s, size_t pos, size_t& len) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  size_t n = 0;
  uint32_t c = 0;
  if (b0 < 0x80) {
    len = 1;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    n = 2;
    c = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3;
    c = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4;
    c = b0 & 0x07;
  } else {
    len = 0;
    return 0;
  }
  if (pos + n > s.size()) {
    len = 0;
    return 0;
  }
  for (size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if ((b & 0xC0) != 0x80) {
      len = 0;
      return 0;
    }
    c = (c << 6) | (b & 0x3F);
  }
  len = n;
  return c;
}

// Length of the whitespace character ending at `end` (exclusive), or 0.
size_t space_before(std::string_view s, size_t end) {
  for (size_t n = 1; n <= 4 && n <= end; ++n) {
    const auto b = static_cast<unsigned char>(s[end - n]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t len = 0;
    const uint32_t c = decode_at(s, end - n, len);
    return (len == n && is_python_space(c)) ? n : 0;
  }
  return 0;
}

}  // namespace

std::string python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t len = 0;
    const uint32_t c = decode_at(text, begin, len);
    if (len == 0 || !is_python_space(c)) break;
    begin += len;
  }
  size_t end = text.size();
  while (end > begin) {
    const size_t n = space_before(text, end);
    if (n == 0) break;
    end -= n;
  }
  return std::string(text.substr(begin, end - begin));
}


absl::StatusOr<ChatTemplate> ChatTemplate::parse(std::string_view text) {
  auto t = jinja::Template::parse(text);
  if (!t.ok()) return t.status();
  ChatTemplate out;
  out.template_ = std::make_shared<const jinja::Template>(*std::move(t));
  return out;
}

absl::StatusOr<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                                 const nlohmann::ordered_json& tools,
                                                 const nlohmann::ordered_json& extra,
                                                 const RenderOptions& options) const {
  if (!messages.is_array()) return absl::InvalidArgumentError("messages: expected an array");
  if (!tools.is_null() && !tools.is_array()) return absl::InvalidArgumentError("tools: expected an array");
  if (!extra.is_null() && !extra.is_object()) {
    return absl::InvalidArgumentError("chat_template_kwargs: expected an object");
  }
  // What apply_chat_template passes: the special tokens, then the caller's
  // kwargs (which may override them), with messages, tools, documents and
  // add_generation_prompt its own.
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["bos_token"] = options.bos_token;
  context["eos_token"] = options.eos_token;
  if (extra.is_object()) {
    for (const auto& [key, value] : extra.items()) {
      if (key == "messages" || key == "tools" || key == "add_generation_prompt") {
        return absl::InvalidArgumentError(
            absl::StrCat("chat_template_kwargs: '", key, "' is set by the request itself"));
      }
      context[key] = value;
    }
  }
  context["messages"] = messages;
  context["tools"] = tools.is_array() && tools.empty() ? nlohmann::ordered_json() : tools;
  if (!context.contains("documents")) context["documents"] = nullptr;
  context["add_generation_prompt"] = options.add_generation_prompt;
  jinja::RenderOptions render;
  render.now = options.now;
  return template_->render(context, render);
}

absl::StatusOr<std::string> ChatTemplate::render(std::span<const Message> messages,
                                                 const RenderOptions& options) const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Message& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  return render(list, nullptr, nlohmann::ordered_json::object(), options);
}

}  // namespace strata::chat_template
