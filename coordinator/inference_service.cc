#include "coordinator/inference_service.h"

#include <random>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/api_key.h"
#include "coordinator/chat_output.h"
#include "coordinator/embedding.h"
#include "model/chat_template/model_chat.h"
#include "proto/grpc_ops.h"
#include "proto/grpc_status.h"
#include "proto/grpc_tls.h"

namespace strata::coordinator {
namespace {

constexpr int kMaxTokens = 1 << 20;          // Detokenize ids

absl::Status bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

}  // namespace

InferenceService::InferenceService(Cluster& cluster, std::string api_key)
    : cluster_(cluster), info_(cluster.model().info), api_key_(std::move(api_key)) {
  // The model's chat templates (Jinja), e.g. "tokenizer.chat_template,
  // tokenizer.chat_template.tool_use"; empty when it has none that parses.
  info_.set_chat_template_family(
      absl::StrJoin(chat_template::model_chat_templates(cluster.model().gguf->first()), ","));
}

absl::Status InferenceService::check_model(const std::string& model) const {
  return check_model_name(info_, model);
}

absl::Status InferenceService::check_auth(const grpc::ServerContext& context) const {
  if (api_key_.empty()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  std::string_view given;
  if (it != metadata.end()) given = std::string_view(it->second.data(), it->second.size());
  return check_bearer(api_key_, given);
}

grpc::Status InferenceService::Embed(grpc::ServerContext* context,
                                     const v1::EmbedRequest* request,
                                     v1::EmbedResponse* response) {
  if (absl::Status st = check_auth(*context); !st.ok()) return to_grpc_status(st);
  absl::StatusOr<v1::EmbedResponse> done =
      run_embed(cluster_, *request, [context] { return context->IsCancelled(); });
  if (!done.ok()) return to_grpc_status(done.status());
  *response = *std::move(done);
  return grpc::Status::OK;
}

grpc::Status InferenceService::Generate(
    grpc::ServerContext* context, const v1::GenerateRequest* request,
    grpc::ServerWriter<v1::GenerateResponse>* writer) {
  if (absl::Status st = check_auth(*context); !st.ok()) return to_grpc_status(st);
  ChatOutputSpec output_spec;
  absl::StatusOr<SequenceRequest> prepared =
      prepare_prompt(cluster_.model(), *request, {}, &output_spec);
  if (!prepared.ok()) return to_grpc_status(prepared.status());
  const std::vector<int32_t> prompt = prepared->prompt;
  const uint64_t seed = prepared->params.sampling.seed;
  auto handle = cluster_.scheduler().submit(*std::move(prepared));
  if (!handle.ok()) return to_grpc_status(handle.status());
  // With tools: delta and done texts are the answer's content; the calls
  // come in done.tool_calls_json.
  ChatOutput output(output_spec);
  std::vector<v1::TokenChoice> scored;  // the prompt's, for done.prompt_logprobs

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
    if (e->scored) scored = std::move(e->prompt_logprobs);
    v1::GenerateResponse out;
    switch (e->kind) {
      case SequenceEvent::Kind::kDelta: {
        v1::TokenDelta* d = out.mutable_delta();
        for (int32_t id : e->ids) d->add_ids(id);
        d->set_text(output.parsing() ? output.push(e->text).content : std::move(e->text));
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
        if (output.parsing()) {
          const std::string rest = output.finish().content;
          if (!rest.empty()) {  // held back until the end: one more delta
            v1::GenerateResponse last;
            last.mutable_delta()->set_text(rest);
            writer->Write(last);
          }
          d->set_finish_reason(output.finish_reason(d->finish_reason()));
          if (output.has_tool_calls()) d->set_tool_calls_json(output.tool_calls().dump());
          e->all_text = output.content();
        }
        d->mutable_usage()->set_prompt_tokens(static_cast<int>(prompt.size()));
        d->mutable_usage()->set_completion_tokens(
            static_cast<int>(e->all_ids.size()));
        d->mutable_usage()->set_cached_tokens(e->cached_tokens);
        for (v1::TokenChoice& c : scored) *d->add_prompt_logprobs() = std::move(c);
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
        d->set_seed(seed);
        d->set_text(std::move(e->all_text));
        writer->Write(out);
        return grpc::Status::OK;
      }
      case SequenceEvent::Kind::kError:
        return to_grpc_status(e->error);
    }
  }
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext* context,
                                        const v1::TokenizeRequest* request,
                                        v1::TokenizeResponse* response) {
  if (absl::Status st = check_auth(*context); !st.ok()) return to_grpc_status(st);
  if (absl::Status st = check_model(request->model()); !st.ok()) {
    return to_grpc_status(st);
  }
  if (request->text().size() > kMaxTextBytes) {
    return to_grpc_status(bad("text", absl::StrCat(request->text().size(),
                                            " bytes exceed ", kMaxTextBytes)));
  }
  const tokenizer::Tokenizer& tok = *cluster_.model().tokenizer;
  tokenizer::EncodeOptions e;
  e.add_special = request->has_add_special() ? request->add_special() : true;
  e.parse_special = request->parse_special();
  auto ids = tok.encode(request->text(), e);
  if (!ids.ok()) return to_grpc_status(ids.status());
  for (int32_t id : *ids) {
    response->add_ids(id);
    response->add_pieces(std::string(tok.piece(id, true)));  // bytes: partial UTF-8 kept
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::Detokenize(grpc::ServerContext* context,
                                          const v1::DetokenizeRequest* request,
                                          v1::DetokenizeResponse* response) {
  if (absl::Status st = check_auth(*context); !st.ok()) return to_grpc_status(st);
  if (absl::Status st = check_model(request->model()); !st.ok()) {
    return to_grpc_status(st);
  }
  const tokenizer::Tokenizer& tok = *cluster_.model().tokenizer;
  if (request->ids_size() > kMaxTokens) {
    return to_grpc_status(bad("ids", absl::StrCat(request->ids_size(),
                                           " ids exceed ", kMaxTokens)));
  }
  for (int i = 0; i < request->ids_size(); ++i) {
    if (!tok.is_valid(request->ids(i))) {
      return to_grpc_status(bad(absl::StrCat("ids[", i, "]"),
                         absl::StrCat(request->ids(i),
                                      " is not a token id [0, ",
                                      tok.n_tokens(), ")")));
    }
  }
  std::vector<int32_t> ids(request->ids().begin(), request->ids().end());
  tokenizer::DecodeOptions decode;
  decode.render_special = request->render_special();
  auto text = tok.decode(ids, decode);
  if (!text.ok()) return to_grpc_status(text.status());
  response->set_text(*std::move(text));
  return grpc::Status::OK;
}

grpc::Status InferenceService::ListModels(grpc::ServerContext* context,
                                          const v1::ListModelsRequest*,
                                          v1::ListModelsResponse* response) {
  if (absl::Status st = check_auth(*context); !st.ok()) return to_grpc_status(st);
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
    grpc::ServerContext* context, const v1::ClusterStatusRequest*,
    v1::ClusterStatusResponse* response) {
  if (absl::Status st = check_auth(*context); !st.ok()) return to_grpc_status(st);
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
  // Keepalive acceptance (clients ping every 1 s, also between calls:
  // strata::Client notices a frozen server in 2 s; gRPC's default answers
  // such pings with GOAWAY too_many_pings), handshake and
  // idle timeouts, headers of at most 16 KiB, and streams per connection
  // bounded (docs/security.md). More streams than a cluster link: one
  // client may run many requests on one connection (the scheduler queues
  // beyond max_sequences anyway).
  grpc_tls::ServerLimits limits;
  limits.max_concurrent_streams = 256;
  grpc_tls::add_server_limits(builder, limits);
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
