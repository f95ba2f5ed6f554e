// strata::Client: the C++ client of a strata cluster's public API
// (strata.v1.Inference, proto/strata/v1/inference.proto), served by
// `strata-coordinator` and by `strata serve MODEL.gguf` in single-node mode.
//
// This header is all a user needs: it uses plain structs, absl::Status and
// absl::StatusOr, and no generated protobuf or gRPC types. Install the
// package (`cmake --install BUILD --prefix PREFIX`), then
//
//   find_package(strata CONFIG REQUIRED)
//   target_link_libraries(app PRIVATE strata::client)
//
// Example (error handling shortened):
//
//   auto client = strata::Client::connect("127.0.0.1:50051");
//   if (!client.ok()) return fail(client.status());
//   strata::GenerateOptions request;
//   request.prompt = "Once upon a time";
//   request.max_tokens = 32;
//   auto result = (*client)->generate_stream(
//       request, [](const strata::Delta& d) {
//         std::cout << d.text << std::flush;
//         return true;  // false cancels the generation
//       });
//   if (!result.ok()) std::cerr << result.status() << "\n";
//
// Errors: every call returns the server's gRPC status as an absl::Status of
// the same code (the numbering is shared) and the server's message, e.g.
// UNAVAILABLE "worker w1 (127.0.0.1:50062) died", INVALID_ARGUMENT
// "max_tokens: 10000000 exceeds 1048576", DEADLINE_EXCEEDED when the call's
// deadline passed, CANCELLED after cancel(). A server that breaks the
// protocol (a Generate stream with two `done` events, a delta after `done`,
// a stream that ends without `done`, an event that is neither) gives
// INTERNAL with a message that says what came; the call is then cancelled.
//
// Units: token counts in tokens, times in milliseconds (ms), rates in
// tokens per second (tok/s).
//
// Threads: a Client may be used from any number of threads at once; each
// call blocks its caller. cancel() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata {

// How a Client talks to its server.
struct ClientOptions {
  // Deadline of each call, from its start, in place of the defaults below;
  // 0: the defaults. A Generate call counts until its last event, so a long
  // generation needs a long deadline.
  std::chrono::milliseconds deadline{0};
  // The deadlines when neither `deadline` nor the request gives one, so
  // that a server that stops answering (frozen, or a network that drops
  // everything) never hangs a call: Generate 10 min, the other calls 30 s.
  // 0: none.
  std::chrono::milliseconds generate_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds call_timeout{std::chrono::seconds(30)};
  // gRPC keepalive: a ping every keepalive_time, also between calls; a
  // connection whose ping is not answered within keepalive_timeout is
  // closed, and its calls end UNAVAILABLE (a frozen server is noticed in
  // about 2 s). keepalive_time 0: no pings.
  std::chrono::milliseconds keepalive_time{1000};
  std::chrono::milliseconds keepalive_timeout{1000};
  // Sent with every call as "authorization: Bearer <api_key>" when not
  // empty (the server's api_key / STRATA_API_KEY).
  std::string api_key;
  // Largest message accepted from the server, in bytes (a GenerateDone
  // carries the prompt's ids and the whole text).
  int max_receive_bytes = 64 << 20;
};

// The sampler's settings (GenerateRequest.sampling). Unset optionals and
// zeros take the server's defaults: greedy.
struct SamplingOptions {
  float temperature = 0.0f;                 // <= 0: greedy; at most 100
  int32_t top_k = 0;                        // 0: off
  std::optional<float> top_p;               // (0, 1]; server default 1
  float min_p = 0.0f;                       // [0, 1]
  std::optional<float> repeat_penalty;      // (0, 100]; server default 1
  float presence_penalty = 0.0f;            // [-100, 100]
  float frequency_penalty = 0.0f;           // [-100, 100]
  std::optional<int32_t> repeat_last_n;     // tokens; server default 64
  std::optional<uint64_t> seed;             // unset: the server picks one
                                            // and reports it
  std::map<int32_t, float> logit_bias;      // token id in [0, n_vocab) ->
                                            // bias in [-100, 100], added to
                                            // its logit (OpenAI's logit_bias)
};

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;
};

// Fill in the middle (GenerateRequest.infill): the model writes what goes
// between `prefix` and `suffix`, in llama.cpp's server's /infill layout with
// the model's FIM tokens (inference.proto); FAILED_PRECONDITION for a model
// without them.
struct FimFile {
  std::string filename;  // "" -> "tmp"
  std::string text;
};
struct FillInMiddle {
  std::string prefix;            // before the cursor
  std::string suffix;            // after the cursor
  std::string prompt;            // typed after prefix, kept whole
  std::vector<FimFile> extra;    // other files for context
  bool suffix_first = false;     // SPM order
};

