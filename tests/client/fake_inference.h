// A fake strata.v1.Inference server for the client tests: runs in-process
// on 127.0.0.1 with an ephemeral port. Generate's behaviour is chosen by
// the prompt text (see FakeInference::Generate), so that a test can ask for
// a normal stream, a server error, a stream that never ends, or one that
// breaks the protocol.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "strata/v1/inference.grpc.pb.h"

namespace strata::testing {

namespace pb = ::strata::v1;

class FakeInference final : public pb::Inference::Service {
 public:
  // Prompts:
  //   "ok"                 deltas "Once", " upon", " a time" (ids 1; 2;
  //                        3 4) then done: length, prompt ids 1 9 9, seed 42
  //   "slow"               one delta, then waits (up to 20 s) for the call
  //                        to be cancelled or to pass its deadline
  //   "many"               100 one-token deltas "x", then done
  //   "error:CODE"         no event; the status CODE (e.g. UNAVAILABLE) with
  //                        the message "worker w1 (127.0.0.1:50062) died"
  //   "two-done", "delta-after-done", "no-done", "empty-event",
  //   "negative-id", "choices-mismatch", "done-no-reason": broken streams
  // A `messages` input gets one delta "reply to N messages" then done; a
  // `prompt_ids` or `infill` input the "ok" stream.
  grpc::Status Generate(grpc::ServerContext* context,
                        const pb::GenerateRequest* request,
                        grpc::ServerWriter<pb::GenerateResponse>* writer) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_request_ = *request;
      auto it = context->client_metadata().find("authorization");
      last_authorization_ = it == context->client_metadata().end()
                                ? ""
                                : std::string(it->second.data(), it->second.size());
    }
    ++generate_calls_;
    if (request->has_messages()) {
      const std::string text = "reply to " +
                               std::to_string(request->messages().messages_size()) +
                               " messages";
      writer->Write(delta({7}, text));
      writer->Write(done(text, {1, 2}));
      return grpc::Status::OK;
    }
    // Token ids in: the "ok" stream.
    const std::string p =
        request->has_prompt_ids() || request->has_infill() ? "ok" : request->prompt();
    if (p == "ok") {
      writer->Write(delta({1}, "Once"));
      writer->Write(delta({2}, " upon"));
      writer->Write(delta({3, 4}, " a time"));
      writer->Write(done("Once upon a time", {1, 9, 9}));
      return grpc::Status::OK;
    }
    if (p == "many") {
      std::string text;
      for (int i = 0; i < 100; ++i) {
        if (context->IsCancelled()) {
          saw_cancel_ = true;
          return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
        }
        writer->Write(delta({5}, "x"));
        text += "x";
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      writer->Write(done(text, {1}));
      return grpc::Status::OK;
    }
    if (p == "slow") {
      writer->Write(delta({1}, "Once"));
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!context->IsCancelled() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      saw_cancel_ = context->IsCancelled();
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    if (p.rfind("error:", 0) == 0) {
      grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
      const std::string name = p.substr(6);
      if (name == "INVALID_ARGUMENT") code = grpc::StatusCode::INVALID_ARGUMENT;
      if (name == "OUT_OF_RANGE") code = grpc::StatusCode::OUT_OF_RANGE;
      if (name == "RESOURCE_EXHAUSTED") code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      if (name == "UNAVAILABLE") code = grpc::StatusCode::UNAVAILABLE;
      if (name == "INTERNAL") code = grpc::StatusCode::INTERNAL;
      return grpc::Status(code, "worker w1 (127.0.0.1:50062) died");
    }
    if (p == "two-done") {
      writer->Write(delta({1}, "a"));
      writer->Write(done("a", {1}));
      writer->Write(done("a", {1}));
    } else if (p == "delta-after-done") {
      writer->Write(done("", {1}));
      writer->Write(delta({1}, "a"));
    } else if (p == "no-done") {
      writer->Write(delta({1}, "a"));
    } else if (p == "empty-event") {
      writer->Write(pb::GenerateResponse());
    } else if (p == "negative-id") {
      writer->Write(delta({1, -3}, "a"));
      writer->Write(done("a", {1}));
    } else if (p == "choices-mismatch") {
      pb::GenerateResponse r = delta({1, 2}, "ab");
      r.mutable_delta()->add_choices()->set_id(1);
      writer->Write(r);
      writer->Write(done("ab", {1}));
    } else if (p == "done-no-reason") {
      pb::GenerateResponse r = done("", {1});
      r.mutable_done()->clear_finish_reason();
      writer->Write(r);
    }
    return grpc::Status::OK;
  }

  // Ids are the text's bytes; pieces the bytes as one-character strings.
  // "refuse" gets INVALID_ARGUMENT.
  grpc::Status Tokenize(grpc::ServerContext*, const pb::TokenizeRequest* request,
                        pb::TokenizeResponse* response) override {
    if (request->text() == "refuse") {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "text: refused by the test");
    }
    const bool bos = !request->has_add_special() || request->add_special();
    if (bos) {
      response->add_ids(1);
      response->add_pieces("<s>");
    }
    for (char c : request->text()) {
      response->add_ids(static_cast<unsigned char>(c));
      response->add_pieces(std::string(1, c));
    }
    return grpc::Status::OK;
  }

