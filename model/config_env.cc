#include "model/config_env.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strata::config {
namespace {

bool name_start(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

absl::Status expand_node(YAML::Node node, const EnvLookup& env,
                         const std::string& path) {
  if (node.IsScalar()) {
    const std::string text = node.Scalar();
    if (text.find('$') == std::string::npos) return absl::OkStatus();
    absl::StatusOr<std::string> expanded = expand_env(text, env, path);
    if (!expanded.ok()) return expanded.status();
    node = *expanded;
    return absl::OkStatus();
  }
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      if (absl::Status s =
              expand_node(node[i], env, absl::StrCat(path, "[", i, "]"));
          !s.ok())
        return s;
    }
    return absl::OkStatus();
  }
  if (node.IsMap()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string key =
          it->first.IsScalar() ? it->first.Scalar() : std::string("?");
      if (absl::Status s =
              expand_node(it->second, env,
                          path.empty() ? key : absl::StrCat(path, ".", key));
          !s.ok())
        return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

EnvLookup process_env() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

absl::StatusOr<std::string> expand_env(std::string_view text,
                                       const EnvLookup& env,
                                       std::string_view where) {
  std::string out;
  out.reserve(text.size());
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(where), ": \"",
                                                   std::string(text), "\" ",
                                                   std::string(why)));
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c != '$' || i + 1 >= text.size()) {
      out += c;
      continue;
    }
    if (text[i + 1] == '$') {  // "$$": one "$"
      out += '$';
      ++i;
      continue;
    }
    if (text[i + 1] != '{') {  // "$5", "$x": as it is
      out += c;
      continue;
    }
    const size_t close = text.find('}', i + 2);
    if (close == std::string_view::npos) return bad("has an unclosed ${");
    const std::string_view body = text.substr(i + 2, close - i - 2);
    size_t n = 0;
    while (n < body.size() && name_char(body[n])) ++n;
    if (n == 0 || !name_start(body[0])) {
      return bad(absl::StrCat("has ${", std::string(body),
                              "}: expected ${NAME} or ${NAME:-default}"));
    }
    const std::string_view name = body.substr(0, n);
    std::optional<std::string> value = env(name);
    if (n == body.size()) {
      if (!value) {
        return absl::InvalidArgumentError(absl::StrCat(
            std::string(where), ": ${", std::string(name), "} is not set"));
      }
      out += *value;
    } else if (body.substr(n, 2) == ":-") {
      out +=
          value && !value->empty() ? *value : std::string(body.substr(n + 2));
    } else {
      return bad(absl::StrCat("has ${", std::string(body),
                              "}: expected ${NAME} or ${NAME:-default}"));
    }
    i = close;
  }
  return out;
}

absl::Status expand_env_in_yaml(YAML::Node& root, const EnvLookup& env) {
  try {
    return expand_node(root, env, "");
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("expanding ${...}: ", e.what()));
  }
}

}  // namespace strata::config
