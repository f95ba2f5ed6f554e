#include "worker/worker_config.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/placement.h"
#include "worker/cuda/cuda_backend.h"
#include "yaml-cpp/yaml.h"

namespace strata::worker {

namespace {


// "key: MESSAGE" errors from a YAML node, with the line of the value.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  absl::Status error(const std::string& key, const YAML::Node& node,
                     absl::string_view what) const {
    const YAML::Mark mark = node.Mark();
    std::string where = source_;
    if (!mark.is_null()) where = absl::StrCat(where, ":", mark.line + 1);
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", key, ": ", what));
  }

  absl::Status scalar(const std::string& key, const YAML::Node& node,
                      std::string* out) const {
    if (!node.IsScalar()) return error(key, node, "expected a single value");
    *out = node.Scalar();
    return absl::OkStatus();
  }

  absl::Status integer(const std::string& key, const YAML::Node& node,
                       int64_t* out) const {
    std::string text;
    if (absl::Status st = scalar(key, node, &text); !st.ok()) return st;
    if (!absl::SimpleAtoi(text, out)) {
      return error(key, node, absl::StrCat("\"", text, "\" is not an integer"));
    }
    return absl::OkStatus();
  }

  absl::Status size(const std::string& key, const YAML::Node& node,
                    uint64_t* out) const {
    std::string text;
    if (absl::Status st = scalar(key, node, &text); !st.ok()) return st;
    absl::StatusOr<uint64_t> bytes = placement::parse_byte_size(text);
    if (!bytes.ok()) return error(key, node, bytes.status().message());
    *out = *bytes;
    return absl::OkStatus();
  }

 private:
  std::string source_;
};

}  // namespace

absl::StatusOr<int> parse_thread_count(std::string_view text_view) {
  const absl::string_view text =
      absl::StripAsciiWhitespace(absl::string_view(text_view.data(), text_view.size()));
  if (text == "auto") return 0;
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text,
        "\" is not a thread count (an integer in [1, 1024], a CPU quantity "
        "such as 3500m or 1.5, or auto)"));
  };
  int64_t n = 0;
  double cpus = 0;
  if (absl::SimpleAtoi(text, &n)) {
    if (n < 1 || n > 1024) {
      return absl::InvalidArgumentError(
          absl::StrCat(n, " is out of range [1, 1024]"));
    }
    return static_cast<int>(n);
  }
  // Kubernetes CPU quantities: "3500m" (millicores), "1.5" (cores): the
  // whole CPUs they give, at least one.
  if (absl::EndsWith(text, "m")) {
    if (!absl::SimpleAtoi(text.substr(0, text.size() - 1), &n) || n < 1) return bad();
    cpus = static_cast<double>(n) / 1000.0;
  } else if (text.find_first_not_of("0123456789.") == absl::string_view::npos &&
             absl::SimpleAtod(text, &cpus) && cpus > 0) {
  } else {
    return bad();
  }
  if (!(cpus <= 1024)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is more than 1024 CPUs"));
  }
  return std::max(1, static_cast<int>(cpus));
}

std::string expand_home(std::string_view path) {
  if (path == "~" || path.substr(0, 2) == "~/") {
    const char* home = std::getenv("HOME");
    if (home != nullptr) return std::string(home) + std::string(path.substr(1));
  }
  return std::string(path);
}

absl::StatusOr<WorkerConfig> parse_worker_config(std::string_view yaml,
                                                 std::string_view source) {
  return parse_worker_config(yaml, source, config::process_env());
}

