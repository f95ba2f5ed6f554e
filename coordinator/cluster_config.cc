#include "coordinator/cluster_config.h"

#include <algorithm>

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/numbers.h"
#include "worker/kv_cache.h"

namespace strata::coordinator {
namespace {

// "~/x" -> "$HOME/x".
std::string expand_home(const std::string& path) {
  const char* home = std::getenv("HOME");
  if (path.rfind("~/", 0) == 0 && home != nullptr) {
    return std::string(home) + path.substr(1);
  }
  return path;
}

absl::Status key_error(absl::string_view key, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(key, ": ", what));
}

absl::Status check_keys(const YAML::Node& map, absl::string_view where,
                        const std::set<std::string>& allowed) {
  std::set<std::string> seen;
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>();
    // YAML maps keep a repeated key: refused, not one of them picked.
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          where.empty() ? "" : absl::StrCat(where, "."), key, ": given twice (line ",
          kv.first.Mark().line + 1, ")"));
    }
    if (!allowed.count(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where.empty() ? "" : absl::StrCat(where, "."), key,
          ": unknown key; expected one of ",
          absl::StrJoin(allowed, ", ")));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> get_string(const YAML::Node& node,
                                       absl::string_view key) {
  if (!node.IsScalar()) return key_error(key, "expected a string");
  return node.as<std::string>();
}

absl::StatusOr<int> get_int(const YAML::Node& node, absl::string_view key,
                            int lo, int hi) {
  if (!node.IsScalar()) return key_error(key, "expected an integer");
  const std::string text = node.as<std::string>();
  long long v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size()) {
    return key_error(key, absl::StrCat("'", text, "' is not an integer"));
  }
  if (v < lo || v > hi) {
    return key_error(key, absl::StrCat(v, " is out of range [", lo, ", ", hi,
                                       "]"));
  }
  return static_cast<int>(v);
}

// `workers: {from: lws, ...}` / `{from: dns, ...}`: the list of workers it
// stands for, as the YAML list a config would give (each item then checked
// by parse_worker like a written one).
absl::StatusOr<YAML::Node> worker_group(const YAML::Node& node,
                                        const config::EnvLookup& env) {
  auto from = node["from"] ? get_string(node["from"], "workers.from")
                           : absl::StatusOr<std::string>(key_error(
                                 "workers.from", "missing (lws or dns)"));
  if (!from.ok()) return from.status();
  std::string name_pattern = "w{index}";
  if (node["name"]) {
    auto n = get_string(node["name"], "workers.name");
    if (!n.ok()) return n.status();
    if (n->find("{index}") == std::string::npos) {
      return key_error("workers.name",
                       absl::StrCat("\"", *n, "\" has no {index}: every worker "
                                    "would get the same name"));
    }
    name_pattern = *n;
  }
  std::string address_pattern;
  int first = 0, count = 0;
  if (*from == "lws") {
    if (absl::Status st = check_keys(node, "workers",
                                     {"from", "port", "name", "memory_budget"});
        !st.ok())
      return st;
    if (!node["port"]) return key_error("workers.port", "missing");
    auto port = get_int(node["port"], "workers.port", 1, 65535);
    if (!port.ok()) return port.status();
    // LeaderWorkerSet: the leader is <lws>-<group>.<service>.<namespace>;
    // worker i of its group is <lws>-<group>-<i>.<service>.<namespace>
    // (a StatefulSet's stable DNS names behind the headless service).
    const std::optional<std::string> leader = env("LWS_LEADER_ADDRESS");
    const std::optional<std::string> size_text = env("LWS_GROUP_SIZE");
    if (!leader || leader->empty()) {
      return key_error("workers.from",
                       "lws: LWS_LEADER_ADDRESS is not set (the "
                       "LeaderWorkerSet controller sets it in every pod)");
    }
    const size_t dot = leader->find('.');
    const std::string host = leader->substr(0, dot);
    const bool all_digits =
        leader->find_first_not_of("0123456789.") == std::string::npos;
    if (dot == std::string::npos || dot == 0 || all_digits ||
        leader->find(':') != std::string::npos) {
      return key_error(
          "workers.from",
          absl::StrCat("lws: LWS_LEADER_ADDRESS \"", *leader,
                       "\" is not a DNS name <lws>-<group>.<service>.<namespace>"));
    }
    int size = 0;
    if (!size_text || !absl::SimpleAtoi(*size_text, &size) || size < 2 ||
        size > 257) {
      return key_error(
          "workers.from",
          absl::StrCat("lws: LWS_GROUP_SIZE \"", size_text.value_or(""),
                       "\" is not a group size in [2, 257] (a leader and 1 to "
                       "256 workers)"));
    }
    address_pattern =
        absl::StrCat(host, "-{index}", leader->substr(dot), ":", *port);
    first = 1;
    count = size - 1;
  } else if (*from == "dns") {
    if (absl::Status st = check_keys(
            node, "workers",
            {"from", "address", "count", "first", "name", "memory_budget"});
        !st.ok())
      return st;
    if (!node["address"]) return key_error("workers.address", "missing");
    auto a = get_string(node["address"], "workers.address");
    if (!a.ok()) return a.status();
    if (a->find("{index}") == std::string::npos) {
      return key_error("workers.address",
                       absl::StrCat("\"", *a,
                                    "\" has no {index} (e.g. "
                                    "strata-worker-{index}.strata:50061)"));
    }
    address_pattern = *a;
    if (!node["count"]) return key_error("workers.count", "missing");
    auto n = get_int(node["count"], "workers.count", 1, 256);
    if (!n.ok()) return n.status();
    count = *n;
    if (node["first"]) {
      auto f = get_int(node["first"], "workers.first", 0, 1000000);
      if (!f.ok()) return f.status();
      first = *f;
    }
  } else {
    return key_error("workers.from",
                     absl::StrCat("\"", *from, "\" is not lws or dns"));
  }
  YAML::Node list(YAML::NodeType::Sequence);
  for (int i = first; i < first + count; ++i) {
    const std::string index = std::to_string(i);
    YAML::Node w(YAML::NodeType::Map);
    w["address"] = absl::StrReplaceAll(address_pattern, {{"{index}", index}});
    w["name"] = absl::StrReplaceAll(name_pattern, {{"{index}", index}});
    if (node["memory_budget"]) w["memory_budget"] = node["memory_budget"];
    list.push_back(w);
  }
  return list;
}

