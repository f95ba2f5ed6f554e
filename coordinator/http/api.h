// The OpenAI-compatible HTTP API over a Cluster: the routes, and thin
// handlers that map OpenAI JSON to a v1::GenerateRequest (openai.h), call
// prompt preparation (coordinator/prompt.h, shared with the gRPC API), run
// the sequences on the Scheduler and write OpenAI's response shapes.
//
//   POST /v1/chat/completions   chat.completion, or SSE chat.completion.chunk
//   POST /v1/completions        text_completion, streamed or not (with
//                               `suffix`: fill in the middle)
//   POST /infill                llama.cpp server's fill-in-the-middle:
//                               {"input_prefix", "input_suffix", "prompt",
//                               "input_extra", "n_predict", ...} ->
//                               {"content", "tokens", "stop", "timings", ...}
//   POST /completion            llama.cpp server's completion: {"prompt"
//                               (text or ids), "n_predict", ...} -> the
//                               same answer as /infill
//   POST /v1/embeddings         OpenAI's embeddings (also /embeddings;
//                               embeddings.h, coordinator/embedding.h)
//   GET  /v1/models, /v1/models/{id}
//   POST /tokenize              {"content"|"prompt"|"messages", "add_special",
//                                "with_pieces"} -> {"tokens", "count",
//                                "max_model_len"} (llama-server and vLLM)
//   POST /detokenize            {"tokens"} -> {"content", "prompt"}
//   GET  /health                200 while the cluster serves, else 503
//   GET  /metrics               Prometheus text (metrics_page.h)
//
// With an API key, /v1/*, /embeddings, /infill, /completion, /tokenize and /detokenize need `Authorization:
// Bearer KEY` (401); /health and /metrics stay open for probes and
// scrapers. A streamed request whose client goes away is cancelled on the
// scheduler at once (the poll is 20 ms). One log line per request (spdlog):
// id, route, status, tokens, TTFT, time.
//
// Threads: handle() is the HttpServer's Handler (any thread, many at once).
// Borrows the cluster, which must outlive the server.
#pragma once

#include <memory>
#include <string>

#include "coordinator/cluster.h"
#include "coordinator/http/server.h"

namespace strata::coordinator::http {

struct ApiOptions {
  std::string api_key;  // "": no authentication
};

class OpenAiApi {
 public:
  OpenAiApi(Cluster& cluster, ApiOptions options);

  void handle(Request request, std::shared_ptr<Responder> responder);

 private:
  struct Outcome;
  Outcome generate(int endpoint, const Request& request, Responder& out);
  // /infill and /completion (Endpoint::kInfill, kLlamaCompletion).
  Outcome llama_completion(int endpoint, const Request& request, Responder& out);
  Outcome embeddings(const Request& request, Responder& out);
  Outcome tokenize(const Request& request, Responder& out);
  Outcome detokenize(const Request& request, Responder& out);
  // Answers `status` as an OpenAI error object (with Retry-After where it
  // applies) and records it in `outcome` for the request's log line.
  static Outcome failed(const absl::Status& status, Outcome& outcome, Responder& out);

  Cluster& cluster_;
  const ApiOptions options_;
  const int64_t created_;  // the models' "created": when the API started
};

// Server options with OpenAI error objects for the server's own errors, and
// CORS for `cors_allow_origin` ("*" any origin, as llama.cpp's server and
// vLLM allow by default; "off" or "": none; else that origin).
ServerOptions openai_server_options(const std::string& cors_allow_origin = "*");

}  // namespace strata::coordinator::http
