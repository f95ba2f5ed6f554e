// The Beast side of HttpServer. A connection is a Session on a strand:
//
//   wait_request   up to idle_timeout for the first byte of a request;
//   read_request   the rest, within request_timeout (header and body limits
//                  by the parser);
//   respond        the handler answers through a Responder; meanwhile one
//                  read stays posted on the socket (watch), so a client that
//                  hangs up is noticed (gone) while its request runs;
//   then the next request (keep-alive) or close.
//
// Responses are written as raw bytes from a queue of strings (a head with
// Content-Length, or a chunked event stream), each write under
// write_timeout. Bytes that arrive during a response (a pipelined request)
// stay in the buffer for the next read.
#include "coordinator/http/server.h"

#include <sys/resource.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strata::coordinator::http {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

// Threads of the POST handlers: one each, joined when done or at stop.
class JobThreads {
 public:
  explicit JobThreads(int max) : max_(max) {}
  ~JobThreads() { join_all(); }

  bool spawn(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mu_);
    reap_locked();
    if (static_cast<int>(jobs_.size()) >= max_) return false;
    auto done = std::make_shared<std::atomic<bool>>(false);
    jobs_.push_back({std::thread([job = std::move(job), done] {
                       job();
                       done->store(true);
                     }),
                     done});
    return true;
  }

  void join_all() {
    std::list<Job> jobs;
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs.swap(jobs_);
    }
    for (Job& j : jobs) j.thread.join();
  }

 private:
  struct Job {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  void reap_locked() {
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = jobs_.erase(it);
      } else {
        ++it;
      }
    }
  }

  const int max_;
  std::mutex mu_;
  std::list<Job> jobs_;
};

}  // namespace

// What every session shares with the server.
struct Shared {
  ServerOptions options;
  Handler handler;
  std::atomic<bool> stopping{false};
  std::atomic<int> connections{0};
  std::atomic<uint64_t> next_request{1};
  JobThreads jobs;

  Shared(ServerOptions o, Handler h)
      : options(std::move(o)), handler(std::move(h)), jobs(options.max_jobs) {}

  std::pair<std::string, std::string> error_body(int status, const std::string& message) const {
    if (options.error_body) return options.error_body(status, message);
    return {"text/plain; charset=utf-8", message + "\n"};
  }
};

namespace {

std::string status_line(int status) {
  const beast::string_view reason = bhttp::obsolete_reason(bhttp::int_to_status(status));
  return absl::StrCat("HTTP/1.1 ", status, " ",
                      reason.empty() ? "Unknown" : std::string(reason), "\r\n");
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, std::shared_ptr<Shared> shared)
      : stream_(std::move(socket)), shared_(std::move(shared)) {
    shared_->connections.fetch_add(1);
    beast::error_code ec;
    const tcp::endpoint peer = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = absl::StrCat(peer.address().to_string(), ":", peer.port());
  }
  ~Session() { shared_->connections.fetch_sub(1); }

  void start(bool over_limit) {
    net::dispatch(stream_.get_executor(), [self = shared_from_this(), over_limit] {
      if (over_limit) {
        self->keep_alive_ = false;
        self->respond_error(503, "too many open connections; try again later",
                            {{"Retry-After", "1"}});
        return;
      }
      self->wait_request();
    });
  }

