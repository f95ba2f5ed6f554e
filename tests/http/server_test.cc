// HttpServer (coordinator/http/server.h) with a fake handler over real
// loopback sockets: keep-alive, the limits (413, 431, a slow sender cut
// off), malformed bytes, event streams, a client that hangs up, and many
// idle connections at once.
#include "coordinator/http/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace strata::coordinator::http {
namespace {

// A blocking client socket; every read gives up after 10 s.
class Client {
 public:
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~Client() { close(); }
  bool connected() const { return connected_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until `pred(data)` holds or the peer closes; returns the data.
  template <typename Pred>
  std::string read_until(Pred pred) {
    while (!pred(buf_)) {
      char tmp[4096];
      const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      buf_.append(tmp, static_cast<size_t>(n));
    }
    return buf_;
  }
  // One response with a Content-Length body; consumed from the buffer.
  std::string response() {
    read_until([](const std::string& b) {
      const size_t end = b.find("\r\n\r\n");
      if (end == std::string::npos) return false;
      const size_t cl = b.find("Content-Length: ");
      if (cl == std::string::npos || cl > end) return true;
      return b.size() >= end + 4 + std::stoul(b.substr(cl + 16));
    });
    const size_t end = buf_.find("\r\n\r\n");
    if (end == std::string::npos) return std::exchange(buf_, "");
    size_t len = 0;
    const size_t cl = buf_.find("Content-Length: ");
    if (cl != std::string::npos && cl < end) len = std::stoul(buf_.substr(cl + 16));
    std::string r = buf_.substr(0, std::min(buf_.size(), end + 4 + len));
    buf_.erase(0, r.size());
    return r;
  }
  bool closed() {
    read_until([](const std::string&) { return false; });
    return closed_;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  std::string buf_;
};

struct Fixture {
  ServerOptions options;
  std::promise<void> gone;
  std::unique_ptr<HttpServer> server;
  int port = 0;

  void start() {
    server = std::make_unique<HttpServer>(options, [this](Request r, std::shared_ptr<Responder> out) {
      if (r.path == "/events") {
        out->start_events();
        out->event("one");
        out->event("{\"two\": 2}");
        out->event("[DONE]");
        out->end_events();
      } else if (r.path == "/hang") {  // a POST: its own thread may block
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!out->gone() && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        if (out->gone()) gone.set_value();
      } else {
        out->send(200, "text/plain", r.method + " " + r.target + " " + std::to_string(r.body.size()));
      }
    });
    auto bound = server->start("127.0.0.1:0");
    ASSERT_TRUE(bound.ok()) << bound.status();
    port = *bound;
  }
};

TEST(HttpServer, KeepAliveAnswersRequestsInTurn) {
  Fixture f;
  f.start();
  Client c(f.port);
  ASSERT_TRUE(c.connected());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send("GET /x?i=" + std::to_string(i) + " HTTP/1.1\r\nHost: a\r\n\r\n"));
    const std::string r = c.response();
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
    EXPECT_NE(r.find("GET /x?i=" + std::to_string(i) + " 0"), std::string::npos) << r;
  }
  // Two requests in one write (pipelined): both answered, in order.
  ASSERT_TRUE(c.send("POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\n\r\n"));
  EXPECT_NE(c.response().find("POST /a 3"), std::string::npos);
  EXPECT_NE(c.response().find("GET /b 0"), std::string::npos);
}

// CORS: an allowed Origin gets Access-Control-Allow-Origin on answers and
// streams; its preflight is answered 204 here (the handler, which echoes
// the method, never sees it); an origin not allowed, or CORS off, gets no
// such header and the OPTIONS goes to the handler.
TEST(HttpServer, CorsAnswersPreflightsAndMarksAllowedOrigins) {
  auto has = [](const std::string& r, const std::string& line) {
    return r.find("\r\n" + line + "\r\n") != std::string::npos;
  };
  {
    Fixture f;  // default: any origin
    f.start();
    Client c(f.port);
    c.send("OPTIONS /v1/chat/completions HTTP/1.1\r\nOrigin: http://ui.example\r\n"
           "Access-Control-Request-Method: POST\r\n"
           "Access-Control-Request-Headers: authorization\r\n"
           "Access-Control-Request-Headers: content-type\r\n\r\n");  // two lines: joined
    std::string r = c.response();
    EXPECT_EQ(r.rfind("HTTP/1.1 204", 0), 0u) << r;
    EXPECT_TRUE(has(r, "Access-Control-Allow-Origin: *")) << r;
    EXPECT_TRUE(has(r, "Access-Control-Allow-Methods: GET, POST, OPTIONS")) << r;
    EXPECT_TRUE(has(r, "Access-Control-Allow-Headers: authorization, content-type")) << r;
    EXPECT_EQ(r.find("OPTIONS /v1"), std::string::npos) << r;  // not the handler's
    c.send("POST /x HTTP/1.1\r\nOrigin: http://ui.example\r\nContent-Length: 2\r\n\r\nab");
    r = c.response();
    EXPECT_NE(r.find("POST /x 2"), std::string::npos) << r;
    EXPECT_TRUE(has(r, "Access-Control-Allow-Origin: *")) << r;
    c.send("GET /events HTTP/1.1\r\nOrigin: http://ui.example\r\n\r\n");
    r = c.read_until([](const std::string& b) { return b.find("[DONE]") != std::string::npos; });
    EXPECT_TRUE(has(r, "Access-Control-Allow-Origin: *")) << r;
    Client plain(f.port);  // no Origin: no CORS header
    plain.send("GET /y HTTP/1.1\r\n\r\n");
    r = plain.response();
    EXPECT_EQ(r.find("Access-Control"), std::string::npos) << r;
  }
  {
    Fixture f;
    f.options.cors_allow_origin = "https://ok.example";
    f.start();
    Client c(f.port);
    c.send("GET /y HTTP/1.1\r\nOrigin: https://ok.example\r\n\r\n");
    std::string r = c.response();
    EXPECT_TRUE(has(r, "Access-Control-Allow-Origin: https://ok.example")) << r;
    EXPECT_TRUE(has(r, "Vary: Origin")) << r;
    c.send("GET /y HTTP/1.1\r\nOrigin: https://evil.example\r\n\r\n");
    r = c.response();
    EXPECT_EQ(r.find("Access-Control"), std::string::npos) << r;
    EXPECT_TRUE(has(r, "Vary: Origin")) << r;  // the answer depends on Origin
    c.send("GET /y HTTP/1.1\r\n\r\n");
    r = c.response();
    EXPECT_TRUE(has(r, "Vary: Origin")) << r;
    c.send("OPTIONS /y HTTP/1.1\r\nOrigin: https://evil.example\r\n"
           "Access-Control-Request-Method: POST\r\n\r\n");
    r = c.response();
    EXPECT_NE(r.find("OPTIONS /y 0"), std::string::npos) << r;  // the handler's
  }
  {
    Fixture f;
    f.options.cors_allow_origin = "";  // off
    f.start();
    Client c(f.port);
    c.send("OPTIONS /y HTTP/1.1\r\nOrigin: http://ui.example\r\n"
           "Access-Control-Request-Method: POST\r\n\r\n");
    const std::string r = c.response();
    EXPECT_NE(r.find("OPTIONS /y 0"), std::string::npos) << r;
    EXPECT_EQ(r.find("Access-Control"), std::string::npos) << r;
  }
}

TEST(HttpServer, BodyOverTheLimitIs413) {
  Fixture f;
  f.options.max_body_bytes = 1024;
  f.options.error_body = [](int status, const std::string& m) {
    return std::make_pair(std::string("application/json"),
                          "{\"status\": " + std::to_string(status) + ", \"m\": \"" + m + "\"}");
  };
  f.start();
  Client c(f.port);
  const std::string body(64 * 1024, 'x');
  c.send("POST /a HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  const std::string r = c.response();
  EXPECT_EQ(r.rfind("HTTP/1.1 413", 0), 0u) << r;
  EXPECT_NE(r.find("\"status\": 413"), std::string::npos) << r;
  EXPECT_TRUE(c.closed());
}

TEST(HttpServer, ExpectContinueIsAnswered) {
  Fixture f;
  f.options.max_body_bytes = 1024;
  f.start();
  Client c(f.port);
  c.send("POST /a HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  const std::string cont = c.read_until(
      [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; });
  EXPECT_EQ(cont.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << cont;
  c.send("hello");
  const std::string r = c.read_until(
      [](const std::string& b) { return b.find("POST /a 5") != std::string::npos; });
  EXPECT_NE(r.find("HTTP/1.1 200 OK"), std::string::npos) << r;
  // Too big: 413 at once, without a 100 first.
  Client big(f.port);
  big.send("POST /a HTTP/1.1\r\nContent-Length: 999999\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_EQ(big.response().rfind("HTTP/1.1 413", 0), 0u);
}

TEST(HttpServer, HugeHeaderIs431AndGarbageIs400) {
  Fixture f;
  f.options.max_header_bytes = 1024;
  f.start();
  Client big(f.port);
  big.send("GET / HTTP/1.1\r\nX-Big: " + std::string(4096, 'a') + "\r\n\r\n");
  EXPECT_EQ(big.response().rfind("HTTP/1.1 431", 0), 0u);
  Client junk(f.port);
  junk.send("\x01\x02 not http at all\r\n\r\n");
  EXPECT_EQ(junk.response().rfind("HTTP/1.1 400", 0), 0u);
  // The server still answers.
  Client ok(f.port);
  ok.send("GET /fine HTTP/1.1\r\n\r\n");
  EXPECT_EQ(ok.response().rfind("HTTP/1.1 200", 0), 0u);
}

TEST(HttpServer, SlowSenderIsCutOff) {
  Fixture f;
  f.options.request_timeout_ms = 200;
  f.start();
  Client slow(f.port);
  slow.send("GET / HTTP/1.1\r\nHost: a\r\n");  // and never the blank line
  EXPECT_TRUE(slow.closed());                  // within the request timeout
  Client idle(f.port);
  Client ok(f.port);
  ok.send("GET / HTTP/1.1\r\n\r\n");
  EXPECT_EQ(ok.response().rfind("HTTP/1.1 200", 0), 0u);
}

TEST(HttpServer, EventStreamIsChunkedSse) {
  Fixture f;
  f.start();
  Client c(f.port);
  c.send("GET /events HTTP/1.1\r\n\r\n");
  const std::string r = c.read_until(
      [](const std::string& b) { return b.find("\r\n0\r\n\r\n") != std::string::npos; });
  EXPECT_NE(r.find("Content-Type: text/event-stream"), std::string::npos) << r;
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos) << r;
  EXPECT_NE(r.find("data: one\n\n"), std::string::npos) << r;
  EXPECT_NE(r.find("data: {\"two\": 2}\n\n"), std::string::npos) << r;
  EXPECT_NE(r.find("data: [DONE]\n\n"), std::string::npos) << r;
  // Still usable afterwards (keep-alive).
  c.send("GET /after HTTP/1.1\r\n\r\n");
  EXPECT_NE(c.read_until([](const std::string& b) { return b.find("GET /after") != std::string::npos; })
                .find("GET /after 0"),
            std::string::npos);
}

TEST(HttpServer, ClientThatHangsUpIsGone) {
  Fixture f;
  f.start();
  std::future<void> gone = f.gone.get_future();
  {
    Client c(f.port);
    c.send("POST /hang HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  }  // closed here
  EXPECT_EQ(gone.wait_for(std::chrono::seconds(10)), std::future_status::ready);
}

TEST(HttpServer, AThousandIdleConnectionsThenEachAnswered) {
  Fixture f;
  f.start();
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 1000; ++i) {
    clients.push_back(std::make_unique<Client>(f.port));
    ASSERT_TRUE(clients.back()->connected()) << i;
  }
  Client other(f.port);
  other.send("GET /meanwhile HTTP/1.1\r\n\r\n");
  EXPECT_EQ(other.response().rfind("HTTP/1.1 200", 0), 0u);
  for (auto& c : clients) c->send("GET /each HTTP/1.1\r\n\r\n");
  int ok = 0;
  for (auto& c : clients) ok += c->response().rfind("HTTP/1.1 200", 0) == 0 ? 1 : 0;
  EXPECT_EQ(ok, 1000);
}

TEST(HttpServer, StopWhileConnectionsAreOpen) {
  Fixture f;
  f.start();
  Client a(f.port);
  Client b(f.port);
  b.send("GET / HTTP/1.1\r\n\r\n");
  EXPECT_EQ(b.response().rfind("HTTP/1.1 200", 0), 0u);
  f.server->stop();
  f.server.reset();
}

}  // namespace
}  // namespace strata::coordinator::http
