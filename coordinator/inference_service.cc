#include "coordinator/inference_service.h"

#include <random>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/chat_template/model_chat.h"
#include "proto/grpc_ops.h"
#include "worker/sampling_proto.h"

namespace strata::coordinator {
namespace {

constexpr size_t kMaxTextBytes = 4u << 20;   // prompt, content, text
constexpr int kMaxTokens = 1 << 20;          // max_tokens, Detokenize ids
constexpr int kDefaultMaxTokens = 128;
constexpr int kMaxMessages = 1024;
constexpr size_t kMaxRoleBytes = 64;
constexpr int kMaxStops = 16;
constexpr size_t kMaxStopBytes = 256;
constexpr int kMaxTopLogprobs = 20;

absl::Status bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// T as given: an int prints as one (top_k 100000000, not 1e+08).
template <typename T>
absl::Status range(absl::string_view field, T v, absl::string_view r) {
  return bad(field, absl::StrCat(v, " is out of range ", r));
}

}  // namespace

grpc::Status to_grpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status check_generate_request(const v1::GenerateRequest& r, int n_vocab,
                                    worker::SamplingParams* sampling) {
  worker::SamplingParams scratch;
  switch (r.input_case()) {
    case v1::GenerateRequest::kPrompt:
      if (r.prompt().empty()) return bad("prompt", "empty");
      if (r.prompt().size() > kMaxTextBytes) {
        return bad("prompt", absl::StrCat(r.prompt().size(),
                                          " bytes exceed ", kMaxTextBytes));
      }
      break;
    case v1::GenerateRequest::kPromptIds: {
      const auto& ids = r.prompt_ids().ids();
      if (ids.empty()) return bad("prompt_ids.ids", "empty");
      if (ids.size() > kMaxTokens) {
        return bad("prompt_ids.ids",
                   absl::StrCat(ids.size(), " ids exceed ", kMaxTokens));
      }
      for (int i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= n_vocab) {
          return bad(absl::StrCat("prompt_ids.ids[", i, "]"),
                     absl::StrCat(ids[i], " is not a token id [0, ", n_vocab,
                                  ")"));
        }
      }
      break;
    }
    case v1::GenerateRequest::kMessages: {
      const auto& m = r.messages().messages();
      if (m.empty() || m.size() > kMaxMessages) {
        return bad("messages.messages",
                   absl::StrCat(m.size(), " messages; expected 1 .. ",
                                kMaxMessages));
      }
      for (int i = 0; i < m.size(); ++i) {
        const std::string f = absl::StrCat("messages.messages[", i, "]");
        if (m[i].role().empty() || m[i].role().size() > kMaxRoleBytes) {
          return bad(f + ".role", absl::StrCat(m[i].role().size(),
                                               " bytes; expected 1 .. ",
                                               kMaxRoleBytes));
        }
        if (m[i].content().size() > kMaxTextBytes) {
          return bad(f + ".content", absl::StrCat(m[i].content().size(),
                                                  " bytes exceed ",
                                                  kMaxTextBytes));
        }
      }
      break;
    }
    case v1::GenerateRequest::INPUT_NOT_SET:
      return bad("input", "give one of prompt, prompt_ids, messages");
  }
  if (r.has_max_tokens() &&
      (r.max_tokens() < 1 || r.max_tokens() > kMaxTokens)) {
    return r.max_tokens() < 1
               ? bad("max_tokens", absl::StrCat(r.max_tokens(),
                                                " is less than 1"))
               : bad("max_tokens", absl::StrCat(r.max_tokens(), " exceeds ",
                                                kMaxTokens));
  }
  if (absl::Status st =
          worker::sampling_from_proto(r.sampling(), n_vocab, "sampling",
                                      sampling != nullptr ? sampling : &scratch);
      !st.ok()) {
    return st;
  }
  if (r.stop_size() > kMaxStops) {
    return bad("stop", absl::StrCat(r.stop_size(), " strings; at most ",
                                    kMaxStops));
  }
  for (int i = 0; i < r.stop_size(); ++i) {
    if (r.stop(i).size() > kMaxStopBytes) {
      return bad(absl::StrCat("stop[", i, "]"),
                 absl::StrCat(r.stop(i).size(), " bytes exceed ",
                              kMaxStopBytes));
    }
  }
  if (r.top_logprobs() < 0 || r.top_logprobs() > kMaxTopLogprobs) {
    return range("top_logprobs", r.top_logprobs(),
                 absl::StrCat("[0, ", kMaxTopLogprobs, "]"));
  }
  return absl::OkStatus();
}

InferenceService::InferenceService(Cluster& cluster)
    : cluster_(cluster), info_(cluster.model().info) {
  auto family = chat_template::model_chat_family(cluster.model().gguf->first());
  if (family) {
    info_.set_chat_template_family(std::string(chat_template::family_name(*family)));
  }
}