  // Responder calls, posted onto the strand. `seq` is the request they
  // belong to: a late call for an earlier request is dropped.
  void post_send(uint64_t seq, int status, std::string type, std::string body,
                 Headers headers) {
    net::post(stream_.get_executor(),
              [self = shared_from_this(), seq, status, type = std::move(type),
               body = std::move(body), headers = std::move(headers)]() mutable {
                if (seq != self->seq_ || self->state_ != State::kResponding) return;
                self->write_whole(status, type, std::move(body), headers);
              });
  }
  void post_start_events(uint64_t seq, Headers headers) {
    net::post(stream_.get_executor(),
              [self = shared_from_this(), seq, headers = std::move(headers)] {
                if (seq != self->seq_ || self->state_ != State::kResponding) return;
                self->state_ = State::kStreaming;
                std::string head = status_line(200);
                head += "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n";
                head += self->cors_headers_;
                if (self->http11_) head += "Transfer-Encoding: chunked\r\n";
                if (!self->http11_) self->keep_alive_ = false;
                for (const auto& [k, v] : headers) absl::StrAppend(&head, k, ": ", v, "\r\n");
                head += self->keep_alive_ ? "Connection: keep-alive\r\n\r\n"
                                          : "Connection: close\r\n\r\n";
                self->enqueue(std::move(head));
              });
  }
  void post_event(uint64_t seq, std::string data) {
    net::post(stream_.get_executor(),
              [self = shared_from_this(), seq, data = std::move(data)] {
                if (seq != self->seq_ || self->state_ != State::kStreaming) return;
                std::string payload = absl::StrCat("data: ", data, "\n\n");
                if (self->http11_) {
                  char size[32];
                  std::snprintf(size, sizeof(size), "%zx\r\n", payload.size());
                  payload = absl::StrCat(size, payload, "\r\n");
                }
                self->enqueue(std::move(payload));
              });
  }
  void post_end_events(uint64_t seq) {
    net::post(stream_.get_executor(), [self = shared_from_this(), seq] {
      if (seq != self->seq_ || self->state_ != State::kStreaming) return;
      self->finishing_ = true;
      self->enqueue(self->http11_ ? "0\r\n\r\n" : "");
    });
  }
  bool gone() const { return gone_.load() || shared_->stopping.load(); }

 private:
  enum class State { kReading, kResponding, kStreaming, kWritingLast, kClosed };

  void wait_request() {
    state_ = State::kReading;
    if (shared_->stopping.load()) return close();
    if (buffer_.size() > 0) return read_request();
    stream_.expires_after(std::chrono::milliseconds(shared_->options.idle_timeout_ms));
    stream_.async_read_some(
        buffer_.prepare(4096),
        [self = shared_from_this()](beast::error_code ec, size_t n) {
          if (ec) return self->close();  // idle timeout, or the client left
          self->buffer_.commit(n);
          self->read_request();
        });
  }

