#include "coordinator/embedding.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/prompt.h"

namespace strata::coordinator {
namespace {

std::string input_field(int i) { return absl::StrCat("inputs[", i, "]"); }

}  // namespace

const char* pooling_name(Pooling pooling) {
  return pooling == Pooling::kMean ? "mean" : "last";
}

absl::StatusOr<Pooling> resolve_pooling(const ServedModel& model, v1::Pooling requested) {
  switch (requested) {
    case v1::POOLING_MEAN:
      return Pooling::kMean;
    case v1::POOLING_LAST:
      return Pooling::kLast;
    case v1::POOLING_DEFAULT:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "pooling: ", static_cast<int>(requested),
          " is not POOLING_DEFAULT, POOLING_MEAN or POOLING_LAST"));
  }
  const std::string key = absl::StrCat(model.hp.architecture, ".pooling_type");
  if (model.gguf == nullptr || model.gguf->first().find(key) == nullptr) return Pooling::kLast;
  const absl::StatusOr<uint32_t> type = model.gguf->first().get_u32(key);
  if (!type.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pooling: the model's ", key, " is not a uint32: ", type.status().message()));
  }
  switch (*type) {
    case 0:  // none: the model names no pooling; a decoder's last position
    case 3:
      return Pooling::kLast;
    case 1:
      return Pooling::kMean;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "pooling: the model's ", key, " is ", *type, *type == 2 ? " (cls)" : *type == 4 ? " (rank)" : "",
          ", which is not served; ask for mean or last"));
  }
}

absl::StatusOr<std::vector<std::vector<int32_t>>> prepare_embed_inputs(
    const ServedModel& model, const v1::EmbedRequest& request) {
  if (absl::Status st = check_model_name(model.info, request.model()); !st.ok()) return st;
  const int n = request.inputs_size();
  if (n == 0) return absl::InvalidArgumentError("inputs: empty (give 1 to 2048)");
  if (n > kMaxEmbedInputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputs: ", n, " inputs; at most ", kMaxEmbedInputs));
  }
  if (request.cache_salt().size() > kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache_salt: ", request.cache_salt().size(), " bytes exceed ", kMaxCacheSaltBytes));
  }
  // Sizes first: the text in all bounds what tokenizing costs.
  size_t text = 0;
  for (int i = 0; i < n; ++i) {
    const v1::EmbedInput& in = request.inputs(i);
    if (in.input_case() == v1::EmbedInput::kText) {
      if (in.text().size() > kMaxTextBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            input_field(i), ".text: ", in.text().size(), " bytes exceed ", kMaxTextBytes));
      }
      text += in.text().size();
    } else if (in.input_case() == v1::EmbedInput::kIds &&
               in.ids().ids_size() > model.n_ctx) {
      return absl::OutOfRangeError(absl::StrCat(input_field(i), ": ", in.ids().ids_size(),
                                                " tokens exceed the context of ", model.n_ctx));
    }
  }
  if (text > kMaxEmbedTextBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputs: ", text, " bytes of text in all exceed ", kMaxEmbedTextBytes));
  }
  const int n_vocab = model.info.n_vocab();
  std::vector<std::vector<int32_t>> prompts;
  prompts.reserve(static_cast<size_t>(n));
  int64_t total_tokens = 0;
  for (int i = 0; i < n; ++i) {
    const v1::EmbedInput& in = request.inputs(i);
    std::vector<int32_t> ids;
    switch (in.input_case()) {
      case v1::EmbedInput::kText: {
        if (in.text().empty()) return absl::InvalidArgumentError(absl::StrCat(input_field(i), ".text: empty"));
        if (model.tokenizer == nullptr) {
          return absl::FailedPreconditionError(
              absl::StrCat(input_field(i), ".text: the served model has no tokenizer; give ids"));
        }
        tokenizer::EncodeOptions options;
        options.add_special = true;
        options.parse_special = true;
        absl::StatusOr<std::vector<int32_t>> encoded = model.tokenizer->encode(in.text(), options);
        if (!encoded.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(input_field(i), ".text: ", encoded.status().message()));
        }
        ids = *std::move(encoded);
        break;
      }
      case v1::EmbedInput::kIds:
        ids.assign(in.ids().ids().begin(), in.ids().ids().end());
        for (size_t k = 0; k < ids.size(); ++k) {
          if (ids[k] < 0 || ids[k] >= n_vocab) {
            return absl::InvalidArgumentError(absl::StrCat(input_field(i), ".ids[", k, "]: ",
                                                           ids[k], " is out of range [0, ",
                                                           n_vocab, ")"));
          }
        }
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(input_field(i), ": neither text nor ids"));
    }
    if (ids.empty()) return absl::InvalidArgumentError(absl::StrCat(input_field(i), ": empty"));
    if (static_cast<int64_t>(ids.size()) > model.n_ctx) {
      return absl::OutOfRangeError(absl::StrCat(input_field(i), ": ", ids.size(),
                                                " tokens exceed the context of ", model.n_ctx));
    }
    total_tokens += static_cast<int64_t>(ids.size());
    if (total_tokens > kMaxEmbedTokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs: more than ", kMaxEmbedTokens, " tokens in all (", total_tokens,
          " by inputs[", i, "]); send fewer or shorter inputs"));
    }
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

