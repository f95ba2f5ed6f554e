// `strata-coordinator --config FILE [--model PATH] [--listen HOST:PORT]
// [--trace FILE]`: serves strata.v1.Inference for a cluster of
// `strata-worker` processes described by a YAML config
// (coordinator/cluster_config.h; deploy/examples/cluster.yaml).
// `strata-coordinator --version` prints "strata-coordinator 0.1.0 (git
// 1a2b3c4)" (cmake/version.cmake).
//
// Prints "listening on HOST:PORT" (stdout) once the API is up, then "http
// listening on HOST:PORT" for the OpenAI-compatible HTTP API (`http_listen`,
// default 127.0.0.1:8080 or the next free port; --http overrides, "off"
// disables); the shards load in the background (Health says STARTING until
// they have; /health answers 503). Stops on SIGINT / SIGTERM.
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <string>

#include "coordinator/api_key.h"
#include "coordinator/cluster.h"
#include "coordinator/cluster_config.h"
#include "coordinator/grpc_health.h"
#include "coordinator/http/api.h"
#include "coordinator/http/server.h"
#include "coordinator/inference_service.h"
#include "model/log.h"
#include "strata_version.h"
#include "worker/grpc_link.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

int fail(const std::string& what, const absl::Status& st) {
  std::fprintf(stderr, "strata-coordinator: %s%s%s\n", what.c_str(),
               what.empty() ? "" : ": ", std::string(st.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata::coordinator;
  CLI::App app{
      "strata-coordinator: serves a model split over strata-worker "
      "processes"};
  app.set_version_flag("--version", strata::version_line("strata-coordinator"));
  std::string config_path, model, listen, trace, http_listen;
  app.add_option("--config", config_path, "cluster config (YAML)")->required();
  app.add_option("--model", model, "GGUF path (overrides `model`)");
  app.add_option("--listen", listen, "HOST:PORT (overrides `listen`)");
  app.add_option("--http", http_listen,
                 "HOST:PORT of the HTTP API, or off (overrides `http_listen`)");
  app.add_option("--trace", trace,
                 "write block-output hashes as JSON lines (overrides `trace`)");
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
    return app.exit(e) == 0 ? 0 : 2;
  }

  // Logs (one line per request) go to stderr: stdout carries the
  // "listening on" lines that scripts read.
  if (absl::Status st =
          strata::init_logging("strata-coordinator", log_level, log_format);
      !st.ok()) {
    std::fprintf(stderr, "strata-coordinator: %s\n",
                 std::string(st.message()).c_str());
    return 2;
  }
  auto config = load_cluster_config(config_path);
  if (!config.ok()) return fail("", config.status());
  if (absl::Status st = check_workers_running(*config); !st.ok())
    return fail(config_path, st);
  if (!model.empty()) config->model = model;
  if (!listen.empty()) {
    if (absl::Status st = check_address(listen, true); !st.ok()) {
      return fail("--listen", st);
    }
    config->listen = listen;
  }
  if (!trace.empty()) config->trace = trace;
  if (!http_listen.empty()) {
    if (http_listen != "off") {
      if (absl::Status st = check_address(http_listen, true); !st.ok()) {
        return fail("--http", st);
      }
    }
    config->http_listen = http_listen;
    config->http_listen_given = true;
  }
  if (!config->trace.empty()) {
    if (absl::Status st = check_trace_writable(config->trace); !st.ok()) {
      // The flag when given, else the config file's key.
      return fail(trace.empty() ? config_path : std::string("--trace"), st);
    }
  }
  if (config->model.empty()) {
    return fail(config_path,
                absl::InvalidArgumentError("model: missing (or give --model)"));
  }

  // Mutual TLS to every worker (or plaintext on loopback with insecure:
  // true): refused here, before anything starts, when neither is set.
  if (absl::Status st = resolve_link_security(*config); !st.ok()) {
    return fail(config_path, st);
  }

  auto served = open_served_model(config->model, config->context_length);
  if (!served.ok()) return fail(config->model, served.status());
  if (!config->chat_template.empty()) {
    if (absl::Status st = set_chat_template(**served, config->chat_template);
        !st.ok()) {
      return fail(config_path, st);
    }
  }
  if (!config->served_model_name.empty()) {
    if (absl::Status st = set_served_model_name(**served, config->served_model_name);
        !st.ok()) {
      return fail(config_path, st);
    }
  }

  // The pool: the pipeline's workers, then the spares (cluster.h).
  std::vector<WorkerConfig> pool = config->workers;
  pool.insert(pool.end(), config->spares.begin(), config->spares.end());
  std::vector<std::unique_ptr<WorkerControl>> workers;
  for (const WorkerConfig& w : pool) {
    workers.push_back(make_grpc_worker_control(w.address, worker_label(w),
                                               config->tls, w.name));
  }
  const strata::grpc_tls::TlsConfig tls = config->tls;
  FirstLinkFactory link =
      [pool, tls](strata::worker::ActivationLink::ResultCallback cb,
                  uint64_t shard_id, const std::vector<int>& members)
      -> absl::StatusOr<std::unique_ptr<strata::worker::ActivationLink>> {
    const WorkerConfig& first = pool[members.front()];
    const WorkerConfig& last = pool[members.back()];
    strata::worker::GrpcLinkOptions o;
    o.peer_name = worker_label(first);
    o.tls = tls;
    o.tls_name = first.name;
    o.results_tls_name = last.name;
    // The last stage's tokens come straight back on a stream of their own
    // (one hop, not one per stage); one worker has no hop to save.
    if (members.size() > 1) {
      o.results_from = last.address;
      o.results_peer_name = worker_label(last);
      o.shard_id = shard_id;
    }
    // A micro-batch may be a 512-row prefill chunk through every stage on
    // a busy machine; hangs are caught by keepalive and the health checks.
    o.answer_timeout = std::chrono::milliseconds(120000);
    return strata::worker::make_grpc_link(first.address, std::move(cb), o);
  };
  ClusterOptions options;
  options.config = *config;
  Cluster cluster(options, *std::move(served), std::move(workers), link);
  const std::string api_key = resolve_api_key(config->api_key);
  InferenceService service(cluster, api_key);
  int port = 0;
  auto server = start_grpc_server(service, config->listen, &port);
  if (!server.ok()) return fail("", server.status());
  auto health = publish_cluster_health(**server, cluster);
  const std::string host = config->listen.substr(0, config->listen.rfind(':'));
  std::printf("listening on %s:%d\n", host.c_str(), port);
  std::fflush(stdout);

  strata::coordinator::http::OpenAiApi api(cluster, {api_key});
  std::unique_ptr<strata::coordinator::http::HttpServer> http;
  if (config->http_listen != "off") {
    http = std::make_unique<strata::coordinator::http::HttpServer>(
        strata::coordinator::http::openai_server_options(config->cors_allow_origin),
        [&api](strata::coordinator::http::Request r,
               std::shared_ptr<strata::coordinator::http::Responder> out) {
          api.handle(std::move(r), std::move(out));
        });
    auto bound = strata::coordinator::http::start_with_fallback(
        *http, config->http_listen, !config->http_listen_given);
    if (!bound.ok()) {
      (*server)->Shutdown(std::chrono::system_clock::now());
      return fail("http_listen", bound.status());
    }
    std::printf("http listening on %s\n", bound->c_str());
    std::fflush(stdout);
  }

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  int status = 0;
  while (!g_stop) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, nullptr);
    // A placement that can never work (explicit ranges with a gap or past
    // the model's blocks, budgets no split fits) is final: say so and exit
    // rather than answer "starting" forever.
    const absl::Status ready = cluster.wait_serving(absl::ZeroDuration());
    if (absl::IsFailedPrecondition(ready)) {
      spdlog::error("cannot serve: {}", std::string(ready.message()));
      status = 1;
      break;
    }
  }
  spdlog::info("stopping");
  if (http) http->stop();
  (*server)->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
  return status;
}
