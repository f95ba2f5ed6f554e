// strata::Client over gRPC. The public header keeps the generated types out
// of sight; this file converts between them and the plain structs, and holds
// the one place where a gRPC status becomes an absl::Status.
//
// Every message from the server is checked before use (DESIGN.md, "Bad
// input"): a Generate stream must be deltas then exactly one `done`, ids
// are non-negative, per-token lists have one entry per id. A server that
// breaks this gets INTERNAL naming what came, and the call is cancelled.
#include "strata/client.h"

#include <grpcpp/grpcpp.h>

#include <limits>
#include <mutex>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/grpc_status.h"
#include "strata/v1/inference.grpc.pb.h"

namespace strata {
namespace {

namespace pb = ::strata::v1;

// gRPC and absl number their codes alike (both follow google.rpc.Code).
// An empty message (gRPC's own errors: a method the server lacks, a
// message it could not parse) gets a line saying what that code means here.
absl::Status to_absl(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  std::string message = status.error_message();
  if (message.empty()) {
    switch (status.error_code()) {
      case grpc::StatusCode::UNIMPLEMENTED:
        message = "the server does not serve strata.v1.Inference (a strata-worker's "
                  "port? give the coordinator's or strata serve's)";
        break;
      case grpc::StatusCode::INTERNAL:
        message = "the call failed inside gRPC (no message)";
        break;
      default:
        message = "no message from the server";
        break;
    }
  }
  return to_absl_status(grpc::Status(status.error_code(), message));
}

absl::Status protocol_error(const std::string& what) {
  return absl::InternalError(
      absl::StrCat("server broke the strata.v1 protocol: ", what));
}

ServingState to_state(int state) {
  switch (state) {
    case pb::HealthResponse::SERVING:
      return ServingState::kServing;
    case pb::HealthResponse::DEGRADED:
      return ServingState::kDegraded;
    case pb::HealthResponse::STARTING:
      return ServingState::kStarting;
    default:
      return ServingState::kUnspecified;
  }
}

absl::Status check_ids(const google::protobuf::RepeatedField<int32_t>& ids,
                       const char* field) {
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0) {
      return protocol_error(
          absl::StrCat(field, "[", i, "]: ", ids[i], " is not a token id"));
    }
  }
  return absl::OkStatus();
}

void fill_request(const GenerateOptions& in, pb::GenerateRequest& out) {
  out.set_model(in.model);
  if (in.prompt_ids.has_value()) {
    out.mutable_prompt_ids()->mutable_ids()->Add(in.prompt_ids->begin(),
                                                 in.prompt_ids->end());
  } else if (in.messages.has_value()) {
    pb::ChatMessages* messages = out.mutable_messages();
    for (const ChatMessage& m : *in.messages) {
      pb::ChatMessage* msg = messages->add_messages();
      msg->set_role(m.role);
      msg->set_content(m.content);
    }
  } else if (in.infill.has_value()) {
    pb::FillInMiddle* fim = out.mutable_infill();
    fim->set_prefix(in.infill->prefix);
    fim->set_suffix(in.infill->suffix);
    fim->set_prompt(in.infill->prompt);
    for (const FimFile& f : in.infill->extra) {
      pb::FimFile* file = fim->add_extra();
      if (!f.filename.empty()) file->set_filename(f.filename);
      file->set_text(f.text);
    }
    fim->set_suffix_first(in.infill->suffix_first);
  } else {
    out.set_prompt(in.prompt);
  }
  if (in.add_special.has_value()) out.set_add_special(*in.add_special);
  out.set_parse_special(in.parse_special);
  if (in.max_tokens.has_value()) out.set_max_tokens(*in.max_tokens);
  const SamplingOptions& s = in.sampling;
  pb::SamplingParams* sp = out.mutable_sampling();
  sp->set_temperature(s.temperature);
  sp->set_top_k(s.top_k);
  if (s.top_p.has_value()) sp->set_top_p(*s.top_p);
  sp->set_min_p(s.min_p);
  if (s.repeat_penalty.has_value()) sp->set_repeat_penalty(*s.repeat_penalty);
  sp->set_presence_penalty(s.presence_penalty);
  sp->set_frequency_penalty(s.frequency_penalty);
  if (s.repeat_last_n.has_value()) sp->set_repeat_last_n(*s.repeat_last_n);
  if (s.seed.has_value()) sp->set_seed(*s.seed);
  for (const auto& [id, bias] : s.logit_bias) {
    sp->add_logit_bias_ids(id);
    sp->add_logit_bias_values(bias);
  }
  for (const std::string& stop : in.stop) out.add_stop(stop);
  out.set_ignore_eos(in.ignore_eos);
  out.set_logprobs(in.logprobs);
  out.set_top_logprobs(in.top_logprobs);
}