  void read_request() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(shared_->options.max_header_bytes));
    parser_->body_limit(shared_->options.max_body_bytes);
    stream_.expires_after(std::chrono::milliseconds(shared_->options.request_timeout_ms));
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = shared_from_this()](beast::error_code ec, size_t) {
                               if (ec) return self->on_read(ec);
                               self->read_body();
                             });
  }

  // A client that asked "Expect: 100-continue" (curl does for bodies over
  // 1 KiB) waits for this before it sends the body; the header passed the
  // limits (a Content-Length over the body limit failed already).
  void read_body() {
    auto rest = [self = shared_from_this()] {
      bhttp::async_read(self->stream_, self->buffer_, *self->parser_,
                        [self](beast::error_code ec, size_t) { self->on_read(ec); });
    };
    const auto& req = parser_->get();
    if (!parser_->is_done() && beast::iequals(req[bhttp::field::expect], "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(kContinue),
                       [self = shared_from_this(), rest](beast::error_code ec, size_t) {
                         if (ec) return self->close();
                         rest();
                       });
      return;
    }
    rest();
  }

  void on_read(beast::error_code ec) {
    if (ec) {
      keep_alive_ = false;
      if (ec == bhttp::error::body_limit) {
        return respond_error(413, absl::StrCat("request body exceeds ",
                                               shared_->options.max_body_bytes, " bytes"));
      }
      if (ec == bhttp::error::header_limit) {
        return respond_error(431, absl::StrCat("request header exceeds ",
                                               shared_->options.max_header_bytes, " bytes"));
      }
      if (ec == beast::error::timeout || ec == bhttp::error::end_of_stream ||
          ec == net::error::eof || ec == net::error::connection_reset ||
          ec == bhttp::error::partial_message) {
        return close();  // too slow, or gone
      }
      return respond_error(400, absl::StrCat("malformed HTTP request: ", ec.message()));
    }
    bhttp::request<bhttp::string_body> msg = parser_->release();
    parser_.reset();
    keep_alive_ = msg.keep_alive();
    http11_ = msg.version() >= 11;
    head_only_ = msg.method() == bhttp::verb::head;
    Request r;
    r.id = shared_->next_request.fetch_add(1);
    r.method = std::string(msg.method_string());
    r.target = std::string(msg.target());
    r.path = r.target.substr(0, r.target.find('?'));
    r.body = std::move(msg.body());
    r.authorization = std::string(msg[bhttp::field::authorization]);
    r.remote = remote_;
    cors_headers_.clear();
    const std::string& allow = shared_->options.cors_allow_origin;
    const std::string origin(msg[bhttp::field::origin]);
    // One allowed origin: every answer depends on the request's Origin, so
    // every answer says so (a shared cache must not give one origin's copy
    // to another).
    if (!allow.empty() && allow != "*") cors_headers_ = "Vary: Origin\r\n";
    if (!origin.empty() && !allow.empty() && (allow == "*" || allow == origin)) {
      cors_headers_ = allow == "*" ? std::string("Access-Control-Allow-Origin: *\r\n")
                                   : absl::StrCat("Access-Control-Allow-Origin: ", origin,
                                                  "\r\nVary: Origin\r\n");
      if (r.method == "OPTIONS" &&
          !msg[bhttp::field::access_control_request_method].empty()) {
        // A preflight: answered here, the handler never sees it.
        // Every Access-Control-Request-Headers line, joined (RFC 9110 5.3).
        std::string asked;
        for (auto [it, end] = msg.equal_range(bhttp::field::access_control_request_headers);
             it != end; ++it) {
          if (it->value().empty()) continue;
          if (!asked.empty()) asked += ", ";
          asked.append(it->value().data(), it->value().size());
        }
        ++seq_;
        state_ = State::kResponding;
        write_whole(204, "text/plain", "",
                    {{"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
                     {"Access-Control-Allow-Headers",
                      asked.empty() ? std::string("Authorization, Content-Type") : asked},
                     {"Access-Control-Max-Age", "86400"}});
        return;
      }
    }

    ++seq_;
    state_ = State::kResponding;
    watch();
    auto responder = std::make_shared<SessionResponder>(shared_from_this(), seq_);
    if (r.method == "POST") {
      std::shared_ptr<Shared> shared = shared_;
      auto job = [shared, r = std::move(r), responder]() mutable {
        shared->handler(std::move(r), responder);
      };
      if (!shared_->jobs.spawn(std::move(job))) {
        keep_alive_ = false;
        write_whole_error(503, "too many requests in progress; try again later",
                          {{"Retry-After", "1"}});
      }
    } else {
      shared_->handler(std::move(r), responder);
    }
  }

  // One read posted while a request is answered: EOF or an error means the
  // client went away; bytes (a pipelined request) are kept for later.
  void watch() {
    if (buffer_.size() > 0) return;  // a pipelined request is already here
    watching_ = true;
    stream_.expires_never();
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->on_watch(ec, n);
                            });
  }

  void on_watch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (!ec) buffer_.commit(n);
    if (stop_watch_) {  // the response is out: on to the next request
      stop_watch_ = false;
      return after_response();
    }
    if (ec) {
      gone_.store(true);
      if (state_ == State::kClosed) return;
      // Writes still queued fail on their own; nothing more is read.
    }
  }

  // The server's own answers (the handler never saw the request): logged
  // here, one line each, as the handler logs its own.
  void respond_error(int status, const std::string& message, Headers headers = {}) {
    spdlog::info("http - {} {} {}", remote_, status, message);
    cors_headers_.clear();
    ++seq_;
    head_only_ = false;
    state_ = State::kResponding;
    write_whole_error(status, message, headers);
  }

  void write_whole_error(int status, const std::string& message, const Headers& headers) {
    auto [type, body] = shared_->error_body(status, message);
    write_whole(status, type, std::move(body), headers);
  }

  void write_whole(int status, const std::string& type, std::string body,
                   const Headers& headers) {
    std::string head = status_line(status);
    absl::StrAppend(&head, "Content-Type: ", type, "\r\nContent-Length: ", body.size(),
                    "\r\n", cors_headers_);
    for (const auto& [k, v] : headers) absl::StrAppend(&head, k, ": ", v, "\r\n");
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    finishing_ = true;
    state_ = State::kWritingLast;
    enqueue(head_only_ ? std::move(head) : std::move(head) + body);
  }

  void enqueue(std::string bytes) {
    if (state_ == State::kClosed) return;
    if (finishing_ && state_ == State::kStreaming) state_ = State::kWritingLast;
    if (gone_.load()) {  // nobody reads: skip the bytes, keep the state machine
      out_.clear();
      if (finishing_ && !writing_) {
        finishing_ = false;
        close();
      }
      return;
    }
    out_.push_back(std::move(bytes));
    if (!writing_) write_next();
  }

  void write_next() {
    if (out_.empty()) {
      writing_ = false;
      if (finishing_) {
        finishing_ = false;
        response_written();
      }
      return;
    }
    writing_ = true;
    stream_.expires_after(std::chrono::milliseconds(shared_->options.write_timeout_ms));
    net::async_write(stream_, net::buffer(out_.front()),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) {
                         self->gone_.store(true);
                         self->out_.clear();
                         self->writing_ = false;
                         self->finishing_ = false;
                         return self->close();
                       }
                       self->out_.pop_front();
                       self->write_next();
                     });
  }

  void response_written() {
    if (!keep_alive_ || gone_.load() || shared_->stopping.load()) return linger_close();
    if (watching_) {
      stop_watch_ = true;
      beast::error_code ec;
      stream_.socket().cancel(ec);
      return;  // on_watch goes on
    }
    after_response();
  }

  void after_response() {
    if (gone_.load() || state_ == State::kClosed) return close();
    if (state_ == State::kWritingLast) return wait_request();
    // A response still being written (the watch ended early): the write's
    // completion moves on.
  }

  // After an error that ends the connection: stop sending, read and drop
  // what the client still sends for a moment (so it sees the answer, not a
  // reset), then close.
  void linger_close() {
    if (state_ == State::kClosed) return;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (watching_) {  // the watch read drains; cancel it and close
      state_ = State::kClosed;
      stream_.socket().cancel(ec);
      stream_.close();
      return;
    }
    state_ = State::kWritingLast;
    drained_ = 0;
    stream_.expires_after(std::chrono::seconds(5));
    drain();
  }

  void drain() {
    if (scratch_.empty()) scratch_.resize(4096);
    stream_.async_read_some(net::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->drained_ += n;
                              if (ec || self->drained_ > (64u << 20)) return self->close();
                              self->drain();
                            });
  }

  void close() {
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    gone_.store(true);
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  class SessionResponder final : public Responder {
   public:
    SessionResponder(std::shared_ptr<Session> s, uint64_t seq) : s_(std::move(s)), seq_(seq) {}
    void send(int status, std::string content_type, std::string body,
              Headers headers) override {
      s_->post_send(seq_, status, std::move(content_type), std::move(body),
                    std::move(headers));
    }
    void start_events(Headers headers) override {
      s_->post_start_events(seq_, std::move(headers));
    }
    void event(std::string_view data) override { s_->post_event(seq_, std::string(data)); }
    void end_events() override { s_->post_end_events(seq_); }
    bool gone() const override { return s_->gone(); }

   private:
    std::shared_ptr<Session> s_;
    uint64_t seq_;
  };

  beast::tcp_stream stream_;
  std::shared_ptr<Shared> shared_;
  std::string remote_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  State state_ = State::kReading;
  uint64_t seq_ = 0;
  bool keep_alive_ = true;
  bool http11_ = true;
  bool head_only_ = false;  // HEAD: the headers of the answer, no body
  std::string cors_headers_;  // CORS header lines for this request's answer
  bool watching_ = false;
  bool stop_watch_ = false;
  bool writing_ = false;
  bool finishing_ = false;
  std::deque<std::string> out_;
  std::atomic<bool> gone_{false};
  size_t drained_ = 0;
  std::vector<char> scratch_;  // drain()'s, allocated when first needed
};

