// strata-worker: serves strata.v1.Worker — one shard of a model, loaded
// when the coordinator asks (LoadShard) — until SIGINT or SIGTERM.
//
//   strata-worker --config deploy/examples/worker-0.yaml [--listen H:P]
//       [--threads N] [--memory-budget 4GiB] [--model-dir DIR ...]
//       [--name NAME] [--tls-ca F --tls-cert F --tls-key F
//       --tls-peers a,b | --insecure]
//   strata-worker --version    # "strata-worker 0.1.0 (git 1a2b3c4)"
//
// Links are mutual TLS (proto/grpc_tls.h, docs/security.md): the config's
// `tls:` block or the --tls-* flags (which replace its keys); `insecure`
// (plaintext) only when the listen address is loopback.
//
// Prints "listening on HOST:PORT" (the port the system chose for port 0)
// on stdout once it serves. Exit status: 0 after a signal, 2 for a bad
// config or flag, 1 when it cannot listen.
#include <malloc.h>
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "kernels/cpu/cpu_info.h"
#include "kernels/cpu/machine_rates.h"
#include "model/log.h"
#include "model/placement.h"
#include "model/progress.h"
#include "proto/grpc_ops.h"
#include "proto/grpc_tls.h"
#include "spdlog/spdlog.h"
#include "strata_version.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_device.h"
#include "worker/grpc_link.h"
#ifdef STRATA_HAVE_NCCL
#include "worker/nccl_channel.h"
#endif
#include "worker/worker_config.h"
#include "worker/worker_service.h"

