#include "coordinator/http/api.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <optional>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "coordinator/api_key.h"
#include "coordinator/chat_output.h"
#include "coordinator/embedding.h"
#include "coordinator/http/embeddings.h"
#include "coordinator/http/infill.h"
#include "coordinator/http/metrics_page.h"
#include "coordinator/http/openai.h"
#include "coordinator/prompt.h"

namespace strata::coordinator::http {
namespace {

// Responses keep their members in the order written (OpenAI's order;
// completions' top_logprobs most likely first).
using json = nlohmann::ordered_json;
constexpr const char* kJson = "application/json";
constexpr absl::Duration kPoll = absl::Milliseconds(20);

Headers retry_headers(const ApiError& e) {
  if (e.retry_after_s <= 0) return {};
  return {{"Retry-After", std::to_string(e.retry_after_s)}};
}

// A token as OpenAI's logprobs show it: text (invalid UTF-8 replaced when
// dumped) and its bytes.
json token_entry(const tokenizer::Tokenizer& tok, int32_t id, float logprob) {
  const std::string_view piece = tok.piece(id, true);
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return {{"token", std::string(piece)}, {"logprob", logprob}, {"bytes", std::move(bytes)}};
}

// The logprobs of one chat choice's tokens: {"content": [...]} entries.
void add_chat_logprobs(const tokenizer::Tokenizer& tok, const std::vector<v1::SampledToken>& tokens,
                       json* content) {
  for (const v1::SampledToken& t : tokens) {
    json e = token_entry(tok, t.id(), t.logprob());
    json top = json::array();
    for (const v1::TokenLogprob& l : t.top()) top.push_back(token_entry(tok, l.id(), l.logprob()));
    e["top_logprobs"] = std::move(top);
    content->push_back(std::move(e));
  }
}

// A completions top_logprobs entry: the most likely tokens' text ->
// log-probability, most likely first, and the chosen token's too when it is
// not among them (OpenAI's legacy completions: up to logprobs + 1 entries).
json completion_top(const tokenizer::Tokenizer& tok, int32_t chosen, float chosen_logprob,
                    const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& top) {
  json out = json::object();
  bool has_chosen = false;
  for (const v1::TokenLogprob& l : top) {
    out[std::string(tok.piece(l.id(), true))] = l.logprob();
    has_chosen = has_chosen || l.id() == chosen;
  }
  if (!has_chosen) out[std::string(tok.piece(chosen, true))] = chosen_logprob;
  return out;
}

// One token of completions' logprobs (parallel arrays): its text, its
// log-probability and top entry (null for a prompt's first token, which
// nothing before it scores), and its text offset; `offset` moves past it.
void add_completion_token(const tokenizer::Tokenizer& tok, int32_t id, json logprob, json top,
                          size_t* offset, json* lp) {
  const std::string piece(tok.piece(id, true));
  (*lp)["tokens"].push_back(piece);
  (*lp)["token_logprobs"].push_back(std::move(logprob));
  (*lp)["top_logprobs"].push_back(std::move(top));
  (*lp)["text_offset"].push_back(*offset);
  *offset += piece.size();
}

// Completions' logprobs of generated tokens; `offset` is the text offset so far.
void add_completion_logprobs(const tokenizer::Tokenizer& tok,
                             const std::vector<v1::SampledToken>& tokens, size_t* offset,
                             json* lp) {
  for (const v1::SampledToken& t : tokens) {
    add_completion_token(tok, t.id(), t.logprob(), completion_top(tok, t.id(), t.logprob(), t.top()),
                         offset, lp);
  }
}

// A scored prompt's tokens as completions' logprobs show them, before the
// generated ones: the first token with null (nothing before it), each other
// with its log-probability and its most likely tokens.
void add_prompt_logprobs(const tokenizer::Tokenizer& tok, std::span<const int32_t> prompt,
                         const std::vector<v1::TokenChoice>& scored, size_t* offset, json* lp) {
  for (size_t i = 0; i < prompt.size(); ++i) {
    const v1::TokenChoice* t = i >= 1 && i - 1 < scored.size() ? &scored[i - 1] : nullptr;
    add_completion_token(tok, prompt[i], t != nullptr ? json(t->logprob()) : json(nullptr),
                         t != nullptr ? completion_top(tok, t->id(), t->logprob(), t->top())
                                      : json(nullptr),
                         offset, lp);
  }
}

// A batch's error names its prompt, "prompt[p]: ...", and a token id in it
// "prompt[p][k]: ..." (prompt preparation names the fields "prompt" and
// "prompt_ids.ids[k]" of the one request it got). A lone prompt's error
// stays as it is.
absl::Status name_prompt(const absl::Status& status, size_t p, bool lone) {
  if (lone) return status;
  absl::string_view m = status.message();
  const std::string name = absl::StrCat("prompt[", p, "]");
  if (absl::ConsumePrefix(&m, "prompt_ids.ids[")) {
    return absl::Status(status.code(), absl::StrCat(name, "[", m));
  }
  absl::ConsumePrefix(&m, "prompt: ");
  return absl::Status(status.code(), absl::StrCat(name, ": ", m));
}

// echo + logprobs with n > 1: at most this many prompt log-probabilities
// (each with its top tokens) copied from a prompt's first choice to the
// others, about 100 MB of JSON.
constexpr int64_t kMaxCopiedPromptLogprobs = int64_t{1} << 20;

json empty_completion_logprobs() {
  return {{"tokens", json::array()},
          {"token_logprobs", json::array()},
          {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

std::string random_id(const char* prefix, uint64_t request_id) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("%s%016x%x", prefix, rng(), request_id);
}

// One choice of a generation as it runs.
// A URL path segment with its %XX escapes decoded (RFC 3986 2.1); a
// malformed escape is kept as written.
std::string percent_decoded(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
      out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

struct Choice {
  std::shared_ptr<SequenceHandle> handle;
  bool done = false;
  std::string text;
  std::string finish = "length";
  int completion_tokens = 0;
  json chat_logprobs = json::array();
  json completion_logprobs = empty_completion_logprobs();
  size_t offset = 0;
  double ttft_ms = 0;
  int cached_tokens = 0;  // prompt tokens restored from the prefix cache
  bool echoed = false;    // echo: the prompt went first
  ChatOutput output;      // chat: content, reasoning and tool calls
};

// A chat delta as OpenAI streams it: the fields that have something.
json chat_delta_json(const ChatOutput::Delta& d) {
  json delta = json::object();
  if (!d.content.empty()) delta["content"] = d.content;
  if (!d.reasoning_content.empty()) delta["reasoning_content"] = d.reasoning_content;
  if (!d.tool_calls.empty()) delta["tool_calls"] = d.tool_calls;
  return delta;
}

}  // namespace

struct OpenAiApi::Outcome {
  int status = 200;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  double ttft_ms = -1;
  std::string user;
  std::string note;  // the error message, for the log
};

OpenAiApi::Outcome OpenAiApi::failed(const absl::Status& status, Outcome& outcome,
                                     Responder& out) {
  const ApiError e = to_api_error(status);
  out.send(e.http_status, kJson, error_json(e), retry_headers(e));
  outcome.status = e.http_status;
  outcome.note = e.message;
  return outcome;
}

OpenAiApi::OpenAiApi(Cluster& cluster, ApiOptions options)
    : cluster_(cluster), options_(std::move(options)), created_(std::time(nullptr)) {}

ServerOptions openai_server_options(const std::string& cors_allow_origin) {
  ServerOptions o;
  o.cors_allow_origin = cors_allow_origin == "off" ? "" : cors_allow_origin;
  o.error_body = [](int status, const std::string& message) {
    return std::make_pair(std::string(kJson), error_json(api_error(status, message)));
  };
  return o;
}

void OpenAiApi::handle(Request request, std::shared_ptr<Responder> responder) {
  const auto start = std::chrono::steady_clock::now();
  Responder& out = *responder;
  Outcome outcome;
  auto fail = [&](const ApiError& e) {
    out.send(e.http_status, kJson, error_json(e), retry_headers(e));
    outcome.status = e.http_status;
    outcome.note = e.message;
  };
  const std::string& path = request.path;
  const bool is_get = request.method == "GET" || request.method == "HEAD";
  const bool is_post = request.method == "POST";
  auto wrong_method = [&](const char* allow) {
    ApiError e = api_error(405, absl::StrCat(request.method, " ", path, ": method not allowed; use ",
                                             allow));
    out.send(405, kJson, error_json(e), {{"Allow", allow}});
    outcome.status = 405;
    outcome.note = e.message;
  };
  const bool guarded = path.rfind("/v1/", 0) == 0 || path == "/tokenize" ||
                       path == "/detokenize" || path == "/infill" || path == "/completion" ||
                       path == "/completions" || path == "/embeddings";
  if (absl::Status st = guarded ? check_bearer(options_.api_key, request.authorization)
                                : absl::OkStatus();
      !st.ok()) {
    fail(to_api_error(st));
  } else if (path == "/v1/chat/completions" || path == "/v1/completions") {
    if (!is_post) {
      wrong_method("POST");
    } else {
      outcome = generate(path == "/v1/chat/completions" ? static_cast<int>(Endpoint::kChat)
                                                         : static_cast<int>(Endpoint::kCompletion),
                         request, out);
    }
  } else if (path == "/v1/embeddings" || path == "/embeddings") {
    if (!is_post) {
      wrong_method("POST");
    } else {
      outcome = embeddings(request, out);
    }
  } else if (path == "/infill" || path == "/completion" || path == "/completions") {
    if (!is_post) {
      wrong_method("POST");
    } else {
      outcome = llama_completion(static_cast<int>(path == "/infill" ? Endpoint::kInfill
                                                                   : Endpoint::kLlamaCompletion),
                                 request, out);
    }
  } else if (path == "/tokenize" || path == "/detokenize") {
    if (!is_post) {
      wrong_method("POST");
    } else {
      outcome = path == "/tokenize" ? tokenize(request, out) : detokenize(request, out);
    }
  } else if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
    const v1::ModelInfo& info = cluster_.model().info;
    json model = {{"id", info.name()},           {"object", "model"},
                  {"created", created_},         {"owned_by", "strata"},
                  {"max_model_len", cluster_.model().n_ctx}};
    if (!is_get) {
      wrong_method("GET");
    } else if (path == "/v1/models") {
      out.send(200, kJson, dump_json(json{{"object", "list"}, {"data", json::array({model})}}));
    } else if (percent_decoded(path.substr(11)) == info.name()) {
      // The SDK percent-encodes the id ("Smollm2 135M ..." has spaces).
      out.send(200, kJson, dump_json(model));
    } else {
      ApiError e = api_error(404, absl::StrCat("model '", percent_decoded(path.substr(11)),
                                               "' is not served here"),
                             "model");
      e.code = "model_not_found";
      fail(e);
    }
  } else if (path == "/health") {
    if (!is_get) {
      wrong_method("GET");
    } else {
      const v1::HealthResponse h = cluster_.health();
      const bool serving = h.state() == v1::HealthResponse::SERVING;
      std::string state = v1::HealthResponse::State_Name(h.state());
      for (char& c : state) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      outcome.status = serving ? 200 : 503;
      out.send(outcome.status, kJson,
               dump_json(json{{"status", serving ? "ok" : state}, {"message", h.message()}}),
               serving ? Headers{} : Headers{{"Retry-After", "1"}});
    }
  } else if (path == "/metrics") {
    if (!is_get) {
      wrong_method("GET");
    } else {
      out.send(200, "text/plain; version=0.0.4; charset=utf-8", metrics_page(cluster_));
    }
  } else {
    fail(api_error(404, absl::StrCat("no route for ", request.method, " ", path)));
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (path == "/health" || path == "/metrics") return;  // probes: no log line each
  spdlog::info("http {} {} {} {} {} prompt_tokens={} completion_tokens={} ttft_ms={:.1f} ms={:.1f}{}{}",
               request.id, request.remote, request.method, path.substr(0, 128), outcome.status,
               outcome.prompt_tokens, outcome.completion_tokens, outcome.ttft_ms, ms,
               outcome.user.empty() ? "" : " user=", outcome.user.substr(0, 64));
  if (outcome.status >= 400 && !outcome.note.empty()) {
    spdlog::info("http {} error: {}", request.id, outcome.note.substr(0, 512));
  }
}

OpenAiApi::Outcome OpenAiApi::generate(int endpoint_int, const Request& request, Responder& out) {
  const Endpoint endpoint = static_cast<Endpoint>(endpoint_int);
  const bool chat = endpoint == Endpoint::kChat;
  Outcome outcome;
  auto fail = [&](const absl::Status& st) { return failed(st, outcome, out); };
  absl::StatusOr<OpenAiRequest> parsed = parse_openai_request(endpoint, request.body);
  if (!parsed.ok()) return fail(parsed.status());
  outcome.user = parsed->generate.user();
  const ServedModel& model = cluster_.model();
  const tokenizer::Tokenizer& tok = *model.tokenizer;
  PromptOptions popts;
  popts.default_max_tokens = 0;  // chat: the rest of the context
  ChatOutputSpec output_spec;
  // One part a prompt (completions may send several); its choices are
  // parts[p]'s n, choice p * n + i.
  struct Part {
    SequenceRequest prepared;
    std::string echo_text;  // echo: the prompt's text as given (ids: their text)
    std::vector<v1::TokenChoice> scores;  // echo + logprobs: its first choice's
  };
  std::vector<Part> parts;
  parts.reserve(1 + parsed->more_prompts.size());
  int prompt_tokens = 0;
  for (size_t p = 0; p <= parsed->more_prompts.size(); ++p) {
    const v1::GenerateRequest& g = p == 0 ? parsed->generate : parsed->more_prompts[p - 1];
    absl::StatusOr<SequenceRequest> prepared = prepare_prompt(model, g, popts, &output_spec);
    if (!prepared.ok()) return fail(name_prompt(prepared.status(), p, parsed->more_prompts.empty()));
    Part& part = parts.emplace_back();
    part.prepared = *std::move(prepared);
    prompt_tokens += static_cast<int>(part.prepared.prompt.size());
    if (parsed->echo) {
      if (g.input_case() == v1::GenerateRequest::kPrompt) {
        part.echo_text = g.prompt();
      } else {
        tokenizer::DecodeOptions d;
        d.render_special = true;
        absl::StatusOr<std::string> text = tok.decode(part.prepared.prompt, d);
        if (!text.ok()) return fail(text.status());
        part.echo_text = *std::move(text);
      }
    }
  }
  outcome.prompt_tokens = prompt_tokens;
  // echo with logprobs: a prompt is scored once and each of its n choices
  // carries a copy of the scores. The copies cost no compute, so they are
  // bounded: n 128 of an 8k-token prompt with 20 top tokens would be half a
  // gigabyte of JSON.
  if (parsed->echo && parsed->generate.logprobs() && parsed->n > 1) {
    const int64_t copies = int64_t{parsed->n - 1} * prompt_tokens *
                           (int64_t{parsed->generate.top_logprobs()} + 1);
    if (copies > kMaxCopiedPromptLogprobs) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "n: ", parsed->n, " choices would each repeat the scores of ", prompt_tokens,
          " prompt tokens with ", parsed->generate.top_logprobs(), " top log-probabilities (",
          copies, " copied values, over ", kMaxCopiedPromptLogprobs,
          "); every choice shows the same prompt scores, so ask with n 1")));
    }
  }