// Lets more sockets be open than the usual soft limit of 1024.
void raise_open_file_limit() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

}  // namespace

struct HttpServer::Impl {
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  net::steady_timer retry{ioc};
  std::shared_ptr<Shared> shared;
  std::vector<std::thread> threads;
  bool started = false;

  void accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (shared->stopping.load() || !acceptor.is_open()) return;
      if (ec) {
        // Out of descriptors (EMFILE) and the like: try again shortly
        // rather than spin or stop accepting for good.
        retry.expires_after(std::chrono::milliseconds(50));
        retry.async_wait([this](beast::error_code) { accept(); });
        return;
      }
      socket.set_option(tcp::no_delay(true), ec);
      const bool over = shared->connections.load() >= shared->options.max_connections;
      std::make_shared<Session>(std::move(socket), shared)->start(over);
      accept();
    });
  }
};

HttpServer::HttpServer(ServerOptions options, Handler handler) : impl_(std::make_unique<Impl>()) {
  impl_->shared = std::make_shared<Shared>(std::move(options), std::move(handler));
}

HttpServer::~HttpServer() { stop(); }

absl::StatusOr<int> HttpServer::start(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", listen, "': expected HOST:PORT"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  raise_open_file_limit();
  beast::error_code ec;
  tcp::resolver resolver(impl_->ioc);
  auto found = resolver.resolve(host, std::to_string(port), ec);
  if (ec || found.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen, ": ", ec.message()));
  }
  const tcp::endpoint endpoint = found.begin()->endpoint();
  tcp::acceptor& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    beast::error_code ignored;
    a.close(ignored);
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen, ": ", ec.message()));
  }
  const int bound = a.local_endpoint().port();
  impl_->accept();
  impl_->started = true;
  const int n = std::max(1, impl_->shared->options.io_threads);
  for (int i = 0; i < n; ++i) impl_->threads.emplace_back([this] { impl_->ioc.run(); });
  return bound;
}

