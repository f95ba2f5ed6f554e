// The cluster config of `strata-coordinator --config FILE` (YAML):
//
//   model: /models/SmolLM2-135M-Instruct.Q4_1.gguf   # required; each worker
//                                   # opens the same path on its own disk
//   listen: 127.0.0.1:50051         # the strata.v1.Inference address
//   http_listen: 127.0.0.1:8080     # the OpenAI-compatible HTTP API; "off":
//                                   # none; when not given and 8080 is taken,
//                                   # the next free port
//   chat_template: /models/x.jinja  # a Jinja chat template overriding the
//                                   # GGUF's (checked at startup)
//   served_model_name: llama-70b    # the name clients give as `model`;
//                                   # default: the GGUF's general.name
//   cors_allow_origin: "*"          # browser pages of other origins may call
//                                   # the HTTP API: "*" (default), "off", or
//                                   # one origin (https://ui.example.com)
//   api_key: secret                 # bearer token of both APIs; default:
//                                   # $STRATA_API_KEY, else none
//   context_length: 4096            # positions per sequence; 0: the model's
//   max_sequences: 8                # live sequences at once (1 .. 1024)
//   prefill_chunk: 512              # rows of one prompt chunk in a micro-batch
//                                   # (1 .. 4096 - max_sequences)
//   prefill_chunk_beside_decode: auto  # prompt rows of a micro-batch while
//                                   # any sequence decodes (0: prefill_chunk;
//                                   # auto: 128 when every stage runs on the
//                                   # cpu backend, else 0)
//   kv_type: f16                    # f16 or f32
//   placement: auto                 # auto (by memory budget) or explicit
//   activation_link: auto           # between two stages: auto (NCCL where
//                                   # both workers make NCCL links: GPU
//                                   # workers built with NCCL; else gRPC),
//                                   # grpc, or nccl (every pair, or the
//                                   # load fails saying which worker lacks it)
//   health_check_interval_ms: 500   # Health RPC to every worker this often
//   health_check_timeout_ms: 750    # deadline of one Health RPC
//   health_check_failures: 2        # misses in a row before a worker is
//                                   # declared unreachable
//   migration:                      # requests of a failed pipeline move to
//     attempts: 3                   # a new one, at most this many times
//                                   # (0: they fail with UNAVAILABLE)
//     timeout_ms: 60000             # waiting for a new pipeline at most
//   spares:                         # workers that take a failed worker's
//     - address: 127.0.0.1:50063    # place (address, name, memory_budget)
//       name: s0
//   trace: ""                       # JSON-lines file of block-output hashes
//   prefix_cache_blocks: -1         # prefix cache slots of 16 tokens on every
//                                   # worker (coordinator/prefix_index.h);
//                                   # -1: one context's worth, 0: off
//                                   # (off while `trace` is set)
//   tls:                            # mutual TLS of the links to the workers
//     ca: ~/certs/ca.pem            # (proto/grpc_tls.h, docs/security.md):
//     cert: ~/certs/coordinator.pem # the cluster CA, the coordinator's own
//     key: ~/certs/coordinator.key  # certificate and key; each worker's
//     peers: [w0, w1]               # certificate must carry its `name:`
//                                   # (peers, optional: the names allowed)
//   insecure: true                  # instead of tls: plaintext links, only
//                                   # when every worker address is loopback
//   workers:                        # in pipeline order
//     - address: 127.0.0.1:50061    # required
//       name: w0                    # for messages; default: the address
//       memory_budget: 2GiB         # default: what the worker reports
//       blocks: [0, 15]             # explicit placement: blocks [0, 15)
//     - name: w2                    # a machine not yet running, for
//       declared: true              # `strata plan` only (docs/cluster.md,
//       memory_budget: 48GiB        # "Planning a cluster"): no address
//       read_bandwidth: 20GB/s      # needed; memory_budget required;
//       flop_rate: 1.2TFLOP/s       # read_bandwidth (a size per second),
//       threads: 16                 # flop_rate and threads optional
//   workers: {from: lws, port: 50061}   # or a group instead of a list: the
//                                   # LeaderWorkerSet's workers 1 .. size-1
//                                   # (LWS_LEADER_ADDRESS <lws>-<g>.<svc>.<ns>,
//                                   # LWS_GROUP_SIZE) at <lws>-<g>-<i>.<svc>.<ns>
//   workers: {from: dns, address: "w-{index}.svc:50061", count: 4, first: 0}
//                                   # both: optional name ("w{index}") and
//                                   # memory_budget for every worker
//
// Any value may use ${VAR} or ${VAR:-default} (model/config_env.h); sizes
// take Kubernetes quantities (28Gi, 2G; placement::parse_byte_size).
//
// A declared worker (`declared: true`) stands for a machine that is not
// running yet: `strata plan` takes its figures from the config instead of
// its Describe; strata-coordinator refuses a config with one
// (check_workers_running). read_bandwidth, flop_rate and threads are only
// for declared workers (a running worker measures and reports its own);
// a declared worker needs a `name:` when it has no address, and a
// memory_budget. Spares cannot be declared.
// A leading "~/" in `model` and `trace` is the home directory.
// With `placement: explicit` every worker must give `blocks`; with `auto`
// none may. Unknown keys are refused (a typo would otherwise be silently
// ignored). Errors name the key: "workers[1].blocks: expected [first,
// last]", "max_sequences: 0 is out of range [1, 1024]".
//
// Thread-safety: plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "model/config_env.h"
#include "model/ggml_type.h"
#include "model/placement.h"
#include "proto/grpc_tls.h"

