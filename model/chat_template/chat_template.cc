#include "model/chat_template/chat_template.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace strata::chat_template {
namespace {

constexpr std::string_view kAlternate =
    "Conversation roles must alternate user/assistant/user/assistant/...";

bool contains(std::string_view text, std::string_view needle) {
  return text.find(needle) != std::string_view::npos;
}

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

absl::Status raised(std::string_view message) {
  return absl::FailedPreconditionError(std::string(message));
}

// The ChatML template's default system text: what follows
// "<|im_start|>system\n" (a real newline or the escape `\n`) up to
// "<|im_end|>", when that is plain text.
bool find_default_system(std::string_view text, std::string& out) {
  for (std::string_view head :
       {std::string_view("<|im_start|>system\n"),
        std::string_view("<|im_start|>system\\n")}) {
    const size_t at = text.find(head);
    if (at == std::string_view::npos) continue;
    const size_t begin = at + head.size();
    const size_t end = text.find("<|im_end|>", begin);
    if (end == std::string_view::npos) return false;
    const std::string_view body = text.substr(begin, end - begin);
    if (body.find_first_of("'\"{}\\") != std::string_view::npos) return false;
    out = std::string(body);
    return true;
  }
  return false;
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

std::string_view family_name(Family family) {
  switch (family) {
    case Family::kChatMl:
      return "chatml";
    case Family::kGemma:
      return "gemma";
    case Family::kLlama3:
      return "llama3";
    case Family::kMistral:
      return "mistral";
    case Family::kPhi3:
      return "phi3";
  }
  return "unknown";
}

absl::StatusOr<ChatTemplate> ChatTemplate::parse(std::string_view text) {
  ChatTemplate t;
  if (contains(text, "<start_of_turn>") && contains(text, "<end_of_turn>")) {
    t.family_ = Family::kGemma;
    t.gemma_system_prefix_ = contains(text, "first_user_prefix");
    if (!t.gemma_system_prefix_ &&
        !contains(text, "System role not supported")) {
      return absl::InvalidArgumentError(
          "unrecognised Gemma chat template (neither the Gemma 2 nor the "
          "Gemma 3 template)");
    }
    return t;
  }
  if (contains(text, "<|start_header_id|>") && contains(text, "<|eot_id|>")) {
    if (contains(text, "Cutting Knowledge") || contains(text, "tools")) {
      return absl::InvalidArgumentError(
          "unsupported chat template: Llama 3.1+ (tools, dates); only the "
          "Llama 3 template is rendered");
    }
    t.family_ = Family::kLlama3;
    return t;
  }
  if (contains(text, "<|im_start|>") && contains(text, "<|im_end|>")) {
    if (contains(text, "tools") || contains(text, "<think>")) {
      return absl::InvalidArgumentError(
          "unsupported chat template: ChatML with tools or reasoning "
          "(Qwen2.5/Qwen3 style); only plain ChatML is rendered");
    }
    t.family_ = Family::kChatMl;
    if (contains(text, "messages[0]['role'] != 'system'")) {
      if (!find_default_system(text, t.default_system_)) {
        return absl::InvalidArgumentError(
            "unrecognised ChatML chat template: a default system message "
            "that is not plain text");
      }
      t.has_default_system_ = true;
    }
    return t;
  }
  if (contains(text, "[INST]") && contains(text, "[/INST]")) {
    if (contains(text, "<<SYS>>") || contains(text, "system_message")) {
      return absl::InvalidArgumentError(
          "unsupported chat template: [INST] with a system prompt (Llama 2 "
          "style); only the Mistral Instruct template is rendered");
    }
    t.family_ = Family::kMistral;
    t.mistral_space_after_eos_ = contains(text, "eos_token + ' '");
    return t;
  }
  if (contains(text, "<|user|>") && contains(text, "<|assistant|>") &&
      contains(text, "<|end|>")) {
    t.family_ = Family::kPhi3;
    return t;
  }
  return absl::InvalidArgumentError(
      "unknown chat template: not one of the known families (ChatML, Gemma, "
      "Llama 3, Mistral, Phi-3)");
}

absl::StatusOr<std::string> ChatTemplate::render(
    std::span<const Message> messages, const RenderOptions& options) const {
  switch (family_) {
    case Family::kChatMl:
      return render_chatml(messages, options);
    case Family::kGemma:
      return render_gemma(messages, options);
    case Family::kLlama3:
      return render_llama3(messages, options);
    case Family::kMistral:
      return render_mistral(messages, options);
    case Family::kPhi3:
      return render_phi3(messages, options);
  }
  return absl::InternalError("bad chat template family");
}

absl::StatusOr<std::string> ChatTemplate::render_chatml(
    std::span<const Message> messages, const RenderOptions& options) const {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0 && has_default_system_ && messages[0].role != "system") {
      out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
    }
    out += "<|im_start|>" + messages[i].role + "\n" + messages[i].content +
           "<|im_end|>\n";
  }
  if (options.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

absl::StatusOr<std::string> ChatTemplate::render_gemma(
    std::span<const Message> messages, const RenderOptions& options) const {
  if (messages.empty()) {
    return absl::InvalidArgumentError("the Gemma template needs a message");
  }
  std::string out = options.bos_token;
  std::string first_user_prefix;
  std::span<const Message> loop = messages;
  if (messages[0].role == "system") {
    if (!gemma_system_prefix_) return raised("System role not supported");
    first_user_prefix = messages[0].content + "\n\n";
    loop = messages.subspan(1);
  }
  for (size_t i = 0; i < loop.size(); ++i) {
    if ((loop[i].role == "user") != (i % 2 == 0)) return raised(kAlternate);
    const std::string role =
        loop[i].role == "assistant" ? std::string("model") : loop[i].role;
    out += "<start_of_turn>" + role + "\n";
    if (i == 0) out += first_user_prefix;
    out += python_strip(loop[i].content) + "<end_of_turn>\n";
  }
  if (options.add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

absl::StatusOr<std::string> ChatTemplate::render_llama3(
    std::span<const Message> messages, const RenderOptions& options) const {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0) out += options.bos_token;
    out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" +
           python_strip(messages[i].content) + "<|eot_id|>";
  }
  if (options.add_generation_prompt) {
    out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  }
  return out;
}

absl::StatusOr<std::string> ChatTemplate::render_mistral(
    std::span<const Message> messages, const RenderOptions& options) const {
  std::string out = options.bos_token;
  for (size_t i = 0; i < messages.size(); ++i) {
    if ((messages[i].role == "user") != (i % 2 == 0)) return raised(kAlternate);
    if (messages[i].role == "user") {
      out += "[INST] " + messages[i].content + " [/INST]";
    } else if (messages[i].role == "assistant") {
      out += messages[i].content + options.eos_token;
      if (mistral_space_after_eos_) out += " ";
    } else {
      return raised("Only user and assistant roles are supported!");
    }
  }
  return out;
}

absl::StatusOr<std::string> ChatTemplate::render_phi3(
    std::span<const Message> messages, const RenderOptions& options) const {
  std::string out;
  for (const Message& m : messages) {
    // Other roles are left out, as the template does.
    if (m.role == "system" || m.role == "user" || m.role == "assistant") {
      out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
    }
  }
  out += options.add_generation_prompt ? std::string("<|assistant|>\n")
                                       : options.eos_token;
  return out;
}

}  // namespace strata::chat_template