absl::Status InferenceService::check_model(const std::string& model) const {
  if (model.empty() || model == info_.name()) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(
      "model: '", model.substr(0, 256), "' is not served here; this server "
      "serves '", info_.name(), "' (ListModels)"));
}

grpc::Status InferenceService::Generate(
    grpc::ServerContext* context, const v1::GenerateRequest* request,
    grpc::ServerWriter<v1::GenerateResponse>* writer) {
  const ServedModel& model = cluster_.model();
  const tokenizer::Tokenizer& tok = *model.tokenizer;
  if (absl::Status st = check_model(request->model()); !st.ok()) {
    return to_grpc(st);
  }
  worker::SamplingParams sampling;
  if (absl::Status st = check_generate_request(*request, tok.n_tokens(), &sampling);
      !st.ok()) {
    return to_grpc(st);
  }
  // The prompt's ids.
  std::vector<int32_t> prompt;
  if (request->has_prompt_ids()) {
    prompt.assign(request->prompt_ids().ids().begin(),
                  request->prompt_ids().ids().end());
  } else if (request->has_prompt()) {
    tokenizer::EncodeOptions e;
    e.add_special = request->has_add_special() ? request->add_special() : true;
    e.parse_special = request->parse_special();
    auto ids = tok.encode(request->prompt(), e);
    if (!ids.ok()) return to_grpc(ids.status());
    prompt = *std::move(ids);
  } else {
    std::vector<chat_template::Message> messages;
    for (const v1::ChatMessage& m : request->messages().messages()) {
      messages.push_back({m.role(), m.content()});
    }
    // The rendered text is tokenized with control tokens parsed (the
    // template's turn markers); the messages' own text must not spell one.
    if (absl::Status st = chat_template::check_message_text(tok, messages); !st.ok()) {
      return to_grpc(st);
    }
    auto chat = chat_template::render_model_chat(
        model.gguf->first(), tok, messages, std::nullopt, "", true);
    if (!chat.ok()) {
      // No template in the model, or one of no known family: the served
      // model cannot take messages (FAILED_PRECONDITION, not the request's
      // fault); a template that refuses this conversation keeps its code.
      const absl::StatusCode code =
          absl::IsNotFound(chat.status()) || absl::IsInvalidArgument(chat.status())
              ? absl::StatusCode::kFailedPrecondition
              : chat.status().code();
      return to_grpc(absl::Status(code, absl::StrCat("messages: ", chat.status().message())));
    }
    // The template's turn markers are control tokens: parsed as such (the
    // users' text spells none: check_message_text above).
    tokenizer::EncodeOptions e;
    e.add_special = !chat->starts_with_bos;
    e.parse_special = true;
    auto ids = tok.encode(chat->text, e);
    if (!ids.ok()) return to_grpc(ids.status());
    prompt = *std::move(ids);
  }
  if (prompt.empty()) return to_grpc(bad("prompt", "no tokens"));

  if (!request->sampling().has_seed()) {
    sampling.seed = static_cast<uint64_t>(std::random_device{}()) << 32 |
                    std::random_device{}();
  }
  SequenceRequest sr;
  sr.prompt = prompt;
  sr.params.max_tokens =
      request->has_max_tokens() ? request->max_tokens() : kDefaultMaxTokens;
  sr.params.sampling = sampling;
  sr.params.stop.assign(request->stop().begin(), request->stop().end());
  sr.params.ignore_eos = request->ignore_eos();
  sr.logprobs = request->logprobs();
  sr.top_logprobs = request->top_logprobs();
  auto handle = cluster_.scheduler().submit(std::move(sr));
  if (!handle.ok()) return to_grpc(handle.status());

  while (true) {
    std::optional<SequenceEvent> e = (*handle)->next(absl::Milliseconds(50));
    if (!e) {
      if (context->IsCancelled()) {
        cluster_.scheduler().cancel((*handle)->seq_id());
        return grpc::Status(grpc::StatusCode::CANCELLED,
                            "cancelled by the client");
      }
      continue;
    }
    v1::GenerateResponse out;
    switch (e->kind) {
      case SequenceEvent::Kind::kDelta: {
        v1::TokenDelta* d = out.mutable_delta();
        for (int32_t id : e->ids) d->add_ids(id);
        d->set_text(std::move(e->text));
        for (const v1::SampledToken& t : e->tokens) {
          v1::TokenChoice* c = d->add_choices();
          c->set_id(t.id());
          c->set_logprob(t.logprob());
          *c->mutable_top() = t.top();
        }
        if (!writer->Write(out)) {
          cluster_.scheduler().cancel((*handle)->seq_id());
          return grpc::Status(grpc::StatusCode::CANCELLED,
                              "the client went away");
        }
        break;
      }
      case SequenceEvent::Kind::kDone: {
        v1::GenerateDone* d = out.mutable_done();
        d->set_finish_reason(finish_reason_name(e->finish));
        d->mutable_usage()->set_prompt_tokens(static_cast<int>(prompt.size()));
        d->mutable_usage()->set_completion_tokens(
            static_cast<int>(e->all_ids.size()));
        v1::Timings* t = d->mutable_timings();
        const SequenceTimings& st = e->timings;
        t->set_prefill_ms(st.prefill_ms);
        t->set_decode_ms(st.decode_ms);
        t->set_prefill_tok_s(st.prefill_ms > 0
                                 ? prompt.size() / (st.prefill_ms / 1000)
                                 : 0);
        t->set_decode_tok_s(st.decode_ms > 0
                                ? st.decode_steps / (st.decode_ms / 1000)
                                : 0);
        t->set_ttft_ms(st.ttft_ms);
        t->set_queue_ms(st.queue_ms);
        for (int32_t id : prompt) d->add_prompt_ids(id);
        d->set_seed(sampling.seed);
        d->set_text(std::move(e->all_text));
        writer->Write(out);
        return grpc::Status::OK;
      }
      case SequenceEvent::Kind::kError:
        return to_grpc(e->error);
    }
  }
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext*,
                                        const v1::TokenizeRequest* request,
                                        v1::TokenizeResponse* response) {
  if (absl::Status st = check_model(request->model()); !st.ok()) {
    return to_grpc(st);
  }
  if (request->text().size() > kMaxTextBytes) {
    return to_grpc(bad("text", absl::StrCat(request->text().size(),
                                            " bytes exceed ", kMaxTextBytes)));
  }
  const tokenizer::Tokenizer& tok = *cluster_.model().tokenizer;
  tokenizer::EncodeOptions e;
  e.add_special = request->has_add_special() ? request->add_special() : true;
  e.parse_special = request->parse_special();
  auto ids = tok.encode(request->text(), e);
  if (!ids.ok()) return to_grpc(ids.status());
  for (int32_t id : *ids) {
    response->add_ids(id);
    response->add_pieces(std::string(tok.piece(id, true)));  // bytes: partial UTF-8 kept
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::Detokenize(grpc::ServerContext*,
                                          const v1::DetokenizeRequest* request,
                                          v1::DetokenizeResponse* response) {
  if (absl::Status st = check_model(request->model()); !st.ok()) {
    return to_grpc(st);
  }
  const tokenizer::Tokenizer& tok = *cluster_.model().tokenizer;
  if (request->ids_size() > kMaxTokens) {
    return to_grpc(bad("ids", absl::StrCat(request->ids_size(),
                                           " ids exceed ", kMaxTokens)));
  }
  for (int i = 0; i < request->ids_size(); ++i) {
    if (!tok.is_valid(request->ids(i))) {
      return to_grpc(bad(absl::StrCat("ids[", i, "]"),
                         absl::StrCat(request->ids(i),
                                      " is not a token id [0, ",
                                      tok.n_tokens(), ")")));
    }
  }
  std::vector<int32_t> ids(request->ids().begin(), request->ids().end());
  tokenizer::DecodeOptions decode;
  decode.render_special = request->render_special();
  auto text = tok.decode(ids, decode);
  if (!text.ok()) return to_grpc(text.status());
  response->set_text(*std::move(text));
  return grpc::Status::OK;
}

grpc::Status InferenceService::ListModels(grpc::ServerContext*,
                                          const v1::ListModelsRequest*,
                                          v1::ListModelsResponse* response) {
  *response->add_models() = info_;
  return grpc::Status::OK;
}

grpc::Status InferenceService::Health(grpc::ServerContext*,
                                      const v1::HealthRequest*,
                                      v1::HealthResponse* response) {
  *response = cluster_.health();
  return grpc::Status::OK;
}

grpc::Status InferenceService::ClusterStatus(
    grpc::ServerContext*, const v1::ClusterStatusRequest*,
    v1::ClusterStatusResponse* response) {
  *response = cluster_.status();
  *response->mutable_model() = info_;
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<grpc::Server>> start_grpc_server(
    grpc::Service& service, const std::string& listen, int* bound_port) {
  grpc::ServerBuilder builder;
  int port = 0;
  // No SO_REUSEPORT: a port another server holds is refused, not shared
  // with it (requests would alternate between the two).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(16 << 20);
  grpc_ops::add_health_and_reflection(builder);  // proto/grpc_ops.h
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen,
                     " (in use, or not an address of this host)"));
  }
  if (bound_port) *bound_port = port;
  return server;
}

}  // namespace strata::coordinator