absl::StatusOr<WorkerConfig> parse_worker_config(std::string_view yaml,
                                                 std::string_view source_view,
                                                 const config::EnvLookup& env) {
  const std::string source(source_view);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ":", e.mark.line + 1, ": not valid YAML: ", e.msg));
  }
  WorkerConfig c;
  if (root.IsNull()) return c;  // an empty file: defaults
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected a map of keys (listen: ..., ...)"));
  }
  if (absl::Status st = config::expand_env_in_yaml(root, env); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", st.message()));
  }
  Reader r(source);
  std::set<std::string> seen;
  try {
    for (const auto& item : root) {
      const std::string key = item.first.as<std::string>();
      const YAML::Node& v = item.second;
      // YAML maps keep a repeated key; the last would silently win.
      if (!seen.insert(key).second) return r.error(key, item.first, "given twice");
      absl::Status st;
      int64_t n = 0;
      if (key == "listen") {
        st = r.scalar(key, v, &c.listen);
      } else if (key == "backend") {
        st = r.scalar(key, v, &c.backend);
      } else if (key == "threads") {
        std::string text;
        st = r.scalar(key, v, &text);
        if (st.ok()) {
          absl::StatusOr<int> t = parse_thread_count(text);
          if (t.ok()) {
            c.threads = *t;
          } else {
            st = r.error(key, v, t.status().message());
          }
        }
      } else if (key == "memory_budget") {
        st = r.size(key, v, &c.memory_budget_bytes);
      } else if (key == "model_dirs") {
        c.model_dirs.clear();
        if (v.IsScalar()) {
          c.model_dirs.push_back(expand_home(v.Scalar()));
        } else if (v.IsSequence()) {
          for (const YAML::Node& d : v) {
            std::string dir;
            st = r.scalar(key, d, &dir);
            if (!st.ok()) break;
            c.model_dirs.push_back(expand_home(dir));
          }
        } else {
          st = r.error(key, v, "expected a list of directories");
        }
      } else if (key == "name") {
        st = r.scalar(key, v, &c.name);
      } else if (key == "max_message_bytes") {
        uint64_t bytes = 0;
        st = r.size(key, v, &bytes);
        if (st.ok() &&
            (bytes < (uint64_t{1} << 20) || bytes > (uint64_t{1} << 31) - 1)) {
          st = r.error(key, v,
                       absl::StrCat(bytes, " is out of range [1MiB, 2GiB)"));
        }
        c.max_message_bytes = static_cast<int64_t>(bytes);
      } else if (key == "answer_timeout_ms") {
        st = r.integer(key, v, &n);
        if (st.ok() && (n < 100 || n > 3600000)) {
          st = r.error(key, v,
                       absl::StrCat(n, " is out of range [100, 3600000]"));
        }
        c.answer_timeout_ms = static_cast<int>(n);
      } else if (grpc_tls::is_tls_key(key)) {
        st = grpc_tls::parse_tls_key(key, v, source, &c.tls);
      } else {
        st = r.error(key, item.first,
                     "unknown key (known: listen, backend, threads, "
                     "memory_budget, model_dirs, name, max_message_bytes, "
                     "answer_timeout_ms, tls, insecure)");
      }
      if (!st.ok()) return st;
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.mark.line + 1, ": ", e.msg));
  }
  return c;
}

absl::StatusOr<WorkerConfig> load_worker_config(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {  // ifstream opens one, reading nothing
    return absl::InvalidArgumentError(absl::StrCat(path, ": a directory, not a config file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().size() > (1u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": over 1 MiB; not a worker config"));
  }
  return parse_worker_config(text.str(), path);
}

absl::Status validate(const WorkerConfig& c) {
  auto bad = [](absl::string_view key, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": ", what));
  };
  const size_t colon = c.listen.rfind(':');
  int port = -1;
  if (c.listen.empty() || colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(c.listen).substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return bad("listen", absl::StrCat("\"", c.listen,
                                      "\" is not host:port (port 0: any)"));
  }
  if (c.backend != "fake" && !parse_backend_choice(c.backend).ok()) {
    return bad("backend", absl::StrCat("\"", c.backend,
                                       "\" is not supported (\"cpu\", \"cuda\" or \"cuda:N\" "
                                       "with N a device ordinal, or \"fake\" to measure the "
                                       "pipeline without a model's work)"));
  }
  if (c.threads < 0 || c.threads > 1024) {
    return bad("threads",
               absl::StrCat(c.threads, " is out of range [1, 1024] (0: auto)"));
  }
  if (c.memory_budget_bytes == 0) return bad("memory_budget", "zero");
  if (c.model_dirs.empty()) {
    return bad("model_dirs",
               "none given (the worker loads models only from "
               "these directories)");
  }
  for (const std::string& d : c.model_dirs) {
    if (d.empty()) return bad("model_dirs", "an empty directory");
  }
  if (c.name.size() > 256) return bad("name", "over 256 bytes");
  if (c.max_message_bytes < (int64_t{1} << 20) ||
      c.max_message_bytes > (int64_t{1} << 31) - 1) {
    return bad(
        "max_message_bytes",
        absl::StrCat(c.max_message_bytes, " is out of range [1MiB, 2GiB)"));
  }
  if (c.answer_timeout_ms < 100 || c.answer_timeout_ms > 3600000) {
    return bad(
        "answer_timeout_ms",
        absl::StrCat(c.answer_timeout_ms, " is out of range [100, 3600000]"));
  }
  return absl::OkStatus();
}

}  // namespace strata::worker
