// `strata serve MODEL.gguf [--workers N] [--listen HOST:PORT] [-t THREADS]
// [-c CTX] [--max-sequences S] [--kv-type f16|f32] [--backend cpu|cuda[:N]] [--trace FILE]
// [--http HOST:PORT|off] [--api-key KEY]`:
// single-node mode. The coordinator and N pipeline stages run in this
// process, chained in-process, serving the strata.v1.Inference API — the
// same one `strata-coordinator` serves for a cluster — and the
// OpenAI-compatible HTTP API (coordinator/http/api.h). With no flags it
// listens on 127.0.0.1:50051 (gRPC) and 127.0.0.1:8080 (HTTP), or the next
// free ports, and prints "listening on HOST:PORT" then "http listening on
// HOST:PORT". The API key (--api-key, else $STRATA_API_KEY) guards both.
// Stops on SIGINT / SIGTERM.
#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <optional>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/cli/kernel_flags.h"
#include "coordinator/api_key.h"
#include "coordinator/cluster_config.h"
#include "coordinator/grpc_health.h"
#include "coordinator/http/api.h"
#include "coordinator/http/server.h"
#include "coordinator/inference_service.h"
#include "coordinator/single_node.h"
#include "model/progress.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/kv_cache.h"

namespace strata::cli {
namespace {

volatile std::sig_atomic_t g_serve_stop = 0;
void on_serve_signal(int) { g_serve_stop = 1; }

struct ServeOptions {
  std::string model;
  int workers = 1;
  std::string listen;  // "": 127.0.0.1:50051 or the next free port
  int threads = 0;
  int ctx = 0;
  int max_sequences = 8;
  int prefill_chunk = 512;
  std::string prefill_chunk_beside_decode = "auto";  // or rows, 0 .. 4096
  std::string kv_type = "f16";
  std::string trace;
  std::string http;  // "": 127.0.0.1:8080 or the next free port; "off"
  std::string api_key;
  std::string prefix_cache = "on";
  int prefix_cache_blocks = -1;
  std::string chat_template;  // "": the model's
  std::string served_model_name;  // "": the GGUF's general.name
  std::string cors_allow_origin = "*";
  std::string backend = "cpu";  // every stage's: cpu, cuda, cuda:N
};

int serve_fail(const std::string& what, const absl::Status& status) {
  return report_failure("serve", what, status);
}

int serve(const ServeOptions& o) {
  // The stages' weight repack: in place on a terminal, else a log line at
  // each start and end (model/progress.h). Outlives the cluster below.
  StderrProgress progress_output;
  Progress progress(progress_output);
  coordinator::SingleNodeOptions s;
  s.progress = &progress;
  s.model = o.model;
  s.workers = o.workers;
  s.threads = o.threads;
  s.context_length = o.ctx;
  s.max_sequences = o.max_sequences;
  s.prefill_chunk = o.prefill_chunk;
  s.prefill_chunk_beside_decode = o.prefill_chunk_beside_decode == "auto"
                                      ? coordinator::kAutoPrefillChunkBesideDecode
                                      : std::stoi(o.prefill_chunk_beside_decode);
  if (o.prefill_chunk + o.max_sequences > 4096) {
    return serve_fail("--prefill-chunk",
                      absl::InvalidArgumentError(absl::StrCat(
                          o.prefill_chunk, " rows with --max-sequences ", o.max_sequences,
                          " exceed the 4096 rows of a micro-batch")));
  }
  if (absl::StatusOr<worker::BackendChoice> choice = worker::parse_backend_choice(o.backend);
      !choice.ok()) {
    return serve_fail("--backend", choice.status());
  }
  s.backend = o.backend;
  s.trace = o.trace;
  s.chat_template = o.chat_template;
  s.served_model_name = o.served_model_name;
  s.prefix_cache_blocks = o.prefix_cache == "off" ? 0 : o.prefix_cache_blocks;
  s.kv_type = worker::parse_kv_type(o.kv_type).value_or(GgmlType::kF16);  // checked
  if (!o.listen.empty()) {
    if (absl::Status st = coordinator::check_address(o.listen, true); !st.ok()) {
      return serve_fail("--listen", st);
    }
  }
  if (!o.http.empty() && o.http != "off") {
    if (absl::Status st = coordinator::check_address(o.http, true); !st.ok()) {
      return serve_fail("--http", st);
    }
  }
  // Logs (one line per HTTP request) go to stderr: stdout carries the
  // "listening on" lines that scripts read.
  if (spdlog::get("strata") == nullptr) spdlog::set_default_logger(spdlog::stderr_logger_mt("strata"));
  const std::string api_key = coordinator::resolve_api_key(o.api_key);
  auto cluster = coordinator::make_single_node(s);
  if (!cluster.ok()) return serve_fail(o.model, cluster.status());
  std::fprintf(stderr, "strata serve: loading %s on %d stage%s\n",
               o.model.c_str(), o.workers, o.workers == 1 ? "" : "s");
  if (absl::Status st = (*cluster)->wait_serving(absl::Minutes(10)); !st.ok()) {
    return serve_fail(o.model, st);
  }
  coordinator::InferenceService service(**cluster, api_key);

  // The given address, or 127.0.0.1 from port 50051 up to the first free.
  std::unique_ptr<grpc::Server> server;
  std::string host = "127.0.0.1";
  int port = 0;
  if (!o.listen.empty()) {
    auto started = coordinator::start_grpc_server(service, o.listen, &port);
    if (!started.ok()) return serve_fail("--listen", started.status());
    server = *std::move(started);
    host = o.listen.substr(0, o.listen.rfind(':'));
  } else {
    for (int p = 50051; p < 50051 + 100 && !server; ++p) {
      auto started = coordinator::start_grpc_server(
          service, host + ":" + std::to_string(p), &port);
      if (started.ok()) server = *std::move(started);
    }
    if (!server) {
      return serve_fail("", absl::UnavailableError(
                                "no free port in 127.0.0.1:50051 .. 50150; "
                                "give one with --listen HOST:PORT"));
    }
  }
  auto health = coordinator::publish_cluster_health(*server, **cluster);
  std::printf("listening on %s:%d\n", host.c_str(), port);
  std::fflush(stdout);

  // The HTTP API: the given address, or 127.0.0.1 from 8080 up.
  coordinator::http::OpenAiApi api(**cluster, {api_key});
  std::unique_ptr<coordinator::http::HttpServer> http;
  if (o.http != "off") {
    http = std::make_unique<coordinator::http::HttpServer>(
        coordinator::http::openai_server_options(o.cors_allow_origin),
        [&api](coordinator::http::Request r, std::shared_ptr<coordinator::http::Responder> out) {
          api.handle(std::move(r), std::move(out));
        });
    auto bound = coordinator::http::start_with_fallback(
        *http, o.http.empty() ? "127.0.0.1:8080" : o.http, o.http.empty());
    if (!bound.ok()) {
      server->Shutdown(std::chrono::system_clock::now());
      return serve_fail("--http", bound.status());
    }
    std::printf("http listening on %s\n", bound->c_str());
    std::fflush(stdout);
  }

  std::signal(SIGINT, on_serve_signal);
  std::signal(SIGTERM, on_serve_signal);
  while (!g_serve_stop) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
  std::fprintf(stderr, "strata serve: stopping\n");
  if (http) http->stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Serve a GGUF model over gRPC on this machine (single-node mode: the "
      "coordinator and its workers in one process)");
  cmd->add_option("model", o->model, "GGUF model")->required();
  // Ranges checked at parse time (exit 2 naming the flag); --workers is
  // held to the model's block count once it is open.
  cmd->add_option("--workers", o->workers,
                  "pipeline stages, each a shard of the blocks (1)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--listen", o->listen,
                  "HOST:PORT (127.0.0.1:50051 or the next free port)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return text.empty() ? "empty: give HOST:PORT, or leave the flag out" : "";
          },
          "HOST:PORT"));
  add_threads_flag(cmd, &o->threads, "compute threads in all, shared by the stages");
  cmd->add_option("-c,--ctx-size", o->ctx, "context length; 0: the model's (0)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--max-sequences", o->max_sequences,
                  "sequences generated at once (8)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--prefill-chunk", o->prefill_chunk,
                  "rows of one prompt chunk in a micro-batch, beside the decode rows (512)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--prefill-chunk-beside-decode", o->prefill_chunk_beside_decode,
                  absl::StrCat("prompt rows of a micro-batch while any sequence decodes, so "
                               "long prompts delay each decoding stream's next token by "
                               "that many rows, not a whole chunk; 0: --prefill-chunk; auto: ",
                               coordinator::kDefaultPrefillChunkBesideDecode,
                               " on the cpu backend, 0 on cuda (auto)"))
      ->check(CLI::IsMember({"auto"}) | CLI::Range(0, 4096));
  add_kv_type_flag(cmd, &o->kv_type);
  cmd->add_option("--backend", o->backend,
                  "where every stage runs: cpu, cuda (device 0) or cuda:N (cpu)");
  cmd->add_option("--http", o->http,
                  "HOST:PORT of the OpenAI-compatible HTTP API, or off (127.0.0.1:8080 "
                  "or the next free port)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return text.empty() ? "empty: give HOST:PORT or off" : "";
          },
          "HOST:PORT|off"));
  cmd->add_option("--chat-template", o->chat_template,
                  "Jinja chat template file overriding the model's");
  cmd->add_option("--served-model-name,--alias", o->served_model_name,
                  "the name clients give as `model` (vLLM's --served-model-name, "
                  "llama.cpp's --alias; default: the GGUF's general.name)");
  cmd->add_option("--cors-allow-origin", o->cors_allow_origin,
                  "browser pages of other origins may call the HTTP API: * (any), off, or "
                  "one origin such as https://ui.example.com (*)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            const absl::Status st = coordinator::check_cors_allow_origin(text);
            return st.ok() ? "" : std::string(st.message());
          },
          "*|off|ORIGIN"));
  cmd->add_option("--api-key", o->api_key,
                  "bearer token both APIs require (default: $STRATA_API_KEY; none)");
  cmd->add_option("--trace", o->trace,
                  "write block-output hashes as JSON lines (debug; see "
                  "scripts/trace-diff.py)");
  cmd->add_option("--prefix-cache", o->prefix_cache,
                  "reuse the KV of shared prompt prefixes, in blocks of 16 tokens (on)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--prefix-cache-blocks", o->prefix_cache_blocks,
                  "prefix cache blocks on every stage; -1: one context's worth (-1)")
      ->check(CLI::Range(-1, 1 << 20));
  cmd->callback([o, &exit_code] { exit_code = serve(*o); });
}

}  // namespace strata::cli