namespace strata::coordinator {

struct WorkerConfig {
  std::string address;  // host:port
  std::string name;     // defaults to the address
  uint64_t memory_budget = 0;  // 0: as the worker's Describe reports
  std::optional<placement::Range> blocks;  // explicit placement
  // `declared: true`: not running; the figures below stand for its
  // Describe (strata plan). address may then be empty.
  bool declared = false;
  // bytes/s over a large working set (weights streamed from memory, as a
  // running worker's 126 MiB figure): the planner uses it at every stage
  // size; 0: not declared.
  double read_bandwidth = 0;
  double flop_rate = 0;       // FLOP/s; 0: not declared
  int threads = 0;            // 0: not declared
};

// How messages name a worker: "worker NAME (ADDRESS)", or "worker ADDRESS"
// when the name is the address (no `name:` given), "worker NAME" when it
// has no address (declared).
std::string worker_label(const WorkerConfig& w);

// How activations travel between two stages (`activation_link:`).
enum class ActivationLinkKind { kAuto, kGrpc, kNccl };
// "auto", "grpc", "nccl"; nullopt otherwise.
std::optional<ActivationLinkKind> parse_activation_link(std::string_view text);

// A cors_allow_origin value: "*", "off", or one origin as browsers send
// it (scheme://host[:port], no path, no whitespace or control characters):
// InvalidArgument "cors_allow_origin: ..." otherwise.
absl::Status check_cors_allow_origin(absl::string_view value);

// ClusterConfig::prefill_chunk_beside_decode's auto value on cpu stages:
// measured by bench/decode-beside-prefill (docs/perf.md).
inline constexpr int kDefaultPrefillChunkBesideDecode = 128;
// ClusterConfig::prefill_chunk_beside_decode when the config leaves it to
// the stages' backends.
inline constexpr int kAutoPrefillChunkBesideDecode = -1;

// The prompt rows of a micro-batch while a sequence decodes
// (SchedulerOptions::prefill_chunk_beside_decode) for a pipeline whose
// stages run on `backends` (ShardInfo.backend: "cpu", "cuda", ...):
// `configured` when it is 0 or more; for kAutoPrefillChunkBesideDecode,
// kDefaultPrefillChunkBesideDecode when every stage is "cpu" (a row's
// result does not depend on its chunk there, so the load changes no
// token), else 0 (whole chunks: the cuda backend's kernels depend on a
// slice's rows, so a cut that follows the load could move a logit).
int prefill_chunk_beside_decode_for(int configured, const std::vector<std::string>& backends);

struct ClusterConfig {
  std::string model;
  std::string listen = "127.0.0.1:50051";
  std::string http_listen = "127.0.0.1:8080";  // "off": no HTTP API
  bool http_listen_given = false;  // from the file: no fallback to a free port
  std::string api_key;             // "": $STRATA_API_KEY, else none
  std::string chat_template;       // "": the model's
  std::string served_model_name;   // "": the GGUF's general.name
  std::string cors_allow_origin = "*";  // HTTP CORS: "*", "off" or one origin
  int context_length = 0;  // 0: the model's context_length
  int max_sequences = 8;
  // Rows of one prompt chunk; a micro-batch holds at most prefill_chunk +
  // max_sequences rows (the token budget of a step, at most 4096).
  int prefill_chunk = 512;
  // While any sequence decodes, a micro-batch's prompt rows are at most this
  // (SchedulerOptions::prefill_chunk_beside_decode); 0: prefill_chunk;
  // kAutoPrefillChunkBesideDecode ("auto", the default): by the stages'
  // backends (prefill_chunk_beside_decode_for).
  int prefill_chunk_beside_decode = kAutoPrefillChunkBesideDecode;
  GgmlType kv_type = GgmlType::kF16;
  bool explicit_placement = false;
  ActivationLinkKind activation_link = ActivationLinkKind::kAuto;
  int health_check_interval_ms = 500;
  int health_check_timeout_ms = 750;
  int health_check_failures = 2;
  int migration_attempts = 3;      // 0: no migration
  int migration_timeout_ms = 60000;
  std::string trace;  // file; empty: off
  // Prefix cache slots (blocks of kDefaultPrefixBlockTokens) on every
  // worker; -1: context_length / 16 (one more sequence's KV), 0: off.
  int prefix_cache_blocks = -1;
  std::vector<WorkerConfig> workers;
  // Spare workers (no blocks): when a worker fails, one that answers takes
  // its place in the next pipeline.
  std::vector<WorkerConfig> spares;
  // `tls:` / `insecure:`; resolve_link_security (below) checks and loads.
  grpc_tls::TlsConfig tls;
};

// The links' security at startup (grpc_tls::resolve_link_security over
// every worker's address): mutual TLS with the files loaded, or plaintext
// when every worker is on loopback and `insecure: true` (a warning). With
// TLS every worker needs a `name:` (its certificate's name), in tls.peers
// when that is given. Errors: InvalidArgument naming the key
// ("workers[1].name: required with tls: ..."). Declared workers (no link)
// are left out. `program` names the process in the plaintext warning.
absl::Status resolve_link_security(ClusterConfig& config,
                                   const std::string& program = "strata-coordinator");

// Parses YAML text. `source` names it in messages ("cluster.yaml").
// Values may use ${VAR} and ${VAR:-default} (model/config_env.h), expanded
// from the process's environment, or from `env`.
absl::StatusOr<ClusterConfig> parse_cluster_config(absl::string_view text,
                                                   absl::string_view source);
absl::StatusOr<ClusterConfig> parse_cluster_config(absl::string_view text,
                                                   absl::string_view source,
                                                   const config::EnvLookup& env);
// Reads and parses a file. NotFound when it cannot be read.
absl::StatusOr<ClusterConfig> load_cluster_config(const std::string& path);

// Checks "host:port" (port 1 .. 65535, or 0 — any free port — when
// `port_zero_ok`, for listen addresses; [v6]:port allowed).
absl::Status check_address(absl::string_view address,
                           bool port_zero_ok = false);

// OK when no worker is declared (`declared: true`); else
// FailedPrecondition naming it: a coordinator serves running workers only.
absl::Status check_workers_running(const ClusterConfig& config);

// Opens `path` for writing (creating it, or emptying it) and closes it:
// ClusterConfig::trace is checked so before a cluster starts, so that an
// unwritable trace path stops the start instead of a run without its trace.
// Errors: InvalidArgument naming the path and the system's reason.
absl::Status check_trace_writable(const std::string& path);

}  // namespace strata::coordinator
