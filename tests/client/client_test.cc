// strata::Client against an in-process fake server (fake_inference.h):
// stream order, the blocking result, cancel, deadlines, server statuses
// passed through, and streams that break the protocol refused with INTERNAL.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "strata/client.h"
#include "tests/client/fake_inference.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok()) << "the fake server did not start";
    client_ = connect();
  }

  std::unique_ptr<Client> connect(ClientOptions options = {}) {
    auto client = Client::connect(server_.address(), options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  static GenerateOptions prompt(const std::string& text) {
    GenerateOptions o;
    o.prompt = text;
    return o;
  }

  testing::FakeServer server_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientTest, StreamsDeltasInOrderThenTheResult) {
  std::vector<Delta> deltas;
  auto result = client_->generate_stream(prompt("ok"), [&](const Delta& d) {
    deltas.push_back(d);
    return true;
  });
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(deltas.size(), 3u);
  EXPECT_EQ(deltas[0].text, "Once");
  EXPECT_EQ(deltas[1].text, " upon");
  EXPECT_EQ(deltas[2].text, " a time");
  EXPECT_EQ(deltas[2].ids, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(result->ids, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(result->text, "Once upon a time");
  EXPECT_EQ(result->finish_reason, "length");
  EXPECT_EQ(result->prompt_ids, (std::vector<int32_t>{1, 9, 9}));
  EXPECT_EQ(result->seed, 42u);
  EXPECT_EQ(result->usage.prompt_tokens, 3);
  EXPECT_EQ(result->usage.completion_tokens, 4);
  EXPECT_DOUBLE_EQ(result->timings.prefill_ms, 10);
  EXPECT_DOUBLE_EQ(result->timings.decode_tok_s, 100);
  EXPECT_DOUBLE_EQ(result->timings.ttft_ms, 12);
}

TEST_F(ClientTest, BlockingGenerateReturnsTheWholeResult) {
  auto result = client_->generate(prompt("ok"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->ids, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(result->text, "Once upon a time");
  EXPECT_EQ(result->finish_reason, "length");
}

TEST_F(ClientTest, SendsTheRequestFieldsAndLeavesUnsetOnesUnset) {
  GenerateOptions o = prompt("ok");
  o.max_tokens = 7;
  o.sampling.temperature = 0.5f;
  o.sampling.top_k = 40;
  o.sampling.seed = 1234;
  o.stop = {"\n\n", "END"};
  o.ignore_eos = true;
  o.add_special = false;
  ASSERT_TRUE(client_->generate(o).ok());
  const strata::v1::GenerateRequest r = server_.service().last_request();
  EXPECT_EQ(r.prompt(), "ok");
  EXPECT_EQ(r.max_tokens(), 7);
  EXPECT_FLOAT_EQ(r.sampling().temperature(), 0.5f);
  EXPECT_EQ(r.sampling().top_k(), 40);
  EXPECT_TRUE(r.sampling().has_seed());
  EXPECT_EQ(r.sampling().seed(), 1234u);
  EXPECT_FALSE(r.sampling().has_top_p());
  EXPECT_FALSE(r.sampling().has_repeat_penalty());
  EXPECT_FALSE(r.sampling().has_repeat_last_n());
  ASSERT_EQ(r.stop_size(), 2);
  EXPECT_EQ(r.stop(1), "END");
  EXPECT_TRUE(r.ignore_eos());
  ASSERT_TRUE(r.has_add_special());
  EXPECT_FALSE(r.add_special());

  GenerateOptions chat;
  chat.messages = std::vector<ChatMessage>{{"system", "be brief"}, {"user", "hi"}};
  auto reply = client_->generate(chat);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->text, "reply to 2 messages");
  const strata::v1::GenerateRequest c = server_.service().last_request();
  ASSERT_TRUE(c.has_messages());
  EXPECT_EQ(c.messages().messages(1).content(), "hi");
  EXPECT_FALSE(c.has_max_tokens());

  GenerateOptions ids;
  ids.prompt_ids = std::vector<int32_t>{1, 2, 3};
  ASSERT_TRUE(client_->generate(ids).ok());
  EXPECT_EQ(server_.service().last_request().prompt_ids().ids_size(), 3);

  GenerateOptions fim;
  fim.infill = FillInMiddle{"def f(", ")\n", "x", {{"a.py", "A = 1"}, {"", "B"}}, true};
  ASSERT_TRUE(client_->generate(fim).ok());
  const strata::v1::GenerateRequest f = server_.service().last_request();
  ASSERT_TRUE(f.has_infill());
  EXPECT_EQ(f.infill().prefix(), "def f(");
  EXPECT_EQ(f.infill().suffix(), ")\n");
  EXPECT_EQ(f.infill().prompt(), "x");
  ASSERT_EQ(f.infill().extra_size(), 2);
  EXPECT_EQ(f.infill().extra(0).filename(), "a.py");
  EXPECT_EQ(f.infill().extra(0).text(), "A = 1");
  EXPECT_FALSE(f.infill().extra(1).has_filename());  // the server's "tmp"
  EXPECT_TRUE(f.infill().suffix_first());
}

TEST_F(ClientTest, RefusesBadOptionsBeforeCallingTheServer) {
  for (const char* address : {"", "127.0.0.1", "127.0.0.1:", ":50051", "127.0.0.1:0",
                              "127.0.0.1:99999", "127.0.0.1:5x", "http://127.0.0.1:50051",
                              "::1:50051"}) {
    const auto c = Client::connect(address);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_EQ(std::string(c.status().message()).rfind("server address: ", 0), 0u)
        << address << ": " << c.status();
  }
  for (const char* address : {"localhost:50051", "[::1]:50051", "10.1.2.3:1", "h:65535"}) {
    EXPECT_TRUE(Client::connect(address).ok()) << address;
  }
  ClientOptions negative;
  negative.deadline = milliseconds(-1);
  EXPECT_EQ(Client::connect(server_.address(), negative).status().code(),
            absl::StatusCode::kInvalidArgument);
  GenerateOptions both;
  both.prompt_ids = std::vector<int32_t>{1};
  both.messages = std::vector<ChatMessage>{{"user", "hi"}};
  EXPECT_EQ(client_->generate(both).status().code(),
            absl::StatusCode::kInvalidArgument);
  GenerateOptions two;
  two.messages = std::vector<ChatMessage>{{"user", "hi"}};
  FillInMiddle fim_ab;
  fim_ab.prefix = "a";
  fim_ab.suffix = "b";
  two.infill = fim_ab;
  EXPECT_EQ(client_->generate(two).status().message(),
            "input: more than one of prompt_ids, messages and infill is set (give one)");
  EXPECT_EQ(server_.service().generate_calls(), 0);
}

TEST_F(ClientTest, CallbackReturningFalseCancelsTheStream) {
  int seen = 0;
  auto result = client_->generate_stream(prompt("many"), [&](const Delta&) {
    return ++seen < 3;
  });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled)
      << result.status();
  EXPECT_EQ(seen, 3);
  // The server sees the cancellation and stops (it would write 100 deltas).
  const auto until = steady_clock::now() + std::chrono::seconds(5);
  while (!server_.service().saw_cancel() && steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_TRUE(server_.service().saw_cancel());
}

TEST_F(ClientTest, CancelFromAnotherThreadEndsTheCall) {
  std::promise<void> first_delta;
  auto started = first_delta.get_future();
  std::atomic<bool> once{false};
  auto call = std::async(std::launch::async, [&] {
    return client_->generate_stream(prompt("slow"), [&](const Delta&) {
      if (!once.exchange(true)) first_delta.set_value();
      return true;
    });
  });
  ASSERT_EQ(started.wait_for(std::chrono::seconds(10)),
            std::future_status::ready);
  const auto t0 = steady_clock::now();
  client_->cancel();
  ASSERT_EQ(call.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_LT(steady_clock::now() - t0, std::chrono::seconds(2));
  auto result = call.get();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled)
      << result.status();
  // The client still works afterwards.
  EXPECT_TRUE(client_->generate(prompt("ok")).ok());
}

TEST_F(ClientTest, DeadlineExceededEndsAHungStream) {
  ClientOptions options;
  options.deadline = milliseconds(300);
  std::unique_ptr<Client> client = connect(options);
  ASSERT_NE(client, nullptr);
  const auto t0 = steady_clock::now();
  auto result = client->generate(prompt("slow"));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded)
      << result.status();
  EXPECT_LT(steady_clock::now() - t0, std::chrono::seconds(5));

  // A per-request deadline overrides the client's (none here).
  GenerateOptions o = prompt("slow");
  o.deadline = milliseconds(200);
  EXPECT_EQ(client_->generate(o).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// A listening socket on 127.0.0.1 that never answers: the kernel accepts
// the TCP connection, nothing ever speaks HTTP/2 (a black-holed server).
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  int fd() const { return fd_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A TCP relay between a client and `target` that can freeze: from then on
// it passes nothing either way and keeps the connections open, as a
// SIGSTOPped server does.
class FreezingRelay {
 public:
  explicit FreezingRelay(int target_port) : target_port_(target_port) {
    thread_ = std::thread([this] { run(); });
  }
  ~FreezingRelay() {
    stop_ = true;
    thread_.join();
  }
  std::string address() const { return listener_.address(); }
  void freeze() { frozen_ = true; }

 private:
  void run() {
    std::vector<std::pair<int, int>> pairs;  // (client, server)
    while (!stop_) {
      std::vector<pollfd> fds{{listener_.fd(), POLLIN, 0}};
      if (!frozen_) {
        for (auto [c, t] : pairs) {
          fds.push_back({c, POLLIN, 0});
          fds.push_back({t, POLLIN, 0});
        }
      }
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        const int c = ::accept(listener_.fd(), nullptr, nullptr);
        const int t = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<uint16_t>(target_port_));
        if (::connect(t, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) pairs.emplace_back(c, t);
      }
      std::vector<bool> dead(pairs.size(), false);
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const auto [c, t] = pairs[(i - 1) / 2];
        const int from = fds[i].fd, to = from == c ? t : c;
        char buf[16384];
        const ssize_t n = ::read(from, buf, sizeof buf);
        if (n > 0) {
          (void)!::write(to, buf, static_cast<size_t>(n));
        } else {
          dead[(i - 1) / 2] = true;
        }
      }
      for (size_t k = pairs.size(); k-- > 0;) {
        if (!dead[k]) continue;
        ::close(pairs[k].first);
        ::close(pairs[k].second);
        pairs.erase(pairs.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
    for (auto [c, t] : pairs) {
      ::close(c);
      ::close(t);
    }
  }

  SilentListener listener_;
  const int target_port_;
  std::atomic<bool> frozen_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(ClientOptionsTest, DefaultsBoundEveryCallAndPing) {
  const ClientOptions o;
  EXPECT_EQ(o.deadline, milliseconds(0));
  EXPECT_EQ(o.generate_timeout, std::chrono::minutes(10));
  EXPECT_EQ(o.call_timeout, std::chrono::seconds(30));
  EXPECT_EQ(o.keepalive_time, milliseconds(1000));
  EXPECT_EQ(o.keepalive_timeout, milliseconds(1000));
  ClientOptions bad;
  bad.call_timeout = milliseconds(-5);
  auto c = Client::connect("127.0.0.1:1", bad);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(), "call_timeout: -5 ms is out of range [0, 2^31)");
  bad = ClientOptions();
  bad.api_key = "a\nb";
  EXPECT_EQ(Client::connect("127.0.0.1:1", bad).status().message(),
            "api_key: holds a control character");
}

// A server that accepts the connection and never answers: every call ends
// by its default deadline (shortened here), none hangs.
TEST(ClientTimeouts, ASilentServerEndsEveryCallByItsDeadline) {
  SilentListener silent;
  ClientOptions options;
  options.generate_timeout = milliseconds(800);
  options.call_timeout = milliseconds(400);
  auto client = Client::connect(silent.address(), options);
  ASSERT_TRUE(client.ok()) << client.status();
  GenerateOptions g;
  g.prompt = "ok";
  auto t0 = steady_clock::now();
  auto result = (*client)->generate(g);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_GE(steady_clock::now() - t0, milliseconds(700));
  EXPECT_LT(steady_clock::now() - t0, std::chrono::seconds(10));
  t0 = steady_clock::now();
  auto health = (*client)->health();
  EXPECT_EQ(health.status().code(), absl::StatusCode::kDeadlineExceeded) << health.status();
  EXPECT_LT(steady_clock::now() - t0, std::chrono::seconds(10));
  t0 = steady_clock::now();
  EXPECT_EQ((*client)->cluster_status().status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(steady_clock::now() - t0, std::chrono::seconds(10));
}

// A server that answered, then froze (SIGSTOP): a generation under the
// default 10-minute deadline ends UNAVAILABLE once a keepalive ping goes
// unanswered (1 s + 1 s), not after 10 minutes.
TEST(ClientTimeouts, AFrozenServerIsNoticedByKeepalive) {
  testing::FakeServer server;
  ASSERT_TRUE(server.ok());
  const int port = std::stoi(server.address().substr(server.address().rfind(':') + 1));
  FreezingRelay relay(port);
  auto client = Client::connect(relay.address());
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->health().ok());
  relay.freeze();
  GenerateOptions g;
  g.prompt = "slow";
  const auto t0 = steady_clock::now();
  auto result = (*client)->generate(g);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_LT(steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST_F(ClientTest, SendsTheApiKeyAsABearerToken) {
  ASSERT_TRUE(client_->generate(prompt("ok")).ok());
  EXPECT_EQ(server_.service().last_authorization(), "");
  ClientOptions options;
  options.api_key = "s3cret";
  std::unique_ptr<Client> client = connect(options);
  ASSERT_TRUE(client->generate(prompt("ok")).ok());
  EXPECT_EQ(server_.service().last_authorization(), "Bearer s3cret");
}

TEST_F(ClientTest, ServerStatusesKeepTheirCodeAndMessage) {
  const std::pair<const char*, absl::StatusCode> cases[] = {
      {"INVALID_ARGUMENT", absl::StatusCode::kInvalidArgument},
      {"OUT_OF_RANGE", absl::StatusCode::kOutOfRange},
      {"RESOURCE_EXHAUSTED", absl::StatusCode::kResourceExhausted},
      {"UNAVAILABLE", absl::StatusCode::kUnavailable},
      {"INTERNAL", absl::StatusCode::kInternal},
  };
  for (const auto& [name, code] : cases) {
    SCOPED_TRACE(name);
    auto result = client_->generate(prompt(std::string("error:") + name));
    EXPECT_EQ(result.status().code(), code);
    EXPECT_EQ(result.status().message(), "worker w1 (127.0.0.1:50062) died");
  }
  auto refused = client_->tokenize("refuse");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(), "text: refused by the test");
}

TEST_F(ClientTest, BrokenStreamsAreRefusedWithAClearError) {
  const std::pair<const char*, const char*> cases[] = {
      {"two-done", "a second done event"},
      {"delta-after-done", "a delta after the done event"},
      {"no-done", "the stream ended without a done event"},
      {"empty-event", "an event that is neither delta nor done"},
      {"negative-id", "delta.ids[1]: -3 is not a token id"},
      {"choices-mismatch", "a delta with 2 ids and 1 choices"},
      {"done-no-reason", "a done event without a finish_reason"},
  };
  for (const auto& [name, message] : cases) {
    SCOPED_TRACE(name);
    auto result = client_->generate_stream(prompt(name),
                                           [](const Delta&) { return true; });
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
    EXPECT_NE(result.status().message().find(message), std::string::npos)
        << result.status();
  }
  // The same client goes on working.
  EXPECT_TRUE(client_->generate(prompt("ok")).ok());
}

TEST_F(ClientTest, UnreachableServerIsUnavailable) {
  // Port 1 on loopback: nothing listens there (and it needs root to).
  auto client = Client::connect("127.0.0.1:1");
  ASSERT_TRUE(client.ok());
  auto result = (*client)->generate(prompt("ok"));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable)
      << result.status();
  EXPECT_EQ((*client)->health().status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(ClientTest, EightConcurrentStreamsAllComplete) {
  std::vector<std::future<absl::StatusOr<GenerateResult>>> calls;
  for (int i = 0; i < 8; ++i) {
    calls.push_back(std::async(std::launch::async, [&] {
      return client_->generate_stream(prompt("many"),
                                      [](const Delta&) { return true; });
    }));
  }
  for (auto& call : calls) {
    auto result = call.get();
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->ids.size(), 100u);
    EXPECT_EQ(result->text, std::string(100, 'x'));
  }
}

TEST_F(ClientTest, TokenizeAndDetokenize) {
  auto tokens = client_->tokenize("hi");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->ids, (std::vector<int32_t>{1, 'h', 'i'}));
  EXPECT_EQ(tokens->pieces, (std::vector<std::string>{"<s>", "h", "i"}));
  TokenizeOptions no_bos;
  no_bos.add_special = false;
  EXPECT_EQ(client_->tokenize("hi", no_bos)->ids,
            (std::vector<int32_t>{'h', 'i'}));
  auto text = client_->detokenize({'o', 'k'});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "ok");
  EXPECT_EQ(client_->detokenize({300}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, ModelsHealthAndClusterStatus) {
  auto models = client_->list_models();
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->size(), 1u);
  EXPECT_EQ((*models)[0].name, "stories260K");
  EXPECT_EQ((*models)[0].n_layer, 5);

  auto health = client_->health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->state, ServingState::kDegraded);
  EXPECT_STREQ(serving_state_name(health->state), "degraded");

  auto status = client_->cluster_status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state, ServingState::kDegraded);
  EXPECT_EQ(status->model.architecture, "llama");
  ASSERT_EQ(status->workers.size(), 2u);
  EXPECT_EQ(status->workers[0].last_block, 3);
  EXPECT_TRUE(status->workers[0].embedding);
  EXPECT_TRUE(status->workers[1].head);
  EXPECT_EQ(status->workers[1].last_error, "connection refused");
  EXPECT_EQ(status->requests_served, 7u);
  EXPECT_EQ(status->queued_requests, 3);
  EXPECT_EQ(status->workers[0].name, "w0");
  EXPECT_EQ(status->workers[1].name, "");
}

}  // namespace
}  // namespace strata