absl::StatusOr<WorkerConfig> parse_worker(const YAML::Node& node,
                                          const std::string& where, bool spare) {
  if (!node.IsMap()) {
    return key_error(where, "expected a map with `address`");
  }
  if (absl::Status st = check_keys(node, where,
                                   {"address", "name", "memory_budget",
                                    "blocks", "declared", "read_bandwidth",
                                    "flop_rate", "threads"});
      !st.ok()) {
    return st;
  }
  WorkerConfig w;
  if (node["declared"]) {
    if (!node["declared"].IsScalar()) return key_error(where + ".declared", "expected true or false");
    const std::string text = node["declared"].as<std::string>();
    if (text == "true") {
      w.declared = true;
    } else if (text != "false") {
      return key_error(where + ".declared", absl::StrCat("'", text, "' is not true or false"));
    }
    if (w.declared && spare) {
      return key_error(where + ".declared", "a spare must be a running worker");
    }
  }
  if (node["address"]) {
    auto address = get_string(node["address"], where + ".address");
    if (!address.ok()) return address.status();
    if (absl::Status st = check_address(*address); !st.ok()) {
      return key_error(where + ".address", st.message());
    }
    w.address = *address;
  } else if (!w.declared) {
    return key_error(where + ".address",
                     "missing (or `declared: true` for a machine not yet running)");
  }
  w.name = w.address;
  if (node["name"]) {
    auto name = get_string(node["name"], where + ".name");
    if (!name.ok()) return name.status();
    if (name->empty() || name->size() > 128) {
      return key_error(where + ".name", "expected 1 to 128 characters");
    }
    w.name = *name;
  } else if (w.address.empty()) {
    return key_error(where + ".name", "missing (a declared worker without address needs a name)");
  }
  if (node["memory_budget"]) {
    auto text = get_string(node["memory_budget"], where + ".memory_budget");
    if (!text.ok()) return text.status();
    auto bytes = placement::parse_byte_size(*text);
    if (!bytes.ok()) {
      return key_error(where + ".memory_budget", bytes.status().message());
    }
    w.memory_budget = *bytes;
  }
  if (w.declared && w.memory_budget == 0) {
    return key_error(
        where + ".memory_budget",
        node["memory_budget"]
            ? "0 (a declared worker needs a budget above 0)"
            : "missing (a declared worker says how much memory it will have)");
  }
  for (const char* key : {"read_bandwidth", "flop_rate", "threads"}) {
    if (node[key] && !w.declared) {
      return key_error(absl::StrCat(where, ".", key),
                       "only for a declared worker (declared: true); a running worker "
                       "measures its own and reports it in Describe");
    }
  }
  if (node["read_bandwidth"]) {
    auto text = get_string(node["read_bandwidth"], where + ".read_bandwidth");
    if (!text.ok()) return text.status();
    auto rate = placement::parse_byte_rate(*text);
    if (!rate.ok()) return key_error(where + ".read_bandwidth", rate.status().message());
    w.read_bandwidth = *rate;
  }
  if (node["flop_rate"]) {
    auto text = get_string(node["flop_rate"], where + ".flop_rate");
    if (!text.ok()) return text.status();
    auto rate = placement::parse_flop_rate(*text);
    if (!rate.ok()) return key_error(where + ".flop_rate", rate.status().message());
    w.flop_rate = *rate;
  }
  if (node["threads"]) {
    auto threads = get_int(node["threads"], where + ".threads", 1, 4096);
    if (!threads.ok()) return threads.status();
    w.threads = *threads;
  }
  if (node["blocks"]) {
    const YAML::Node& b = node["blocks"];
    if (!b.IsSequence() || b.size() != 2) {
      return key_error(where + ".blocks",
                       "expected [first, last] (blocks first .. last - 1)");
    }
    auto first = get_int(b[0], where + ".blocks[0]", 0, 1 << 16);
    if (!first.ok()) return first.status();
    auto last = get_int(b[1], where + ".blocks[1]", 0, 1 << 16);
    if (!last.ok()) return last.status();
    if (*last <= *first) {
      return key_error(where + ".blocks",
                       absl::StrCat("[", *first, ", ", *last,
                                    "] is empty (last must exceed first)"));
    }
    w.blocks = placement::Range{*first, *last};
  }
  return w;
}

}  // namespace