namespace {

int fail_config(const std::string& message) {
  std::cerr << "strata-worker: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Large buffers (KV caches, activations, scratch) are mapped and unmapped
  // whole. glibc's default raises the mmap threshold after the first such
  // free, so a reloaded shard's buffers came from the heap and stayed in the
  // process: bench/soak saw RSS grow 100+ MiB a reload.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  using strata::worker::WorkerConfig;
  CLI::App app{
      "strata-worker: serves one shard of a model to a strata "
      "cluster (docs/worker.md)"};
  app.set_version_flag("--version", strata::version_line("strata-worker"));
  std::string config_path;
  std::string listen;
  int threads = 0;
  std::string memory_budget;
  std::vector<std::string> model_dirs;
  std::string name;
  app.add_option("--config", config_path, "YAML config file");
  app.add_option("--listen", listen, "host:port to serve on (port 0: any)");
  app.add_option("--threads", threads,
                 "threads of the forward pass (default: the CPUs this "
                 "process may use: affinity and cgroup CPU limit)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--memory-budget", memory_budget,
                 "weights + KV cache this worker may hold (4GiB, 512MiB)");
  app.add_option("--model-dir", model_dirs,
                 "a directory models may be loaded from (repeatable)");
  app.add_option("--name", name, "worker name in messages and traces");
  std::string tls_ca, tls_cert, tls_key;
  std::vector<std::string> tls_peers;
  bool insecure = false;
  app.add_option("--tls-ca", tls_ca, "cluster CA certificate (PEM; tls.ca)");
  app.add_option("--tls-cert", tls_cert,
                 "this worker's certificate (PEM; tls.cert)");
  app.add_option("--tls-key", tls_key, "its private key (PEM; tls.key)");
  app.add_option("--tls-peers", tls_peers,
                 "certificate names allowed to call this worker (tls.peers)")
      ->delimiter(',');
  app.add_flag("--insecure", insecure,
               "plaintext links, loopback listen address only (insecure)");
  std::string log_level;
  app.add_option("--log-level", log_level,
                 std::string("log level: ") + strata::kLogLevels +
                     " (STRATA_LOG_LEVEL; info)");
  std::string log_format;
  app.add_option("--log-format", log_format,
                 std::string("log lines: ") + strata::kLogFormats +
                     " (STRATA_LOG_FORMAT; text)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  if (absl::Status st =
          strata::init_logging("strata-worker", log_level, log_format);
      !st.ok()) {
    return fail_config(std::string(st.message()));
  }
  WorkerConfig config;
  if (!config_path.empty()) {
    absl::StatusOr<WorkerConfig> loaded =
        strata::worker::load_worker_config(config_path);
    if (!loaded.ok())
      return fail_config(std::string(loaded.status().message()));
    config = std::move(*loaded);
  }
  if (!listen.empty()) config.listen = listen;
  if (threads != 0) config.threads = threads;
  if (!memory_budget.empty()) {
    absl::StatusOr<uint64_t> bytes =
        strata::placement::parse_byte_size(memory_budget);
    if (!bytes.ok()) {
      return fail_config(
          absl::StrCat("--memory-budget: ", bytes.status().message()));
    }
    config.memory_budget_bytes = *bytes;
  }
  if (!model_dirs.empty()) {
    config.model_dirs.clear();
    for (const std::string& d : model_dirs) {
      config.model_dirs.push_back(strata::worker::expand_home(d));
    }
  }
  if (!name.empty()) config.name = name;
  if (insecure) {
    config.tls = strata::grpc_tls::TlsConfig();
    config.tls.insecure = true;
  }
  if (!tls_ca.empty() || !tls_cert.empty() || !tls_key.empty() ||
      !tls_peers.empty()) {
    if (insecure) return fail_config("--insecure and --tls-*: choose one");
    config.tls.insecure = false;
    config.tls.tls_given = true;
    if (!tls_ca.empty()) config.tls.ca = strata::worker::expand_home(tls_ca);
    if (!tls_cert.empty())
      config.tls.cert = strata::worker::expand_home(tls_cert);
    if (!tls_key.empty()) config.tls.key = strata::worker::expand_home(tls_key);
    if (!tls_peers.empty()) config.tls.peers = tls_peers;
  }
  if (absl::Status st = strata::worker::validate(config); !st.ok()) {
    return fail_config(
        absl::StrCat(config_path.empty() ? "" : absl::StrCat(config_path, ": "),
                     st.message()));
  }
  if (config.threads == 0) {  // absent or auto: what this process may use
    config.threads = strata::cpu::usable_threads();
    const std::optional<double> limit = strata::cpu::cgroup_cpu_limit();
    spdlog::info("threads: {} (the CPUs this process may use: affinity {}{})",
                 config.threads, strata::cpu::read_cpu_info().allowed_cpus,
                 limit ? absl::StrCat(", cgroup CPU limit ", *limit) : "");
  }

  if (absl::Status st = strata::grpc_tls::resolve_link_security(
          &config.tls, {config.listen}, /*require_peers=*/true,
          "strata-worker");
      !st.ok()) {
    return fail_config(
        absl::StrCat(config_path.empty() ? "" : absl::StrCat(config_path, ": "),
                     st.message()));
  }

  // Signals are taken by sigwait() below, on the main thread only.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  grpc::ServerBuilder builder;
  int port = 0;
  // No SO_REUSEPORT: a port another server holds is refused, not shared.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Mutual TLS: a peer without a certificate from the cluster CA is
  // refused in the handshake; a certificate name not in tls.peers gets
  // PERMISSION_DENIED on every call, before the handler.
  builder.AddListeningPort(
      config.listen, strata::grpc_tls::server_credentials(config.tls), &port);
  // Messages: the configured bound (LoadShard refuses a shard whose full
  // micro-batch would not fit it; each frame's size is checked against its
  // shape on receipt).
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config.max_message_bytes));
  // Few streams per connection: a coordinator uses a handful (control,
  // Results), the previous stage one (Activations).
  strata::grpc_tls::ServerLimits limits;
  limits.max_concurrent_streams = 16;
  strata::grpc_tls::add_server_limits(builder, limits);
  // The service is registered before the port is bound; it learns its
  // address (its default name) right after, before the port is printed.
  const std::string host = config.listen.substr(0, config.listen.rfind(':'));
  auto service = std::make_unique<strata::worker::WorkerService>(config);
  // A shard's weight repack in place on a terminal, else a log line at
  // its start and end (model/progress.h).
  strata::StderrProgress progress_output;
  strata::Progress progress(progress_output);
  service->set_progress(&progress);
  if (auto choice = strata::worker::parse_backend_choice(config.backend);
      choice.ok() && choice->kind == strata::worker::BackendChoice::Kind::kCuda) {
    // Describe names the GPU (two workers on one GPU get no NCCL link).
    if (auto gpu = strata::worker::cuda_device(choice->device); gpu.ok()) {
      service->set_gpu_uuid(gpu->uuid);
    }
  }