absl::StatusOr<Delta> to_delta(const pb::TokenDelta& in) {
  if (absl::Status st = check_ids(in.ids(), "delta.ids"); !st.ok()) return st;
  if (in.choices_size() != 0 && in.choices_size() != in.ids_size()) {
    return protocol_error(absl::StrCat("a delta with ", in.ids_size(),
                                       " ids and ", in.choices_size(),
                                       " choices"));
  }
  Delta out;
  out.ids.assign(in.ids().begin(), in.ids().end());
  out.text = in.text();
  out.choices.reserve(in.choices_size());
  for (const pb::TokenChoice& c : in.choices()) {
    TokenChoice choice{c.id(), c.logprob(), {}};
    choice.top.reserve(c.top_size());
    for (const pb::TokenLogprob& t : c.top()) {
      choice.top.push_back({t.id(), t.logprob()});
    }
    out.choices.push_back(std::move(choice));
  }
  return out;
}

absl::Status take_done(const pb::GenerateDone& in, GenerateResult& out) {
  if (in.finish_reason().empty()) {
    return protocol_error("a done event without a finish_reason");
  }
  if (absl::Status st = check_ids(in.prompt_ids(), "done.prompt_ids");
      !st.ok()) {
    return st;
  }
  out.finish_reason = in.finish_reason();
  out.usage = {in.usage().prompt_tokens(), in.usage().completion_tokens()};
  const pb::Timings& t = in.timings();
  out.timings = {t.prefill_ms(),    t.decode_ms(), t.prefill_tok_s(),
                 t.decode_tok_s(),  t.ttft_ms(),   t.queue_ms()};
  out.prompt_ids.assign(in.prompt_ids().begin(), in.prompt_ids().end());
  out.seed = in.seed();
  out.text = in.text();
  return absl::OkStatus();
}

ModelInfo to_model(const pb::ModelInfo& in) {
  return {in.name(),    in.path(),    in.architecture(),
          in.n_layer(), in.n_vocab(), in.context_length(),
          in.chat_template_family()};
}

}  // namespace

const char* serving_state_name(ServingState state) {
  switch (state) {
    case ServingState::kServing:
      return "serving";
    case ServingState::kDegraded:
      return "degraded";
    case ServingState::kStarting:
      return "starting";
    case ServingState::kUnspecified:
      break;
  }
  return "unspecified";
}

struct Client::Impl {
  std::string address;
  ClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::Inference::Stub> stub;

  std::mutex mu;
  std::set<grpc::ClientContext*> live;  // calls in flight; guarded by mu

  // Registers a call's context for cancel() for the scope's lifetime.
  class Call {
   public:
    // `deadline` 0: the client's; `generate` picks the default.
    Call(Impl& impl, std::chrono::milliseconds deadline, bool generate = false) : impl_(impl) {
      std::chrono::milliseconds d = deadline.count() > 0 ? deadline : impl.options.deadline;
      if (d.count() == 0) {
        d = generate ? impl.options.generate_timeout : impl.options.call_timeout;
      }
      if (d.count() > 0) context.set_deadline(std::chrono::system_clock::now() + d);
      if (!impl.options.api_key.empty()) {
        context.AddMetadata("authorization", "Bearer " + impl.options.api_key);
      }
      std::lock_guard<std::mutex> lock(impl_.mu);
      impl_.live.insert(&context);
    }
    ~Call() {
      std::lock_guard<std::mutex> lock(impl_.mu);
      impl_.live.erase(&context);
    }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

