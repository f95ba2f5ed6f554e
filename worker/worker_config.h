// WorkerConfig: what `strata-worker` is told at start — from a YAML file
// (`--config FILE`), with command-line flags overriding its keys.
//
//   listen: 127.0.0.1:50061      # host:port to serve strata.v1.Worker on
//                                # (port 0: the system picks one)
//   backend: cpu                 # cpu; cuda:N (GPU N; cuda = cuda:0;
//                                # worker/cuda/cuda_backend.h: every
//                                # family, issue 32);
//                                # or fake: no weights, rows hashed
//                                # (worker/fake_backend.h), to measure what
//                                # the pipeline costs around a backend
//   threads: 4                   # threads of the forward pass: an integer,
//                                # a CPU quantity (3500m -> 3, 1.5 -> 1) or
//                                # auto; absent or auto: the CPUs this
//                                # process may use (cpu::usable_threads():
//                                # affinity and cgroup CPU limit)
//   memory_budget: 4GiB          # weights + KV cache this worker may hold
//   model_dirs: [~/.cache/strata/models]  # where LoadShard may load from
//   name: w0                     # in messages and traces (default host:port)
//   max_message_bytes: 64MiB     # largest gRPC message received or sent
//   answer_timeout_ms: 30000     # next stage silent this long: it is hung
//   tls:                         # mutual TLS of every link (proto/grpc_tls.h;
//     ca: ~/certs/ca.pem         # docs/security.md): the cluster CA,
//     cert: ~/certs/w0.pem       # this worker's certificate and key, and
//     key: ~/certs/w0.key        # the certificate names allowed to call it
//     peers: [coordinator, w0, w1]
//   insecure: true               # instead of tls: plaintext, loopback only
//
// Sizes are bytes, or a number with B, KiB, MiB, GiB, TiB (powers of 1024)
// or KB, MB, GB, TB (powers of 1000), or a Kubernetes quantity (2Gi, 2G,
// 2e9; placement::parse_byte_size). Any value may use ${VAR} or
// ${VAR:-default} (model/config_env.h): `name: w${LWS_WORKER_INDEX}`. A leading "~/" in a directory is the
// home directory. Unknown keys are errors (a typo must not pass silently).
//
// Errors name the source and the key: "worker-0.yaml: threads: -2 is out
// of range [1, 1024]". Threads: plain values and functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/config_env.h"
#include "proto/grpc_tls.h"

namespace strata::worker {

struct WorkerConfig {
  std::string listen = "127.0.0.1:50061";
  std::string backend = "cpu";
  int threads = 0;  // 0: auto (cpu::usable_threads(), resolved at start)
  uint64_t memory_budget_bytes = uint64_t{4} << 30;
  std::vector<std::string> model_dirs;  // "~/" expanded
  std::string name;                     // "" -> the bound host:port
  int64_t max_message_bytes = int64_t{64} << 20;
  int answer_timeout_ms = 30000;
  // `tls:` / `insecure:`; resolved (files loaded) by strata-worker's main
  // with grpc_tls::resolve_link_security before the server starts.
  grpc_tls::TlsConfig tls;
};

// Parses YAML text; `source` names it in errors (a file name). Each key's
// value is checked; the whole (model_dirs given, ...) is validate()'s job,
// after flags have overridden keys.
// Values may use ${VAR} and ${VAR:-default} (model/config_env.h), expanded
// from the process's environment, or from `env`.
absl::StatusOr<WorkerConfig> parse_worker_config(std::string_view yaml,
                                                 std::string_view source);
absl::StatusOr<WorkerConfig> parse_worker_config(std::string_view yaml,
                                                 std::string_view source,
                                                 const config::EnvLookup& env);
// Reads and parses a file (NotFound naming it when it cannot be read).
absl::StatusOr<WorkerConfig> load_worker_config(const std::string& path);

// Checks the values (whether they came from a file or from flags):
// InvalidArgument naming the key.
absl::Status validate(const WorkerConfig& config);

// A `threads:` value: "auto" -> 0; an integer in [1, 1024]; a Kubernetes
// CPU quantity ("3500m", "1.5"): its whole CPUs, at least 1.
// InvalidArgument quoting the text otherwise.
absl::StatusOr<int> parse_thread_count(std::string_view text);

// "~/x" -> "$HOME/x"; anything else unchanged.
std::string expand_home(std::string_view path);

}  // namespace strata::worker
