#include "model/config_env.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strata::config {
namespace {

bool name_start(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

// The walk over a document's values. yaml-cpp gives an alias its anchor's
// node (the same node, not a copy), so a document may hold one node in many
// places ("workers: [*w, *w]") or inside itself ("a: &x {b: *x}"). Each
// node the parser made is expanded once, known by where it starts in the
// text (its mark) and its type, and a walk deeper than kMaxDepth is
// refused. Without that a 33-byte config recursed until the stack
// overflowed (the cluster_config fuzzer's find), a chain of aliases each
// naming the one before twice took time exponential in its length, and a
// value seen twice was expanded twice (a variable's "$$" halved).
class Expander {
 public:
  static constexpr int kMaxDepth = 64;  // configs nest 4 or 5 deep

  explicit Expander(const EnvLookup& env) : env_(env) {}

  absl::Status expand(YAML::Node node, const std::string& path, int depth) {
    if (depth > kMaxDepth) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": nested deeper than ", kMaxDepth, " levels"));
    }
    const YAML::Mark mark = node.Mark();
    if (mark.pos >= 0 &&  // parsed (a node made in code has no mark)
        !seen_.emplace(mark.pos, static_cast<int>(node.Type())).second) {
      return absl::OkStatus();
    }
    if (node.IsScalar()) {
      const std::string text = node.Scalar();
      if (text.find('$') == std::string::npos) return absl::OkStatus();
      absl::StatusOr<std::string> expanded = expand_env(text, env_, path);
      if (!expanded.ok()) return expanded.status();
      node = *expanded;
      return absl::OkStatus();
    }
    if (node.IsSequence()) {
      for (size_t i = 0; i < node.size(); ++i) {
        if (absl::Status s =
                expand(node[i], absl::StrCat(path, "[", i, "]"), depth + 1);
            !s.ok())
          return s;
      }
      return absl::OkStatus();
    }
    if (node.IsMap()) {
      for (auto it = node.begin(); it != node.end(); ++it) {
        const std::string key =
            it->first.IsScalar() ? it->first.Scalar() : std::string("?");
        if (absl::Status s = expand(
                it->second, path.empty() ? key : absl::StrCat(path, ".", key),
                depth + 1);
            !s.ok())
          return s;
      }
    }
    return absl::OkStatus();
  }

 private:
  const EnvLookup& env_;
  std::set<std::pair<int, int>> seen_;  // (mark.pos, type) of nodes walked
};

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
    return Expander(env).expand(root, "", 0);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("expanding ${...}: ", e.what()));
  }
}

}  // namespace strata::config