    grpc::ClientContext context;

   private:
    Impl& impl_;
  };
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

namespace {

// Why `a` is not "HOST:PORT" (PORT 1 .. 65535, HOST a name, an IPv4
// address or a bracketed IPv6 one); empty when it is.
std::string address_problem(const std::string& a) {
  if (a.empty()) return "empty (want HOST:PORT)";
  if (a.find("://") != std::string::npos) {
    return absl::StrCat("'", a, "' has a scheme (want HOST:PORT, e.g. 127.0.0.1:50051)");
  }
  const size_t colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::StrCat("'", a, "' is not HOST:PORT");
  }
  const std::string host = a.substr(0, colon), port = a.substr(colon + 1);
  if (host.find(':') != std::string::npos && (host.front() != '[' || host.back() != ']')) {
    return absl::StrCat("'", a, "': an IPv6 host is written in brackets ([::1]:PORT)");
  }
  int value = 0;
  bool digits = !port.empty() && port.size() <= 5;
  for (char c : port) {
    digits = digits && c >= '0' && c <= '9';
    if (digits) value = value * 10 + (c - '0');
  }
  if (!digits || value < 1 || value > 65535) {
    return absl::StrCat("'", a, "': port '", port, "' is not 1 .. 65535");
  }
  return "";
}

}  // namespace

absl::Status Client::check_address(const std::string& address) {
  if (const std::string why = address_problem(address); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("server address: ", why));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Client>> Client::connect(
    const std::string& address, const ClientOptions& options) {
  if (absl::Status st = check_address(address); !st.ok()) return st;
  if (options.deadline.count() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "deadline: ", options.deadline.count(), " ms is negative"));
  }
  for (const auto& [field, value] :
       {std::pair<const char*, std::chrono::milliseconds>{"generate_timeout",
                                                          options.generate_timeout},
        {"call_timeout", options.call_timeout},
        {"keepalive_time", options.keepalive_time},
        {"keepalive_timeout", options.keepalive_timeout}}) {
    if (value.count() < 0 || value.count() > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", value.count(), " ms is out of range [0, 2^31)"));
    }
  }
  // A header value may not carry control characters (gRPC would refuse
  // the call with an empty message).
  for (char c : options.api_key) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError("api_key: holds a control character");
    }
  }
  if (options.max_receive_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_receive_bytes: ", options.max_receive_bytes, " is not positive"));
  }
  auto impl = std::make_unique<Impl>();
  impl->address = address;
  impl->options = options;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_bytes);
  if (options.keepalive_time.count() > 0) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options.keepalive_time.count()));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                static_cast<int>(options.keepalive_timeout.count()));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  impl->channel = grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args);
  impl->stub = pb::Inference::NewStub(impl->channel);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

const std::string& Client::address() const { return impl_->address; }

void Client::cancel() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (grpc::ClientContext* context : impl_->live) context->TryCancel();
}

absl::StatusOr<GenerateResult> Client::generate(
    const GenerateOptions& request) {
  return generate_stream(request, nullptr);
}

