// libFuzzer target: the tool-call parser (model/chat_template/tool_calls.h) on
// arbitrary model output. The first byte picks the format, the second the
// options and the split; the rest is the text. The text is parsed whole and
// pushed in pieces, and the two must agree; tool_calls() must serialize and
// every call's arguments must be a JSON object. Seeds: the texts of
// tests/tool_calls/data/rendered.json (one file each, after the two bytes).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/chat_template/tool_calls.h"

namespace {

using strata::chat_template::ToolCallFormat;
using strata::chat_template::ToolCallParser;

struct Result {
  std::string content, reasoning, calls;
};

void take(Result& r, const ToolCallParser::Delta& d) {
  r.content += d.content;
  r.reasoning += d.reasoning_content;
  for (const auto& c : d.tool_calls) {
    r.calls += std::to_string(c.index) + c.id + '\0' + c.name + '\0' + c.arguments + '\0';
    auto args = nlohmann::json::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
    if (!args.is_object()) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  auto format = static_cast<ToolCallFormat>(data[0] % 11);
  ToolCallParser::Options options;
  options.think_tags = (data[1] & 1) != 0;
  options.starts_in_reasoning = (data[1] & 2) != 0;
  options.id_seed = 1;
  std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);

  Result whole;
  ToolCallParser a(format, options);
  take(whole, a.push(text));
  take(whole, a.finish());
  (void)a.tool_calls().dump();

  Result split;
  ToolCallParser b(format, options);
  std::uint32_t state = data[1] * 2654435761u + 1;
  for (std::size_t i = 0; i < text.size();) {
    state = state * 1103515245u + 12345u;
    std::size_t n = 1 + (state >> 16) % ((data[1] >> 2) + 1);
    take(split, b.push(text.substr(i, n)));
    i += n;
  }
  take(split, b.finish());
  if (whole.content != split.content || whole.reasoning != split.reasoning || whole.calls != split.calls) {
    __builtin_trap();
  }
  return 0;
}