#ifdef STRATA_HAVE_NCCL
  // A GPU worker makes NCCL links to GPU neighbours the coordinator pairs
  // it with (Describe: nccl_link); their frames wait as long as results do.
  if (auto choice = strata::worker::parse_backend_choice(config.backend);
      choice.ok() && choice->kind == strata::worker::BackendChoice::Kind::kCuda) {
    service->set_frame_transport(strata::worker::make_nccl_transport(
        choice->device, std::chrono::milliseconds(config.answer_timeout_ms)));
  }
#endif
  {
    // Read bandwidth and FLOP rate for Describe (planning): measured on the
    // first start (about a second), then read from the tune cache.
    strata::ThreadPool pool(config.threads);
    const strata::cpu::MachineRates rates =
        strata::cpu::cached_machine_rates(pool, "", &progress);
    service->set_machine_rates(rates.read_bytes_per_s, rates.flops_per_s,
                               rates.matmul_overhead_s);
    std::vector<strata::v1::ReadRate> read_rates;
    std::string points;
    for (const strata::cpu::ReadPoint& p : rates.read_points) {
      strata::v1::ReadRate r;
      r.set_working_set_bytes(static_cast<uint64_t>(p.bytes));
      r.set_bytes_per_s(p.bytes_per_s);
      read_rates.push_back(r);
      absl::StrAppend(&points, points.empty() ? "" : ", ", p.bytes >> 20,
                      " MiB ", absl::SixDigits(p.bytes_per_s / 1e9), " GB/s");
    }
    service->set_read_rates(std::move(read_rates));
    if (!points.empty())
      spdlog::info("decode read rate by working set: {}", points);
    spdlog::info(
        "machine rates: decode reads {:.1f} GB/s (STREAM read {:.1f} GB/s), "
        "{:.1f} GFLOP/s, {:.1f} us a decode matmul besides its reads ({} {})",
        rates.read_bytes_per_s / 1e9, rates.stream_read_bytes_per_s / 1e9,
        rates.flops_per_s / 1e9, rates.matmul_overhead_s * 1e6,
        rates.from_cache ? "from" : "measured, cached in", rates.cache_path);
  }
  builder.RegisterService(service.get());
  strata::grpc_ops::add_health_and_reflection(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "strata-worker: cannot listen on " << config.listen << "\n";
    return 1;
  }
  const std::string bound = absl::StrCat(host, ":", port);
  service->set_bound_address(bound);
  // Serving once it answers; "strata.v1.Worker.shard" follows the shard.
  strata::grpc_ops::set_serving(*server, true, {"strata.v1.Worker"});
  strata::grpc_ops::set_serving(*server, "strata.v1.Worker.shard", false);
  service->set_on_shard([s = server.get()](bool loaded) {
    strata::grpc_ops::set_serving(*s, "strata.v1.Worker.shard", loaded);
  });
  std::cout << "listening on " << bound << std::endl;
  spdlog::info("{}: serving on {} ({}), {} threads, memory budget {} bytes",
               service->worker_id(), bound,
               config.tls.plaintext() ? "plaintext, insecure" : "mutual TLS",
               config.threads, config.memory_budget_bytes);

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("{}: signal {}, stopping", service->worker_id(), sig);
  strata::grpc_ops::set_serving(*server, false, {"strata.v1.Worker"});
  service->shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  return 0;
}