absl::StatusOr<GenerateResult> Client::generate_stream(
    const GenerateOptions& request, const DeltaCallback& on_delta) {
  if (request.prompt_ids.has_value() + request.messages.has_value() +
          request.infill.has_value() > 1) {
    return absl::InvalidArgumentError(
        "input: more than one of prompt_ids, messages and infill is set (give one)");
  }
  if (request.deadline.count() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "deadline: ", request.deadline.count(), " ms is negative"));
  }
  pb::GenerateRequest message;
  fill_request(request, message);

  Impl::Call call(*impl_, request.deadline, /*generate=*/true);
  std::unique_ptr<grpc::ClientReader<pb::GenerateResponse>> reader =
      impl_->stub->Generate(&call.context, message);
  GenerateResult result;
  bool done = false;
  bool stopped_by_callback = false;
  absl::Status broken;  // the first protocol violation
  pb::GenerateResponse event;
  while (reader->Read(&event)) {
    if (event.event_case() == pb::GenerateResponse::kDelta) {
      if (done) {
        broken = protocol_error("a delta after the done event");
        break;
      }
      absl::StatusOr<Delta> delta = to_delta(event.delta());
      if (!delta.ok()) {
        broken = delta.status();
        break;
      }
      result.ids.insert(result.ids.end(), delta->ids.begin(), delta->ids.end());
      result.choices.insert(result.choices.end(), delta->choices.begin(),
                            delta->choices.end());
      if (on_delta && !on_delta(*delta)) {
        stopped_by_callback = true;
        break;
      }
    } else if (event.event_case() == pb::GenerateResponse::kDone) {
      if (done) {
        broken = protocol_error("a second done event");
        break;
      }
      if (absl::Status st = take_done(event.done(), result); !st.ok()) {
        broken = st;
        break;
      }
      done = true;
    } else {
      broken = protocol_error("an event that is neither delta nor done");
      break;
    }
  }
  // Leaving the loop early: cancel so that Finish() does not wait for the
  // rest of the stream.
  if (!broken.ok() || stopped_by_callback) call.context.TryCancel();
  const grpc::Status status = reader->Finish();
  if (!broken.ok()) return broken;
  if (stopped_by_callback) {
    return absl::CancelledError("generation cancelled by the delta callback");
  }
  if (!status.ok()) return to_absl(status);
  if (!done) return protocol_error("the stream ended without a done event");
  return result;
}

absl::StatusOr<TokenizeResult> Client::tokenize(const std::string& text,
                                                const TokenizeOptions& options) {
  pb::TokenizeRequest request;
  request.set_model(options.model);
  request.set_text(text);
  if (options.add_special.has_value()) {
    request.set_add_special(*options.add_special);
  }
  request.set_parse_special(options.parse_special);
  pb::TokenizeResponse response;
  Impl::Call call(*impl_, std::chrono::milliseconds{0});
  if (absl::Status st = to_absl(
          impl_->stub->Tokenize(&call.context, request, &response));
      !st.ok()) {
    return st;
  }
  if (absl::Status st = check_ids(response.ids(), "ids"); !st.ok()) return st;
  if (response.pieces_size() != 0 &&
      response.pieces_size() != response.ids_size()) {
    return protocol_error(absl::StrCat("Tokenize: ", response.ids_size(),
                                       " ids and ", response.pieces_size(),
                                       " pieces"));
  }
  TokenizeResult out;
  out.ids.assign(response.ids().begin(), response.ids().end());
  out.pieces.assign(response.pieces().begin(), response.pieces().end());
  return out;
}

namespace {

pb::EmbedRequest embed_request(const EmbedOptions& options) {
  pb::EmbedRequest request;
  request.set_model(options.model);
  request.set_pooling(options.pooling == Pooling::kMean   ? pb::POOLING_MEAN
                      : options.pooling == Pooling::kLast ? pb::POOLING_LAST
                                                          : pb::POOLING_DEFAULT);
  request.set_normalize(options.normalize);
  request.set_cache_salt(options.cache_salt);
  return request;
}

}  // namespace

absl::StatusOr<EmbedResult> Client::embed(const std::vector<std::string>& texts,
                                          const EmbedOptions& options) {
  return embed_inputs(&texts, nullptr, options);
}

absl::StatusOr<EmbedResult> Client::embed_ids(const std::vector<std::vector<int32_t>>& inputs,
                                              const EmbedOptions& options) {
  return embed_inputs(nullptr, &inputs, options);
}