// One Generate request (GenerateRequest). The input is the one optional
// set — `prompt_ids`, `messages` or `infill` — else `prompt` (setting two
// is INVALID_ARGUMENT).
struct GenerateOptions {
  std::string model;                 // empty: the served model
  std::string prompt;                // raw text, tokenized by the server
  std::optional<std::vector<int32_t>> prompt_ids;   // used as given
  std::optional<std::vector<ChatMessage>> messages; // through the model's
                                                    // chat template
  std::optional<FillInMiddle> infill;               // code completion
  std::optional<bool> add_special;   // add BOS etc. to `prompt`; server
                                     // default true
  bool parse_special = false;        // read "<|im_start|>" in `prompt` as
                                     // the special token
  std::optional<int32_t> max_tokens; // tokens to generate; server default 128
  SamplingOptions sampling;
  std::vector<std::string> stop;     // stop strings (excluded from the text)
  bool ignore_eos = false;           // keep going past end-of-generation ids
  bool logprobs = false;             // the chosen tokens' log-probabilities
  int32_t top_logprobs = 0;          // and the n most likely ones; 0 .. 20
  // This call's deadline; 0: ClientOptions::deadline, else
  // ClientOptions::generate_timeout.
  std::chrono::milliseconds deadline{0};
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;  // natural log of the probability at T = 1
};

struct TokenChoice {
  int32_t id = 0;
  float logprob = 0.0f;            // when logprobs were asked for
  std::vector<TokenLogprob> top;   // when top_logprobs > 0
};

// Tokens sampled since the last delta, and the text that became printable
// with them: `text` may be empty (a token that ends inside a UTF-8
// sequence, or text held back because it may begin a stop string).
struct Delta {
  std::vector<int32_t> ids;
  std::string text;
  std::vector<TokenChoice> choices;  // one per id when logprobs were asked
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
};

// The server's clock, in ms and tok/s.
struct Timings {
  double prefill_ms = 0;     // prompt forward passes up to the first token
  double decode_ms = 0;      // after the first token
  double prefill_tok_s = 0;
  double decode_tok_s = 0;
  double ttft_ms = 0;        // request received -> first token sampled
  double queue_ms = 0;       // request received -> first forward pass
};

struct GenerateResult {
  std::vector<int32_t> ids;          // every generated id, in order
  std::string text;                  // the whole generated text
  std::vector<TokenChoice> choices;  // when logprobs were asked
  std::string finish_reason;         // "stop" or "length"
  Usage usage;
  Timings timings;
  std::vector<int32_t> prompt_ids;   // the prompt as the server tokenized it
  uint64_t seed = 0;                 // the seed the sampler used
};

// Called once per delta, in order, on the calling thread. Return false to
// cancel the generation (generate_stream then returns CANCELLED).
using DeltaCallback = std::function<bool(const Delta&)>;

struct TokenizeOptions {
  std::string model;                 // empty: the served model
  std::optional<bool> add_special;   // server default true
  bool parse_special = false;
};

struct TokenizeResult {
  std::vector<int32_t> ids;
  std::vector<std::string> pieces;   // each id's bytes as the vocabulary
                                     // holds them (may be partial UTF-8)
};

// Embeddings (Client::embed): each input's pooled hidden state after the
// model's output norm, as llama.cpp's embedding mode computes it.
enum class Pooling {
  kDefault,  // the model's ({arch}.pooling_type when mean or last), else last
  kMean,     // the mean over every position
  kLast,     // the last position
};

struct EmbedOptions {
  std::string model;                  // empty: the served model
  Pooling pooling = Pooling::kDefault;
  bool normalize = true;              // L2-normalized vectors
  std::string cache_salt;             // GenerateOptions::cache_salt
  std::chrono::milliseconds deadline{0};  // 0: ClientOptions::generate_timeout
};

struct EmbedResult {
  std::vector<std::vector<float>> embeddings;  // one per input, [n_embd] each
  std::vector<int32_t> prompt_tokens;          // each input's tokens
  int32_t total_prompt_tokens = 0;
  std::string pooling;                         // "mean" or "last": what was used
};