std::optional<ActivationLinkKind> parse_activation_link(std::string_view text) {
  if (text == "auto") return ActivationLinkKind::kAuto;
  if (text == "grpc") return ActivationLinkKind::kGrpc;
  if (text == "nccl") return ActivationLinkKind::kNccl;
  return std::nullopt;
}

std::string worker_label(const WorkerConfig& w) {
  if (w.address.empty()) return absl::StrCat("worker ", w.name);
  if (w.name == w.address) return absl::StrCat("worker ", w.address);
  return absl::StrCat("worker ", w.name, " (", w.address, ")");
}

absl::Status check_address(absl::string_view address, bool port_zero_ok) {
  if (absl::StrContains(address, "://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", address, "' has a scheme (want HOST:PORT, e.g. 127.0.0.1:50061)"));
  }
  size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' is not HOST:PORT"));
  }
  absl::string_view host = address.substr(0, colon);
  absl::string_view port = address.substr(colon + 1);
  if (host.front() == '[' && host.back() != ']') {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "': unterminated [IPv6] host"));
  }
  if (host.front() != '[' && absl::StrContains(host, ':')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", address, "': an IPv6 host is written in brackets ([::1]:PORT)"));
  }
  int p = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() ||
      p < (port_zero_ok ? 0 : 1) || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", address, "': port must be ", port_zero_ok ? 0 : 1, " .. 65535"));
  }
  for (char c : host) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", address, "': space in the host"));
    }
  }
  return absl::OkStatus();
}

