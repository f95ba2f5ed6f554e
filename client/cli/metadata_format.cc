#include "client/cli/metadata_format.h"

#include <cstdio>
#include <type_traits>

namespace strata::cli {
namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace

nlohmann::ordered_json value_to_json(const gguf::Value& value) {
  return std::visit(
      [](const auto& v) -> nlohmann::ordered_json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, gguf::Array>) {
          nlohmann::ordered_json list = nlohmann::ordered_json::array();
          for (const gguf::Value& item : v.items) {
            list.push_back(value_to_json(item));
          }
          return list;
        } else {
          return v;
        }
      },
      value.data);
}

std::string value_to_text(const gguf::Value& value, size_t max_items) {
  return std::visit(
      [max_items](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, gguf::Array>) {
          std::string out = "[";
          size_t shown = std::min(max_items, v.items.size());
          for (size_t i = 0; i < shown; ++i) {
            if (i) out += ", ";
            out += value_to_text(v.items[i], max_items);
          }
          if (shown < v.items.size()) {
            out += std::string(shown > 0 ? ", " : "") + "... (" +
                   std::to_string(v.items.size() - shown) + " more)";
          }
          return out + "]";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return quote(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_floating_point_v<T>) {
          char buf[64];
          std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
          return buf;
        } else {
          return std::to_string(v);
        }
      },
      value.data);
}

std::string type_label(const gguf::Value& value) {
  std::string label(gguf::value_type_name(value.type));
  if (const auto* array = std::get_if<gguf::Array>(&value.data)) {
    label += "[" + std::string(gguf::value_type_name(array->element_type)) + "]";
  }
  return label;
}

}  // namespace strata::cli