struct ModelInfo {
  std::string name;
  std::string path;
  std::string architecture;          // general.architecture
  int32_t n_layer = 0;
  int32_t n_vocab = 0;
  int32_t context_length = 0;        // tokens; the context served
  std::string chat_template_family;  // the GGUF keys of its chat templates, e.g.
                                     // "tokenizer.chat_template", or ""
};

enum class ServingState { kUnspecified = 0, kServing, kDegraded, kStarting };

// "serving", "degraded", "starting" or "unspecified".
const char* serving_state_name(ServingState state);

struct Health {
  ServingState state = ServingState::kUnspecified;
  std::string message;
};

struct WorkerStatus {
  std::string address;
  std::string name;                  // its `name:` in the cluster config
  std::string state;                 // "serving", "loading", "unreachable", ...
  int32_t first_block = 0;           // its shard: [first_block, last_block)
  int32_t last_block = 0;
  bool embedding = false;
  bool head = false;
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes = 0;
  uint64_t memory_budget_bytes = 0;
  std::string device;
  std::string last_error;
  double last_seen_ms_ago = 0;
  // The link to the next stage: "grpc", "nccl", "in-process"; "" on the
  // last stage.
  std::string link_to_next;
};

struct ClusterStatus {
  ServingState state = ServingState::kUnspecified;
  ModelInfo model;
  std::vector<WorkerStatus> workers;  // in pipeline order
  int32_t active_sequences = 0;
  int32_t max_sequences = 0;
  uint64_t requests_served = 0;
  int32_t queued_requests = 0;        // waiting for a sequence slot
};

// A connection to one server. Owns its gRPC channel; destroying the Client
// while a call is in flight on another thread is not allowed.
class Client {
 public:
  // OK when `address` is "HOST:PORT" as connect() takes it; else
  // INVALID_ARGUMENT saying why ("server address: ...").
  static absl::Status check_address(const std::string& address);

  // A client of the server at `address` ("HOST:PORT", e.g.
  // "127.0.0.1:50051"). Opens no connection yet (the first call does), so
  // an unreachable server shows as UNAVAILABLE on the first call.
  // INVALID_ARGUMENT for an address that is not HOST:PORT (empty, a scheme
  // such as "http://", a port outside 1 .. 65535, an IPv6 host without
  // brackets) or bad options.
  static absl::StatusOr<std::unique_ptr<Client>> connect(
      const std::string& address, const ClientOptions& options = {});

  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& address() const;

  // Generates to the end and returns the result (ids, text, finish reason,
  // usage, timings, prompt ids, seed).
  absl::StatusOr<GenerateResult> generate(const GenerateOptions& request);

  // The same, calling `on_delta` for each delta as it arrives. The result's
  // ids are those of every delta, in order.
  absl::StatusOr<GenerateResult> generate_stream(
      const GenerateOptions& request, const DeltaCallback& on_delta);

  // Cancels every call of this client in flight now (from any thread);
  // they return CANCELLED. Calls started afterwards are not affected.
  void cancel();

  // The server's tokenization of `text`: ids and their pieces.
  absl::StatusOr<TokenizeResult> tokenize(const std::string& text,
                                          const TokenizeOptions& options = {});

  // The text of `ids` (each in [0, n_vocab), else INVALID_ARGUMENT);
  // control tokens print their text only with `render_special`.
  absl::StatusOr<std::string> detokenize(const std::vector<int32_t>& ids,
                                         const std::string& model = "",
                                         bool render_special = false);

  // One vector per text (1 .. 2048 texts, each tokenized with the model's
  // BOS/EOS and at most the context), or per list of token ids. Errors:
  // INVALID_ARGUMENT (empty or too many inputs, ids outside the
  // vocabulary), OUT_OF_RANGE (an input longer than the context), and
  // those of generate().
  absl::StatusOr<EmbedResult> embed(const std::vector<std::string>& texts,
                                    const EmbedOptions& options = {});
  absl::StatusOr<EmbedResult> embed_ids(const std::vector<std::vector<int32_t>>& inputs,
                                        const EmbedOptions& options = {});

  absl::StatusOr<std::vector<ModelInfo>> list_models();
  absl::StatusOr<Health> health();
  absl::StatusOr<ClusterStatus> cluster_status();

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  // embed (texts) or embed_ids (ids): one of them is null.
  absl::StatusOr<EmbedResult> embed_inputs(const std::vector<std::string>* texts,
                                           const std::vector<std::vector<int32_t>>* ids,
                                           const EmbedOptions& options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