absl::Status check_cors_allow_origin(absl::string_view v) {
  if (v == "*" || v == "off") return absl::OkStatus();
  const size_t scheme = v.find("://");
  const bool printable = std::all_of(v.begin(), v.end(), [](char ch) {
    return static_cast<unsigned char>(ch) > 0x20 && static_cast<unsigned char>(ch) < 0x7f;
  });
  if (!printable || scheme == absl::string_view::npos || scheme == 0 ||
      v.size() == scheme + 3 || v.find('/', scheme + 3) != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cors_allow_origin: '", v.substr(0, 256),
        "': expected \"*\", \"off\" or an origin such as https://ui.example.com"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ClusterConfig> parse_cluster_config(absl::string_view text,
                                                   absl::string_view source) {
  return parse_cluster_config(text, source, config::process_env());
}

absl::StatusOr<ClusterConfig> parse_cluster_config(
    absl::string_view text, absl::string_view source,
    const config::EnvLookup& env) {
  auto with_source = [&](const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat(source, ": ", st.message()));
  };
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not valid YAML: ", e.what()));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected a map of settings (model, workers, ...)"));
  }
  if (absl::Status st = config::expand_env_in_yaml(root, env); !st.ok()) {
    return with_source(st);
  }
  ClusterConfig c;
  try {
    absl::Status st = check_keys(
        root, "",
        {"model", "listen", "context_length", "max_sequences", "prefill_chunk",
         "prefill_chunk_beside_decode", "kv_type",
         "placement", "activation_link", "health_check_interval_ms", "health_check_timeout_ms",
         "health_check_failures", "trace", "workers", "http_listen", "api_key", "chat_template",
         "served_model_name", "cors_allow_origin",
         "prefix_cache_blocks", "spares", "migration", "insecure", "tls"});
    if (!st.ok()) return with_source(st);
    if (root["model"]) {
      auto s = get_string(root["model"], "model");
      if (!s.ok()) return with_source(s.status());
      c.model = expand_home(*s);
    }
    if (root["listen"]) {
      auto s = get_string(root["listen"], "listen");
      if (!s.ok()) return with_source(s.status());
      if (absl::Status a = check_address(*s, true); !a.ok()) {
        return with_source(key_error("listen", a.message()));
      }
      c.listen = *s;
    }
    if (root["http_listen"]) {
      auto s = get_string(root["http_listen"], "http_listen");
      if (!s.ok()) return with_source(s.status());
      if (*s != "off") {
        if (absl::Status a = check_address(*s, true); !a.ok()) {
          return with_source(key_error("http_listen", a.message()));
        }
      }
      c.http_listen = *s;
      c.http_listen_given = true;
    }
    if (root["chat_template"]) {
      auto s = get_string(root["chat_template"], "chat_template");
      if (!s.ok()) return with_source(s.status());
      if (s->empty()) return with_source(key_error("chat_template", "empty (leave the key out)"));
      c.chat_template = expand_home(*s);
    }
    if (root["served_model_name"]) {
      auto s = get_string(root["served_model_name"], "served_model_name");
      if (!s.ok()) return with_source(s.status());
      if (s->empty()) return with_source(key_error("served_model_name", "empty (leave the key out)"));
      c.served_model_name = *s;
    }
    if (root["cors_allow_origin"]) {
      auto s = get_string(root["cors_allow_origin"], "cors_allow_origin");
      if (!s.ok()) return with_source(s.status());
      if (absl::Status cors = check_cors_allow_origin(*s); !cors.ok()) return with_source(cors);
      c.cors_allow_origin = *s;
    }
    if (root["api_key"]) {
      auto s = get_string(root["api_key"], "api_key");
      if (!s.ok()) return with_source(s.status());
      if (s->empty()) return with_source(key_error("api_key", "empty (leave the key out)"));
      c.api_key = *s;
    }
    for (const char* k : {"insecure", "tls"}) {
      if (!root[k]) continue;
      if (absl::Status t = grpc_tls::parse_tls_key(k, root[k], std::string(source), &c.tls);
          !t.ok()) {
        return t;
      }
    }
    struct IntKey {
      const char* key;
      int* value;
      int lo, hi;
    };
    const IntKey ints[] = {
        {"context_length", &c.context_length, 0, 1 << 20},
        {"max_sequences", &c.max_sequences, 1, 1024},
        {"prefill_chunk", &c.prefill_chunk, 1, 4096},
        {"health_check_interval_ms", &c.health_check_interval_ms, 50, 60000},
        {"health_check_timeout_ms", &c.health_check_timeout_ms, 50, 60000},
        {"health_check_failures", &c.health_check_failures, 1, 100},
        {"prefix_cache_blocks", &c.prefix_cache_blocks, -1, 1 << 20},
    };
    for (const IntKey& k : ints) {
      if (!root[k.key]) continue;
      auto v = get_int(root[k.key], k.key, k.lo, k.hi);
      if (!v.ok()) return with_source(v.status());
      *k.value = *v;
    }
    if (const YAML::Node& m = root["migration"]; m) {
      if (!m.IsMap()) {
        return with_source(key_error("migration", "expected a map (attempts, timeout_ms)"));
      }
      if (absl::Status k = check_keys(m, "migration", {"attempts", "timeout_ms"}); !k.ok()) {
        return with_source(k);
      }
      if (m["attempts"]) {
        auto v = get_int(m["attempts"], "migration.attempts", 0, 100);
        if (!v.ok()) return with_source(v.status());
        c.migration_attempts = *v;
      }
      if (m["timeout_ms"]) {
        auto v = get_int(m["timeout_ms"], "migration.timeout_ms", 100, 3600000);
        if (!v.ok()) return with_source(v.status());
        c.migration_timeout_ms = *v;
      }
    }
    if (c.prefill_chunk + c.max_sequences > 4096) {
      return with_source(key_error(
          "prefill_chunk", absl::StrCat(c.prefill_chunk, " rows with max_sequences ",
                                        c.max_sequences, " exceed the 4096 rows of a "
                                        "micro-batch")));
    }
    if (const YAML::Node& n = root["prefill_chunk_beside_decode"]; n) {
      if (n.IsScalar() && n.Scalar() == "auto") {
        c.prefill_chunk_beside_decode = kAutoPrefillChunkBesideDecode;
      } else {
        auto v = get_int(n, "prefill_chunk_beside_decode", 0, 4096);
        if (!v.ok()) {
          return with_source(absl::Status(v.status().code(),
                                          absl::StrCat(v.status().message(), " (or auto)")));
        }
        c.prefill_chunk_beside_decode = *v;
      }
    }
    if (root["kv_type"]) {
      auto s = get_string(root["kv_type"], "kv_type");
      if (!s.ok()) return with_source(s.status());
      if (std::optional<GgmlType> kv = worker::parse_kv_type(*s)) {
        c.kv_type = *kv;
      } else {
        return with_source(
            key_error("kv_type", absl::StrCat("'", *s, "' is not f16 or f32")));
      }
    }
    std::string placement = "";
    if (root["placement"]) {
      auto s = get_string(root["placement"], "placement");
      if (!s.ok()) return with_source(s.status());
      if (*s != "auto" && *s != "explicit") {
        return with_source(key_error(
            "placement", absl::StrCat("'", *s, "' is not auto or explicit")));
      }
      placement = *s;
    }
    if (root["activation_link"]) {
      auto s = get_string(root["activation_link"], "activation_link");
      if (!s.ok()) return with_source(s.status());
      std::optional<ActivationLinkKind> kind = parse_activation_link(*s);
      if (!kind) {
        return with_source(key_error(
            "activation_link", absl::StrCat("'", *s, "' is not auto, grpc or nccl")));
      }
      c.activation_link = *kind;
    }
    if (root["trace"]) {
      auto s = get_string(root["trace"], "trace");
      if (!s.ok()) return with_source(s.status());
      c.trace = expand_home(*s);
    }
    if (!root["workers"]) return with_source(key_error("workers", "missing"));
    YAML::Node workers = root["workers"];
    if (workers.IsMap()) {  // {from: lws | dns, ...}
      auto group = worker_group(workers, env);
      if (!group.ok()) return with_source(group.status());
      workers = *group;
    }
    if (!workers.IsSequence() || workers.size() == 0) {
      return with_source(
          key_error("workers", "expected a list of at least one worker, or "
                               "{from: lws, port: P} or {from: dns, address: "
                               "A, count: N}"));
    }
    if (workers.size() > 256) {
      return with_source(
          key_error("workers", absl::StrCat(workers.size(),
                                            " workers; at most 256")));
    }
    int with_blocks = 0;
    for (size_t i = 0; i < workers.size(); ++i) {
      auto w = parse_worker(workers[i], absl::StrCat("workers[", i, "]"), /*spare=*/false);
      if (!w.ok()) return with_source(w.status());
      if (w->blocks) ++with_blocks;
      c.workers.push_back(*std::move(w));
    }
    if (const YAML::Node& spares = root["spares"]; spares) {
      if (!spares.IsSequence()) {
        return with_source(key_error("spares", "expected a list of workers"));
      }
      if (spares.size() > 256) {
        return with_source(key_error("spares", absl::StrCat(spares.size(), " spares; at most 256")));
      }
      for (size_t i = 0; i < spares.size(); ++i) {
        const std::string key = absl::StrCat("spares[", i, "]");
        auto w = parse_worker(spares[i], key, /*spare=*/true);
        if (!w.ok()) return with_source(w.status());
        if (w->blocks) {
          return with_source(key_error(absl::StrCat(key, ".blocks"),
                                       "a spare takes the blocks of the worker it replaces"));
        }
        c.spares.push_back(*std::move(w));
      }
    }
    std::set<std::string> addresses, names;
    for (size_t i = 0; i < c.workers.size() + c.spares.size(); ++i) {
      const bool spare = i >= c.workers.size();
      const WorkerConfig& w = spare ? c.spares[i - c.workers.size()] : c.workers[i];
      const std::string key = spare ? absl::StrCat("spares[", i - c.workers.size(), "]")
                                     : absl::StrCat("workers[", i, "]");
      if (!w.address.empty() && !addresses.insert(w.address).second) {
        return with_source(key_error(
            absl::StrCat(key, ".address"),
            absl::StrCat(w.address, " appears twice; one worker per address")));
      }
      // Messages name workers by name: two of one name could not be told
      // apart.
      if (!names.insert(w.name).second) {
        return with_source(key_error(absl::StrCat(key, ".name"),
                                     absl::StrCat("'", w.name, "' names two workers")));
      }
    }
    if (placement.empty()) {
      placement = with_blocks > 0 ? "explicit" : "auto";
    }
    c.explicit_placement = placement == "explicit";
    const int n = static_cast<int>(c.workers.size());
    if (c.explicit_placement && with_blocks != n) {
      for (int i = 0; i < n; ++i) {
        if (!c.workers[i].blocks) {
          return with_source(key_error(
              absl::StrCat("workers[", i, "].blocks"),
              "missing (explicit placement needs a range for every worker)"));
        }
      }
    }
    if (!c.explicit_placement && with_blocks > 0) {
      return with_source(key_error(
          "placement", "auto, but workers give `blocks`; say `placement: "
                       "explicit` or drop the ranges"));
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", e.what()));
  }
  return c;
}