void l2_normalize(std::vector<float>& v) {
  double squares = 0.0;
  for (float x : v) squares += static_cast<double>(x) * x;
  const double norm = std::sqrt(squares);
  if (norm <= 0.0) return;
  for (float& x : v) x = static_cast<float>(x / norm);
}

absl::StatusOr<v1::EmbedResponse> run_embed(Cluster& cluster, const v1::EmbedRequest& request,
                                            const std::function<bool()>& cancelled) {
  absl::StatusOr<Pooling> pooling = resolve_pooling(cluster.model(), request.pooling());
  if (!pooling.ok()) return pooling.status();
  absl::StatusOr<std::vector<std::vector<int32_t>>> prompts =
      prepare_embed_inputs(cluster.model(), request);
  if (!prompts.ok()) return prompts.status();
  const bool normalize = !request.has_normalize() || request.normalize();
  Scheduler& scheduler = cluster.scheduler();
  const size_t n = prompts->size();
  const size_t window = static_cast<size_t>(std::max(1, scheduler.options().max_sequences / 2));

  v1::EmbedResponse response;
  response.set_pooling(pooling_name(*pooling));
  for (size_t i = 0; i < n; ++i) response.add_embeddings();
  int64_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // restored from the prefix cache (last pooling)
  // Submitted and not yet done, in input order: (input, handle).
  std::deque<std::pair<size_t, std::shared_ptr<SequenceHandle>>> running;
  const auto cancel_running = [&] {
    for (const auto& [i, h] : running) scheduler.cancel(h->seq_id());
  };
  size_t next = 0;
  while (next < n || !running.empty()) {
    while (next < n && running.size() < window) {
      SequenceRequest sr;
      sr.prompt = (*prompts)[next];
      sr.embed = *pooling;
      sr.cache_salt = request.cache_salt();
      prompt_tokens += static_cast<int64_t>(sr.prompt.size());
      response.mutable_embeddings(static_cast<int>(next))
          ->set_prompt_tokens(static_cast<int>(sr.prompt.size()));
      absl::StatusOr<std::shared_ptr<SequenceHandle>> h = scheduler.submit(std::move(sr));
      if (!h.ok()) {
        cancel_running();
        return h.status();
      }
      running.emplace_back(next++, *std::move(h));
    }
    if (cancelled && cancelled()) {
      cancel_running();
      return absl::CancelledError("cancelled by the client");
    }
    auto& [i, handle] = running.front();
    std::optional<SequenceEvent> e = handle->next(absl::Milliseconds(20));
    if (!e) continue;
    if (e->kind == SequenceEvent::Kind::kError) {
      running.pop_front();
      cancel_running();
      return e->error;
    }
    if (e->kind != SequenceEvent::Kind::kDone) continue;
    cached_tokens += e->cached_tokens;
    if (normalize) l2_normalize(e->embedding);
    v1::Embedding* out = response.mutable_embeddings(static_cast<int>(i));
    out->mutable_values()->Add(e->embedding.begin(), e->embedding.end());
    running.pop_front();
  }
  response.mutable_usage()->set_prompt_tokens(static_cast<int32_t>(
      std::min<int64_t>(prompt_tokens, std::numeric_limits<int32_t>::max())));
  response.mutable_usage()->set_cached_tokens(cached_tokens);
  return response;
}

}  // namespace strata::coordinator