void HttpServer::stop() {
  if (!impl_ || !impl_->started) return;
  impl_->started = false;
  impl_->shared->stopping.store(true);
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
  beast::error_code ec;
  impl_->acceptor.close(ec);
  // The handlers see gone() (stopping) and return; their late calls only
  // queue work on the stopped io_context, destroyed with it.
  impl_->shared->jobs.join_all();
}

int HttpServer::open_connections() const { return impl_->shared->connections.load(); }

absl::StatusOr<std::string> start_with_fallback(HttpServer& server, const std::string& listen,
                                                bool fallback) {
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("'", listen, "': expected HOST:PORT"));
  }
  const std::string host = listen.substr(0, colon);
  absl::Status last;
  const int tries = fallback && port != 0 ? 101 : 1;
  for (int i = 0; i < tries && port + i <= 65535; ++i) {
    absl::StatusOr<int> bound = server.start(absl::StrCat(host, ":", port + i));
    if (bound.ok()) return absl::StrCat(host, ":", *bound);
    last = bound.status();
  }
  if (tries > 1) {
    return absl::UnavailableError(absl::StrCat("no free port in ", host, ":", port, " .. ",
                                               port + tries - 1, "; ", last.message()));
  }
  return last;
}

}  // namespace strata::coordinator::http