absl::StatusOr<ClusterConfig> load_cluster_config(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {  // ifstream opens one, reading nothing
    return absl::InvalidArgumentError(absl::StrCat(path, ": a directory, not a config file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (text.size() > (1u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": larger than 1 MiB; not a cluster config"));
  }
  return parse_cluster_config(text, path);
}

absl::Status check_trace_writable(const std::string& path) {
  std::ofstream out(path, std::ios::out | std::ios::trunc);
  if (!out) {
    return absl::InvalidArgumentError(
        absl::StrCat("trace: cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status check_workers_running(const ClusterConfig& c) {
  for (size_t i = 0; i < c.workers.size(); ++i) {
    if (c.workers[i].declared) {
      return absl::FailedPreconditionError(absl::StrCat(
          "workers[", i, "]: ", worker_label(c.workers[i]),
          " is declared (declared: true: a machine not yet running, for `strata plan`); "
          "a coordinator needs every worker running at its address"));
    }
  }
  return absl::OkStatus();
}

absl::Status resolve_link_security(ClusterConfig& c, const std::string& program) {
  std::vector<std::string> addresses;
  for (const WorkerConfig& w : c.workers) {
    if (!w.declared) addresses.push_back(w.address);
  }
  for (const WorkerConfig& w : c.spares) addresses.push_back(w.address);
  if (absl::Status st = grpc_tls::resolve_link_security(
          &c.tls, addresses, /*require_peers=*/false, program);
      !st.ok()) {
    return st;
  }
  if (c.tls.plaintext()) return absl::OkStatus();
  for (size_t i = 0; i < c.workers.size() + c.spares.size(); ++i) {
    const bool spare = i >= c.workers.size();
    const WorkerConfig& w = spare ? c.spares[i - c.workers.size()] : c.workers[i];
    if (w.declared) continue;  // no link to it
    const std::string key = spare ? absl::StrCat("spares[", i - c.workers.size(), "].name")
                                  : absl::StrCat("workers[", i, "].name");
    if (w.name.empty() || w.name == w.address) {
      return key_error(key, absl::StrCat("required with tls: the name ", w.address,
                                         "'s certificate carries (strata certs --names)"));
    }
    if (!c.tls.peers.empty() &&
        std::find(c.tls.peers.begin(), c.tls.peers.end(), w.name) == c.tls.peers.end()) {
      return key_error(key, absl::StrCat("'", w.name, "' is not in tls.peers"));
    }
  }
  return absl::OkStatus();
}

int prefill_chunk_beside_decode_for(int configured, const std::vector<std::string>& backends) {
  if (configured >= 0) return configured;
  const bool all_cpu = !backends.empty() &&
                       std::all_of(backends.begin(), backends.end(),
                                   [](const std::string& b) { return b == "cpu"; });
  return all_cpu ? kDefaultPrefillChunkBesideDecode : 0;
}

}  // namespace strata::coordinator