  grpc::Status Detokenize(grpc::ServerContext*, const pb::DetokenizeRequest* request,
                          pb::DetokenizeResponse* response) override {
    std::string text;
    for (int32_t id : request->ids()) {
      if (id < 0 || id > 255) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "ids: " + std::to_string(id) + " not in [0, 256)");
      }
      text.push_back(static_cast<char>(id));
    }
    response->set_text(text);
    return grpc::Status::OK;
  }

  grpc::Status ListModels(grpc::ServerContext*, const pb::ListModelsRequest*,
                          pb::ListModelsResponse* response) override {
    *response->add_models() = model();
    return grpc::Status::OK;
  }

  grpc::Status Health(grpc::ServerContext*, const pb::HealthRequest*,
                      pb::HealthResponse* response) override {
    response->set_state(pb::HealthResponse::DEGRADED);
    response->set_message("worker 127.0.0.1:50062 unreachable");
    return grpc::Status::OK;
  }

  grpc::Status ClusterStatus(grpc::ServerContext*, const pb::ClusterStatusRequest*,
                             pb::ClusterStatusResponse* response) override {
    response->set_state(pb::HealthResponse::DEGRADED);
    *response->mutable_model() = model();
    response->set_active_sequences(2);
    response->set_max_sequences(16);
    response->set_requests_served(7);
    response->set_queued_requests(3);
    pb::WorkerStatus* w0 = response->add_workers();
    w0->set_address("127.0.0.1:50061");
    w0->set_name("w0");
    w0->set_state("serving");
    w0->set_first_block(0);
    w0->set_last_block(3);
    w0->set_embedding(true);
    w0->set_weight_bytes(3 << 20);
    w0->set_kv_bytes(1 << 20);
    w0->set_memory_budget_bytes(1ull << 30);
    w0->set_device("cpu (test, 1 thread)");
    pb::WorkerStatus* w1 = response->add_workers();
    w1->set_address("127.0.0.1:50062");
    w1->set_state("unreachable");
    w1->set_first_block(3);
    w1->set_last_block(5);
    w1->set_head(true);
    w1->set_last_error("connection refused");
    return grpc::Status::OK;
  }

  pb::GenerateRequest last_request() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_request_;
  }
  bool saw_cancel() const { return saw_cancel_; }
  int generate_calls() const { return generate_calls_; }

  static pb::ModelInfo model() {
    pb::ModelInfo m;
    m.set_name("stories260K");
    m.set_path("/models/stories260K.gguf");
    m.set_architecture("llama");
    m.set_n_layer(5);
    m.set_n_vocab(512);
    m.set_context_length(512);
    return m;
  }

 private:
  static pb::GenerateResponse delta(std::initializer_list<int32_t> ids,
                                    const std::string& text) {
    pb::GenerateResponse r;
    for (int32_t id : ids) r.mutable_delta()->add_ids(id);
    r.mutable_delta()->set_text(text);
    return r;
  }

  static pb::GenerateResponse done(const std::string& text,
                                   std::initializer_list<int32_t> prompt_ids) {
    pb::GenerateResponse r;
    pb::GenerateDone* d = r.mutable_done();
    d->set_finish_reason("length");
    d->mutable_usage()->set_prompt_tokens(static_cast<int32_t>(prompt_ids.size()));
    d->mutable_usage()->set_completion_tokens(4);
    pb::Timings* t = d->mutable_timings();
    t->set_prefill_ms(10);
    t->set_decode_ms(30);
    t->set_prefill_tok_s(300);
    t->set_decode_tok_s(100);
    t->set_ttft_ms(12);
    t->set_queue_ms(1);
    for (int32_t id : prompt_ids) d->add_prompt_ids(id);
    d->set_seed(42);
    d->set_text(text);
    return r;
  }

  std::mutex mu_;
  pb::GenerateRequest last_request_;  // guarded by mu_
  std::atomic<bool> saw_cancel_{false};
  std::atomic<int> generate_calls_{0};

 public:
  // The last Generate call's "authorization" metadata ("" when none).
  std::string last_authorization() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_authorization_;
  }

 private:
  std::string last_authorization_;  // guarded by mu_
};

// The fake, serving on 127.0.0.1:<ephemeral port> until destroyed.
class FakeServer {
 public:
  FakeServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    // The clients' keepalive pings (every 1 s) are welcome, as on the
    // real servers.
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~FakeServer() {
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::seconds(1));
    }
  }
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;

  bool ok() const { return server_ != nullptr && port_ > 0; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  FakeInference& service() { return service_; }

 private:
  FakeInference service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace strata::testing