absl::StatusOr<EmbedResult> Client::embed_inputs(
    const std::vector<std::string>* texts, const std::vector<std::vector<int32_t>>* ids,
    const EmbedOptions& options) {
  pb::EmbedRequest request = embed_request(options);
  if (texts != nullptr) {
    for (const std::string& t : *texts) request.add_inputs()->set_text(t);
  } else {
    for (const std::vector<int32_t>& input : *ids) {
      request.add_inputs()->mutable_ids()->mutable_ids()->Add(input.begin(), input.end());
    }
  }
  pb::EmbedResponse response;
  Impl::Call call(*impl_, options.deadline, /*generate=*/true);
  if (absl::Status st = to_absl(impl_->stub->Embed(&call.context, request, &response));
      !st.ok()) {
    return st;
  }
  if (response.embeddings_size() != request.inputs_size()) {
    return protocol_error(absl::StrCat("Embed: ", response.embeddings_size(),
                                       " embeddings for ", request.inputs_size(), " inputs"));
  }
  EmbedResult out;
  out.pooling = response.pooling();
  out.total_prompt_tokens = response.usage().prompt_tokens();
  for (const pb::Embedding& e : response.embeddings()) {
    out.embeddings.emplace_back(e.values().begin(), e.values().end());
    out.prompt_tokens.push_back(e.prompt_tokens());
  }
  return out;
}

absl::StatusOr<std::string> Client::detokenize(const std::vector<int32_t>& ids,
                                               const std::string& model,
                                               bool render_special) {
  pb::DetokenizeRequest request;
  request.set_model(model);
  request.set_render_special(render_special);
  request.mutable_ids()->Add(ids.begin(), ids.end());
  pb::DetokenizeResponse response;
  Impl::Call call(*impl_, std::chrono::milliseconds{0});
  if (absl::Status st = to_absl(
          impl_->stub->Detokenize(&call.context, request, &response));
      !st.ok()) {
    return st;
  }
  return std::move(*response.mutable_text());
}

absl::StatusOr<std::vector<ModelInfo>> Client::list_models() {
  pb::ListModelsResponse response;
  Impl::Call call(*impl_, std::chrono::milliseconds{0});
  if (absl::Status st = to_absl(impl_->stub->ListModels(
          &call.context, pb::ListModelsRequest(), &response));
      !st.ok()) {
    return st;
  }
  std::vector<ModelInfo> out;
  out.reserve(response.models_size());
  for (const pb::ModelInfo& m : response.models()) out.push_back(to_model(m));
  return out;
}

absl::StatusOr<Health> Client::health() {
  pb::HealthResponse response;
  Impl::Call call(*impl_, std::chrono::milliseconds{0});
  if (absl::Status st = to_absl(
          impl_->stub->Health(&call.context, pb::HealthRequest(), &response));
      !st.ok()) {
    return st;
  }
  return Health{to_state(response.state()), response.message()};
}

absl::StatusOr<ClusterStatus> Client::cluster_status() {
  pb::ClusterStatusResponse response;
  Impl::Call call(*impl_, std::chrono::milliseconds{0});
  if (absl::Status st = to_absl(impl_->stub->ClusterStatus(
          &call.context, pb::ClusterStatusRequest(), &response));
      !st.ok()) {
    return st;
  }
  ClusterStatus out;
  out.state = to_state(response.state());
  out.model = to_model(response.model());
  out.active_sequences = response.active_sequences();
  out.max_sequences = response.max_sequences();
  out.requests_served = response.requests_served();
  out.queued_requests = response.queued_requests();
  out.workers.reserve(response.workers_size());
  for (const pb::WorkerStatus& w : response.workers()) {
    WorkerStatus s;
    s.address = w.address();
    s.name = w.name();
    s.state = w.state();
    s.first_block = w.first_block();
    s.last_block = w.last_block();
    s.embedding = w.embedding();
    s.head = w.head();
    s.weight_bytes = w.weight_bytes();
    s.kv_bytes = w.kv_bytes();
    s.memory_budget_bytes = w.memory_budget_bytes();
    s.device = w.device();
    s.last_error = w.last_error();
    s.last_seen_ms_ago = w.last_seen_ms_ago();
    s.link_to_next = w.link_to_next();
    out.workers.push_back(std::move(s));
  }
  return out;
}

}  // namespace strata
