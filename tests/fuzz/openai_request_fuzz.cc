// libFuzzer target: the OpenAI-compatible HTTP API's request bodies
// (coordinator/http/openai.h) as a hostile client sends them: a body of
// /v1/chat/completions, /v1/completions or /infill becomes a GenerateRequest, which
// then goes through prepare_prompt (coordinator/prompt.h) with the served
// model, as the HTTP handler does; /tokenize-style bodies through
// parse_json_object and as /v1/embeddings bodies (parse_embeddings_request,
// prepare_embed_inputs, the answer's JSON). A refusal must become an OpenAI error object that is
// valid JSON with a 4xx status (never a 500 for the client's bytes).
// The model: SmolLM2-135M-Instruct when fetched, else stories260K.
//
// Input: one byte (% 4: 0 chat, 1 completions, 2 a JSON object body, 3
// /infill), then the body.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "coordinator/chat_output.h"
#include "coordinator/cluster.h"
#include "coordinator/embedding.h"
#include "coordinator/http/embeddings.h"
#include "coordinator/http/openai.h"
#include "coordinator/prompt.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace strata;  // NOLINT: a test harness
using coordinator::http::Endpoint;
using fuzz::check;

const coordinator::ServedModel& model() {
  static const coordinator::ServedModel* m = [] {
    const std::string path = fuzz::tokenizer_model_path();
    auto opened = coordinator::open_served_model(path, 2048);
    fuzz::require(opened.ok(), path + ": " + opened.status().ToString());
    return opened->release();
  }();
  return *m;
}

// A refusal as the HTTP API answers it.
void check_refusal(const absl::Status& status) {
  check(!status.ok(), "a refusal is an error");
  const coordinator::http::ApiError e = coordinator::http::to_api_error(status);
  check(e.http_status >= 400 && e.http_status < 500, "the client's bytes give a 4xx");
  const std::string body = coordinator::http::error_json(e);
  const auto parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  check(parsed.is_object() && parsed.contains("error"), "the error body is an OpenAI error");
}

// The same body as /v1/embeddings takes it: parsed, checked and tokenized
// as run_embed does, or refused with a 4xx; an answer of the inputs'
// count (vectors from the input's token ids) is valid JSON that holds
// every vector, as floats or as base64.
void check_embeddings(const coordinator::ServedModel& m, std::string_view body) {
  auto parsed = coordinator::http::parse_embeddings_request(body, m.hp.n_embd);
  if (!parsed.ok()) {
    check_refusal(parsed.status());
    return;
  }
  auto pooling = coordinator::resolve_pooling(m, parsed->embed.pooling());
  auto inputs = coordinator::prepare_embed_inputs(m, parsed->embed);
  if (!pooling.ok() || !inputs.ok()) {
    check_refusal(!pooling.ok() ? pooling.status() : inputs.status());
    return;
  }
  check(static_cast<int>(inputs->size()) == parsed->embed.inputs_size(), "one prompt per input");
  v1::EmbedResponse response;
  for (const std::vector<int32_t>& ids : *inputs) {
    check(!ids.empty() && ids.size() <= static_cast<size_t>(m.n_ctx), "an input fits the context");
    v1::Embedding* e = response.add_embeddings();
    for (size_t k = 0; k < ids.size() && k < 8; ++k) e->add_values(0.125f * ids[k] - 3.0f);
  }
  const std::string text =
      coordinator::http::embeddings_response_json(response, m.info.name(), parsed->base64);
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  check(json.is_object() && json["data"].size() == inputs->size(), "the answer is JSON, one per input");
  for (size_t i = 0; i < inputs->size() && !parsed->base64; ++i) {
    const auto& v = json["data"][i]["embedding"];
    check(v.size() == static_cast<size_t>(response.embeddings(static_cast<int>(i)).values_size()),
          "every value is written");
    for (size_t k = 0; k < v.size(); ++k) {
      check(v[k].get<float>() == response.embeddings(static_cast<int>(i)).values(static_cast<int>(k)),
            "a value reads back as the same float");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const coordinator::ServedModel& m = model();
  if (size < 1) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const int kind = data[0] % 4;
  if (kind == 2) {
    auto object = coordinator::http::parse_json_object(body);
    if (object.ok()) {
      check(object->is_object(), "parse_json_object gives an object");
      (void)coordinator::http::dump_json(*object);
    } else {
      check_refusal(object.status());
    }
    check_embeddings(m, body);
    return 0;
  }
  // Kind 3: /infill, or /completion with the first byte's top bit.
  const Endpoint endpoint = kind == 0   ? Endpoint::kChat
                            : kind == 1 ? Endpoint::kCompletion
                            : (data[0] & 0x80) != 0 ? Endpoint::kLlamaCompletion
                                                    : Endpoint::kInfill;
  auto parsed = coordinator::http::parse_openai_request(endpoint, body);
  if (!parsed.ok()) fuzz::note(parsed.status().ToString());
  if (!parsed.ok()) {
    check_refusal(parsed.status());
    return 0;
  }
  check(parsed->n >= 1 && parsed->n <= coordinator::http::kMaxChoices, "n in range");
  check(parsed->n * (1 + parsed->more_prompts.size()) <=
            static_cast<size_t>(coordinator::http::kMaxChoices),
        "prompts x n in range");
  check(parsed->more_prompts.empty() || endpoint == Endpoint::kCompletion,
        "several prompts only on /v1/completions");
  for (size_t p = 0; p <= parsed->more_prompts.size(); ++p) {
    coordinator::ChatOutputSpec spec;
    auto prepared = coordinator::prepare_prompt(
        m, p == 0 ? parsed->generate : parsed->more_prompts[p - 1], {}, &spec);
    fuzz::note(prepared.ok() ? "prepared: " + std::to_string(prepared->prompt.size()) + " tokens"
                             : prepared.status().ToString());
    if (!prepared.ok()) {
      check_refusal(prepared.status());
      return 0;
    }
    check(!prepared->prompt.empty() && prepared->prompt.size() <= static_cast<size_t>(m.n_ctx),
          "the prompt fits the context");
  }
  return 0;
}