  // n choices a prompt, one sequence each; a seed given makes choice i of
  // a prompt use seed + i.
  const int n = parsed->n;
  const int total = n * static_cast<int>(parts.size());
  std::vector<Choice> choices(total);
  for (int k = 0; k < total; ++k) {
    const int i = k % n;
    SequenceRequest sr = parts[k / n].prepared;
    sr.params.sampling.seed += static_cast<uint64_t>(i);
    // The prompt is scored once, by its choice 0: the others share its
    // scores (and may restore the prompt from the prefix cache).
    if (i > 0) sr.prompt_logprobs = -1;
    auto handle = cluster_.scheduler().submit(std::move(sr));
    if (!handle.ok()) {
      for (int j = 0; j < k; ++j) cluster_.scheduler().cancel(choices[j].handle->seq_id());
      return fail(handle.status());
    }
    choices[k].handle = *std::move(handle);
    if (chat) choices[k].output = ChatOutput(output_spec);
  }
  auto cancel_all = [&] {
    for (Choice& c : choices) {
      if (!c.done) cluster_.scheduler().cancel(c.handle->seq_id());
    }
  };

  const std::string id = random_id(chat ? "chatcmpl-" : "cmpl-", request.id);
  const int64_t created = std::time(nullptr);
  const std::string model_name = model.info.name();
  const bool stream = parsed->stream;
  const bool logprobs = parsed->generate.logprobs();
  auto chunk = [&](json choice_list) {
    json c = {{"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model_name},
              {"choices", std::move(choice_list)}};
    if (parsed->include_usage) c["usage"] = nullptr;
    return c;
  };
  if (stream) {
    out.start_events();
    if (chat) {
      // The role first, one choice a chunk as OpenAI streams n > 1 (a
      // client reading choices[0] of each chunk sees every choice's).
      for (int i = 0; i < total; ++i) {
        out.event(dump_json(chunk(json::array({json{{"index", i},
                                                    {"delta", {{"role", "assistant"}, {"content", ""}}},
                                                    {"logprobs", nullptr},
                                                    {"finish_reason", nullptr}}}))));
      }
    }
  }

  // Events until every choice is done; a client gone cancels them all.
  int remaining = total;
  std::optional<absl::Status> error;
  while (remaining > 0 && !error) {
    if (out.gone()) {
      cancel_all();
      outcome.status = 499;
      outcome.note = "the client went away";
      return outcome;
    }
    const absl::Duration wait = total == 1 ? kPoll : absl::Milliseconds(2);
    for (int i = 0; i < total && !error && !out.gone(); ++i) {
      Choice& c = choices[i];
      if (c.done) continue;
      Part& part = parts[i / n];
      // A scored echo: the prompt's choice 0's first event brings the
      // prompt's scores each of its choices' echo shows; the others' events
      // wait in their handles.
      if (i % n > 0 && parsed->echo && logprobs && !choices[i - i % n].echoed) continue;
      std::optional<SequenceEvent> e = c.handle->next(wait);
      if (!e) continue;
      if (e->kind == SequenceEvent::Kind::kError) {
        c.done = true;
        error = e->error;
        break;
      }
      if (parsed->echo && !c.echoed) {
        // The prompt before the choice's first text (with its logprobs:
        // this first event carries them).
        c.echoed = true;
        json lp = nullptr;
        if (logprobs) {
          if (i % n == 0) part.scores = std::move(e->prompt_logprobs);
          lp = empty_completion_logprobs();
          add_prompt_logprobs(tok, part.prepared.prompt, part.scores, &c.offset, &lp);
          c.completion_logprobs = lp;
        }
        if (stream) {
          out.event(dump_json(chunk(json::array({json{{"text", part.echo_text},
                                                      {"index", i},
                                                      {"logprobs", std::move(lp)},
                                                      {"finish_reason", nullptr}}}))));
        }
      }
      json piece_logprobs = nullptr;
      if (e->kind == SequenceEvent::Kind::kDelta) {
        c.completion_tokens += static_cast<int>(e->ids.size());
        c.text += e->text;
        if (logprobs) {
          if (chat) {
            json content = json::array();
            add_chat_logprobs(tok, e->tokens, &content);
            for (const json& x : content) c.chat_logprobs.push_back(x);
            piece_logprobs = {{"content", std::move(content)}};
          } else {
            json lp = empty_completion_logprobs();
            size_t offset = c.offset;
            add_completion_logprobs(tok, e->tokens, &offset, &lp);
            add_completion_logprobs(tok, e->tokens, &c.offset, &c.completion_logprobs);
            piece_logprobs = std::move(lp);
          }
        }
        ChatOutput::Delta d;
        if (chat) d = c.output.push(e->text);
        if (stream && ((chat ? !d.empty() : !e->text.empty()) || logprobs)) {
          json choice = chat ? json{{"index", i},
                                    {"delta", chat_delta_json(d)},
                                    {"logprobs", piece_logprobs},
                                    {"finish_reason", nullptr}}
                             : json{{"text", e->text},
                                    {"index", i},
                                    {"logprobs", piece_logprobs},
                                    {"finish_reason", nullptr}};
          out.event(dump_json(chunk(json::array({std::move(choice)}))));
        }
        continue;
      }
      // kDone.
      c.done = true;
      --remaining;
      c.finish = finish_reason_name(e->finish);
      ChatOutput::Delta last;
      if (chat) {
        last = c.output.finish();
        c.finish = c.output.finish_reason(c.finish);
      }
      c.completion_tokens = static_cast<int>(e->all_ids.size());
      c.text = part.echo_text + e->all_text;
      c.ttft_ms = e->timings.ttft_ms;
      c.cached_tokens = e->cached_tokens;
      if (outcome.ttft_ms < 0 || c.ttft_ms < outcome.ttft_ms) outcome.ttft_ms = c.ttft_ms;
      if (stream && chat && !last.empty()) {
        out.event(dump_json(chunk(json::array({json{{"index", i},
                                                    {"delta", chat_delta_json(last)},
                                                    {"logprobs", nullptr},
                                                    {"finish_reason", nullptr}}}))));
      }
      if (stream) {
        json choice = chat ? json{{"index", i},
                                  {"delta", json::object()},
                                  {"logprobs", nullptr},
                                  {"finish_reason", c.finish}}
                           : json{{"text", ""},
                                  {"index", i},
                                  {"logprobs", nullptr},
                                  {"finish_reason", c.finish}};
        out.event(dump_json(chunk(json::array({std::move(choice)}))));
      }
    }
  }
  int completion_tokens = 0;
  for (const Choice& c : choices) completion_tokens += c.completion_tokens;
  outcome.completion_tokens = completion_tokens;
  if (error) {
    cancel_all();
    const ApiError e = to_api_error(*error);
    outcome.status = e.http_status;
    outcome.note = e.message;
    if (stream) {  // the headers are out: the error is an event
      out.event(error_json(e));
      out.event("[DONE]");
      out.end_events();
    } else {
      out.send(e.http_status, kJson, error_json(e), retry_headers(e));
    }
    return outcome;
  }
  // A prompt's choices share it: its cached tokens are the most any of
  // them found in the prefix cache; summed over the prompts.
  int cached_tokens = 0;
  for (int p = 0; p < static_cast<int>(parts.size()); ++p) {
    int most = 0;
    for (int i = 0; i < n; ++i) most = std::max(most, choices[p * n + i].cached_tokens);
    cached_tokens += most;
  }
  const json usage = {{"prompt_tokens", prompt_tokens},
                      {"completion_tokens", completion_tokens},
                      {"total_tokens", prompt_tokens + completion_tokens},
                      {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
  if (stream) {
    if (parsed->include_usage) {
      json last = chunk(json::array());
      last["usage"] = usage;
      out.event(dump_json(last));
    }
    out.event("[DONE]");
    out.end_events();
    return outcome;
  }
  json list = json::array();
  for (int i = 0; i < total; ++i) {
    Choice& c = choices[i];
    if (chat) {
      json message = {{"role", "assistant"}, {"content", c.text}};
      if (c.output.parsing()) {
        const json calls = c.output.tool_calls();
        message["content"] = c.output.content();
        if (!c.output.reasoning_content().empty()) {
          message["reasoning_content"] = c.output.reasoning_content();
        }
        if (!calls.empty()) {
          message["tool_calls"] = calls;
          if (c.output.content().empty()) message["content"] = nullptr;
        }
      }
      list.push_back({{"index", i},
                      {"message", std::move(message)},
                      {"logprobs", logprobs ? json{{"content", c.chat_logprobs}} : json(nullptr)},
                      {"finish_reason", c.finish}});
    } else {
      list.push_back({{"text", c.text},
                      {"index", i},
                      {"logprobs", logprobs ? c.completion_logprobs : json(nullptr)},
                      {"finish_reason", c.finish}});
    }
  }
  out.send(200, kJson,
           dump_json(json{{"id", id},
                      {"object", chat ? "chat.completion" : "text_completion"},
                      {"created", created},
                      {"model", model_name},
                      {"choices", std::move(list)},
                      {"usage", usage}}));
  return outcome;
}

// llama.cpp server's /infill and /completion: one sequence, answered in its
// completion shape (infill.h): streamed as pieces and a last object with
// "stop": true (no [DONE]), or that object. n_indent and t_max_predict_ms
// end it here, as llama.cpp's server does: the sequence is cancelled on the
// scheduler.
OpenAiApi::Outcome OpenAiApi::llama_completion(int endpoint, const Request& request,
                                               Responder& out) {
  Outcome outcome;
  auto fail = [&](const absl::Status& st) { return failed(st, outcome, out); };
  absl::StatusOr<OpenAiRequest> parsed =
      parse_openai_request(static_cast<Endpoint>(endpoint), request.body);
  if (!parsed.ok()) return fail(parsed.status());
  outcome.user = parsed->generate.user();
  const ServedModel& model = cluster_.model();
  const tokenizer::Tokenizer& tok = *model.tokenizer;
  if (parsed->generate.ignore_eos()) {
    // llama.cpp's ignore_eos bans the end-of-generation tokens (its server
    // sets their logits to -inf); here a bias of -100 on each, over any the
    // request gave them.
    v1::SamplingParams* s = parsed->generate.mutable_sampling();
    std::vector<bool> biased(static_cast<size_t>(tok.n_tokens()), false);
    for (int i = 0; i < s->logit_bias_ids_size(); ++i) {
      const int32_t id = s->logit_bias_ids(i);
      if (!tok.is_valid(id) || !tok.is_end_of_generation(id)) continue;
      s->set_logit_bias_values(i, -100.0f);
      biased[static_cast<size_t>(id)] = true;
    }
    for (int32_t id = 0; id < tok.n_tokens(); ++id) {
      if (!biased[static_cast<size_t>(id)] && tok.is_end_of_generation(id)) {
        s->add_logit_bias_ids(id);
        s->add_logit_bias_values(-100.0f);
      }
    }
  }
  PromptOptions popts;
  popts.default_max_tokens = 0;  // llama.cpp's n_predict -1: the rest of the context
  absl::StatusOr<SequenceRequest> prepared = prepare_prompt(model, parsed->generate, popts);
  if (!prepared.ok()) return fail(prepared.status());
  InfillDone done;
  done.model = model.info.name();
  done.tokens_evaluated = static_cast<int>(prepared->prompt.size());
  outcome.prompt_tokens = done.tokens_evaluated;
  tokenizer::DecodeOptions d;
  d.render_special = true;
  absl::StatusOr<std::string> prompt_text = tok.decode(prepared->prompt, d);
  if (!prompt_text.ok()) return fail(prompt_text.status());
  done.prompt = *std::move(prompt_text);
  const GenerationParams& params = prepared->params;
  const worker::SamplingParams& sp = params.sampling;
  const bool stream = parsed->stream;
  done.generation_settings = {{"n_predict", parsed->prompt_only                  ? 0
                                            : parsed->generate.has_max_tokens() ? params.max_tokens
                                                                                : -1},
                              {"seed", sp.seed},
                              {"temperature", sp.temperature},
                              {"top_k", sp.top_k},
                              {"top_p", sp.top_p},
                              {"min_p", sp.min_p},
                              {"repeat_penalty", sp.repeat_penalty},
                              {"repeat_last_n", sp.penalty_last_n},
                              {"presence_penalty", sp.presence_penalty},
                              {"frequency_penalty", sp.frequency_penalty},
                              {"stop", params.stop},
                              {"ignore_eos", params.ignore_eos},
                              {"n_indent", parsed->n_indent},
                              {"t_max_predict_ms", parsed->t_max_predict_ms},
                              {"stream", stream}};
  const auto start = std::chrono::steady_clock::now();
  auto handle = cluster_.scheduler().submit(*std::move(prepared));
  if (!handle.ok()) return fail(handle.status());
  auto finish = [&] {
    if (parsed->prompt_only) {  // n_predict 0: the token generated is not shown
      done.content.clear();
      done.tokens.clear();
      done.tokens_predicted = 0;
      done.stop_type = "limit";
    }
    done.has_new_line = done.content.find('\n') != std::string::npos;
    outcome.completion_tokens = done.tokens_predicted;
    if (!parsed->return_tokens) done.tokens.clear();
    if (stream) {
      done.content.clear();
      done.tokens.clear();
    }
    json last = infill_done_json(done);
    if (!parsed->response_fields.empty()) {
      last = select_response_fields(last, parsed->response_fields);
    }
    if (stream) {
      out.event(dump_json(last));
      out.end_events();
    } else {
      out.send(200, kJson, dump_json(last));
    }
    return outcome;
  };
  if (stream) out.start_events();
  std::optional<std::chrono::steady_clock::time_point> first_token;
  auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  while (true) {
    if (out.gone()) {
      cluster_.scheduler().cancel((*handle)->seq_id());
      outcome.status = 499;
      outcome.note = "the client went away";
      return outcome;
    }
    std::optional<SequenceEvent> e = (*handle)->next(kPoll);
    if (!e) continue;
    if (e->kind == SequenceEvent::Kind::kError) {
      const ApiError err = to_api_error(e->error);
      outcome.status = err.http_status;
      outcome.note = err.message;
      if (stream) {
        out.event(error_json(err));
        out.end_events();
      } else {
        out.send(err.http_status, kJson, error_json(err), retry_headers(err));
      }
      return outcome;
    }
    if (e->kind == SequenceEvent::Kind::kDone) {
      done.content = e->all_text;
      done.tokens = e->all_ids;
      done.tokens_predicted = static_cast<int>(e->all_ids.size());
      done.cache_n = e->cached_tokens;
      done.stop_type = e->finish == FinishReason::kLength ? "limit"
                       : e->stop_word.empty()              ? "eos"
                                                           : "word";
      done.stopping_word = e->stop_word;
      done.prompt_ms = e->timings.prefill_ms;
      done.predicted_ms = e->timings.decode_ms;
      outcome.ttft_ms = e->timings.ttft_ms;
      return finish();
    }
    // A piece: llama.cpp's code-completion limits may end the sequence here.
    if (!first_token) {
      first_token = std::chrono::steady_clock::now();
      outcome.ttft_ms = ms_since(start);
    }
    const size_t before = done.content.size();
    done.content += e->text;
    done.tokens.insert(done.tokens.end(), e->ids.begin(), e->ids.end());
    done.tokens_predicted += static_cast<int>(e->ids.size());
    const size_t cut = indent_cut(done.content, parsed->n_indent);
    const bool late = parsed->t_max_predict_ms > 0 &&
                      e->text.find('\n') != std::string::npos &&
                      ms_since(*first_token) > static_cast<double>(parsed->t_max_predict_ms);
    if (cut != std::string::npos) done.content.resize(cut);
    if (stream && !e->ids.empty() && !parsed->prompt_only) {
      const std::string_view piece =
          std::string_view(done.content).substr(std::min(before, done.content.size()));
      out.event(dump_json(infill_piece_json(piece, e->ids, done.tokens_predicted,
                                            done.tokens_evaluated)));
    }
    if (cut != std::string::npos || late) {
      cluster_.scheduler().cancel((*handle)->seq_id());
      done.stop_type = "limit";
      done.prompt_ms = outcome.ttft_ms;
      done.predicted_ms = ms_since(*first_token);
      return finish();
    }
  }
}

OpenAiApi::Outcome OpenAiApi::embeddings(const Request& request, Responder& out) {
  Outcome outcome;
  auto fail = [&](const absl::Status& st) {
    return failed(absl::Status(st.code(), http_field_names(std::string(st.message()))), outcome,
                  out);
  };
  const ServedModel& model = cluster_.model();
  absl::StatusOr<EmbeddingsRequest> parsed =
      parse_embeddings_request(request.body, model.hp.n_embd);
  if (!parsed.ok()) return fail(parsed.status());
  absl::StatusOr<v1::EmbedResponse> done =
      run_embed(cluster_, parsed->embed, [&out] { return out.gone(); });
  if (!done.ok()) return fail(done.status());
  outcome.prompt_tokens = done->usage().prompt_tokens();
  out.send(200, kJson, embeddings_response_json(*done, model.info.name(), parsed->base64));
  return outcome;
}

OpenAiApi::Outcome OpenAiApi::tokenize(const Request& request, Responder& out) {
  Outcome outcome;
  auto fail = [&](const absl::Status& st) { return failed(st, outcome, out); };
  absl::StatusOr<json> body = parse_json_object(request.body);
  if (!body.ok()) return fail(body.status());
  const ServedModel& model = cluster_.model();
  // Text ("content", llama-server; "prompt", vLLM) or chat messages (vLLM):
  // both through prompt preparation, so the ids are what a generation uses.
  v1::GenerateRequest g;
  if (body->contains("messages")) {
    absl::StatusOr<OpenAiRequest> chat = parse_openai_request(Endpoint::kChat, request.body);
    if (!chat.ok()) return fail(chat.status());
    g = chat->generate;
  } else {
    const char* key = body->contains("content") ? "content" : "prompt";
    auto it = body->find(key);
    if (it == body->end()) return fail(absl::InvalidArgumentError("content: missing"));
    if (!it->is_string()) {
      return fail(absl::InvalidArgumentError(absl::StrCat(key, ": expected a string")));
    }
    if (it->get_ref<const std::string&>().empty()) {
      // Nothing to tokenize is not an error here (no generation follows).
      out.send(200, kJson,
               dump_json(json{{"tokens", json::array()}, {"count", 0},
                          {"max_model_len", model.n_ctx}}));
      return outcome;
    }
    g.set_prompt(it->get<std::string>());
    for (const char* flag : {"add_special", "add_special_tokens"}) {
      if (auto f = body->find(flag); f != body->end()) {
        if (!f->is_boolean()) {
          return fail(absl::InvalidArgumentError(absl::StrCat(flag, ": expected a boolean")));
        }
        g.set_add_special(f->get<bool>());
      }
    }
    // Special-token text is the special token unless "parse_special":
    // false, as llama.cpp's /tokenize and /v1/completions read it.
    g.set_parse_special(true);
    if (auto f = body->find("parse_special"); f != body->end()) {
      if (!f->is_boolean()) {
        return fail(absl::InvalidArgumentError("parse_special: expected a boolean"));
      }
      g.set_parse_special(f->get<bool>());
    }
    if (auto m = body->find("model"); m != body->end() && m->is_string()) {
      g.set_model(m->get<std::string>());
    }
  }
  g.set_max_tokens(1);
  absl::StatusOr<SequenceRequest> prepared = prepare_prompt(model, g);
  if (!prepared.ok() && !absl::IsOutOfRange(prepared.status())) return fail(prepared.status());
  std::vector<int32_t> ids;
  if (prepared.ok()) {
    ids = prepared->prompt;
  } else {  // longer than the context: still tokenized, as asked
    tokenizer::EncodeOptions e;
    e.add_special = g.has_add_special() ? g.add_special() : true;
    e.parse_special = g.parse_special();
    auto encoded = model.tokenizer->encode(g.prompt(), e);
    if (!encoded.ok()) return fail(encoded.status());
    ids = *std::move(encoded);
  }
  const bool with_pieces = body->value("with_pieces", false);
  json tokens = json::array();
  for (int32_t id : ids) {
    if (with_pieces) {
      tokens.push_back({{"id", id}, {"piece", std::string(model.tokenizer->piece(id, true))}});
    } else {
      tokens.push_back(id);
    }
  }
  outcome.prompt_tokens = static_cast<int>(ids.size());
  out.send(200, kJson,
           dump_json(json{{"tokens", std::move(tokens)},
                      {"count", ids.size()},
                      {"max_model_len", model.n_ctx}}));
  return outcome;
}

OpenAiApi::Outcome OpenAiApi::detokenize(const Request& request, Responder& out) {
  Outcome outcome;
  auto fail = [&](const absl::Status& st) { return failed(st, outcome, out); };
  absl::StatusOr<json> body = parse_json_object(request.body);
  if (!body.ok()) return fail(body.status());
  auto it = body->find("tokens");
  if (it == body->end()) return fail(absl::InvalidArgumentError("tokens: missing"));
  if (!it->is_array()) return fail(absl::InvalidArgumentError("tokens: expected an array"));
  const tokenizer::Tokenizer& tok = *cluster_.model().tokenizer;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok.n_tokens()) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("tokens[", i, "]: expected a token id in [0, ", tok.n_tokens(), ")")));
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  // Special tokens print their text ("<|im_start|>"), as llama.cpp's and
  // vLLM's /detokenize print them, unless "render_special": false.
  tokenizer::DecodeOptions d;
  d.render_special = true;
  if (auto r = body->find("render_special"); r != body->end()) {
    if (!r->is_boolean()) {
      return fail(absl::InvalidArgumentError("render_special: expected a boolean"));
    }
    d.render_special = r->get<bool>();
  }
  auto text = tok.decode(ids, d);
  if (!text.ok()) return fail(text.status());
  out.send(200, kJson, dump_json(json{{"content", *text}, {"prompt", *text}}));
  return outcome;
}

}  // namespace strata::coordinator::http
