// libFuzzer target: the public gRPC API's requests as a hostile client
// sends them (strata.v1.Inference, inference.proto), through the functions
// under its handlers (coordinator/inference_service.cc): a GenerateRequest
// (every `input` shape, messages, tools_json, tool_choice, grammar,
// json_schema) through prepare_prompt (coordinator/prompt.h, the path the
// HTTP API shares), Tokenize and Detokenize through the tokenizer as their
// handlers call it, and the bearer-token check on an authorization value.
// The model: SmolLM2-135M-Instruct (a chat template with tools) when
// fetched, else stories260K.
//
// Input: one byte, then the request's bytes. Byte % 4: 0 GenerateRequest,
// 1 TokenizeRequest, 2 DetokenizeRequest (serialized; inputs that do not
// parse are skipped), 3 an `authorization` metadata value (raw bytes).
// A prepared request must hold the bounds SequenceRequest promises.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/api_key.h"
#include "coordinator/chat_output.h"
#include "coordinator/cluster.h"
#include "coordinator/prompt.h"
#include "strata/v1/inference.pb.h"
#include "tests/fuzz/fuzz_proto.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace strata;  // NOLINT: a test harness
using fuzz::check;

constexpr int kContext = 2048;
constexpr size_t kMaxTextBytes = 4u << 20;  // inference_service.cc's Tokenize bound
constexpr int kMaxIds = 1 << 20;           // and Detokenize's

const coordinator::ServedModel& model() {
  static const coordinator::ServedModel* m = [] {
    const std::string path = fuzz::tokenizer_model_path();
    auto opened = coordinator::open_served_model(path, kContext);
    fuzz::require(opened.ok(), path + ": " + opened.status().ToString());
    return opened->release();
  }();
  return *m;
}

void generate(const v1::GenerateRequest& request) {
  const coordinator::ServedModel& m = model();
  coordinator::ChatOutputSpec spec;
  auto prepared = coordinator::prepare_prompt(m, request, {}, &spec);
  fuzz::note(prepared.ok() ? "prepared: " + std::to_string(prepared->prompt.size()) +
                                 " tokens" + (prepared->grammar.empty() ? "" : ", grammar")
                           : prepared.status().ToString());
  if (!prepared.ok()) {
    check(!prepared.status().message().empty(), "a refused request says why");
    check(prepared.status().code() != absl::StatusCode::kInternal &&
              prepared.status().code() != absl::StatusCode::kUnknown,
          "a refused request is the client's error, not INTERNAL/UNKNOWN");
    return;
  }
  const int n_vocab = m.tokenizer->n_tokens();
  check(!prepared->prompt.empty(), "a prompt of at least one token");
  check(prepared->prompt.size() <= static_cast<size_t>(m.n_ctx), "the prompt fits the context");
  for (int32_t id : prepared->prompt) check(id >= 0 && id < n_vocab, "prompt ids are tokens");
  check(prepared->params.max_tokens >= 1, "max_tokens >= 1");
  check(prepared->top_logprobs >= 0 && prepared->top_logprobs <= 20, "top_logprobs in range");
}

void tokenize(const v1::TokenizeRequest& request) {
  const coordinator::ServedModel& m = model();
  if (!coordinator::check_model_name(m.info, request.model()).ok()) return;
  if (request.text().size() > kMaxTextBytes) return;
  tokenizer::EncodeOptions e;
  e.add_special = request.has_add_special() ? request.add_special() : true;
  e.parse_special = request.parse_special();
  auto ids = m.tokenizer->encode(request.text(), e);
  fuzz::note(ids.ok() ? std::to_string(ids->size()) + " ids" : ids.status().ToString());
  if (!ids.ok()) return;
  size_t bytes = 0;
  for (int32_t id : *ids) {
    check(m.tokenizer->is_valid(id), "encode gives tokens");
    bytes += m.tokenizer->piece(id, true).size();
  }
  (void)bytes;
}

void detokenize(const v1::DetokenizeRequest& request) {
  const coordinator::ServedModel& m = model();
  if (!coordinator::check_model_name(m.info, request.model()).ok()) return;
  if (request.ids_size() > kMaxIds) return;
  for (int32_t id : request.ids()) {
    if (!m.tokenizer->is_valid(id)) return;  // the handler's ids[i] error
  }
  std::vector<int32_t> ids(request.ids().begin(), request.ids().end());
  tokenizer::DecodeOptions decode;
  decode.render_special = request.render_special();
  (void)m.tokenizer->decode(ids, decode);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::quiet_protobuf();
  (void)model();
  if (size < 1) return 0;
  const uint8_t* bytes = data + 1;
  const int n = static_cast<int>(size - 1);
  switch (data[0] % 4) {
    case 0: {
      v1::GenerateRequest request;
      if (request.ParseFromArray(bytes, n)) generate(request);
      break;
    }
    case 1: {
      v1::TokenizeRequest request;
      if (request.ParseFromArray(bytes, n)) tokenize(request);
      break;
    }
    case 2: {
      v1::DetokenizeRequest request;
      if (request.ParseFromArray(bytes, n)) detokenize(request);
      break;
    }
    default: {
      const std::string_view given(reinterpret_cast<const char*>(bytes), size - 1);
      const absl::Status st = coordinator::check_bearer("sk-fuzz-0123456789", given);
      check(st.ok() == fuzz::bearer_matches(given, "sk-fuzz-0123456789"), "only the key passes");
      break;
    }
  }
  return 0;
}
