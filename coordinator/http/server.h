// HttpServer: HTTP/1.1 over TCP (Boost.Beast over Asio) for the OpenAI
// front end. It owns the sockets, the limits and the threads; what a
// request means is the Handler's business (router.h).
//
//   - Asynchronous: one io_context run by `io_threads` threads; an idle
//     keep-alive connection costs a socket and a few hundred bytes, so
//     thousands of them do not slow anyone down.
//   - Limits: header bytes (431), body bytes (413), the time to receive a
//     whole request once its first byte came (slow senders are cut off),
//     the idle time of a keep-alive connection, the time one write may take
//     (a client that stops reading a stream is dropped), open connections
//     (beyond: 503 and close).
//   - CORS: allowed origins get Access-Control-Allow-Origin, and their
//     preflights (OPTIONS) are answered here (ServerOptions).
//   - A handler answers through a Responder, from any thread, at any time
//     later: one whole response, or an event stream (SSE, chunked). While a
//     request is being answered the server watches the socket; a client
//     that goes away makes Responder::gone() true, so a generation can be
//     cancelled.
//
// The handler of a POST runs on a thread of its own and may block (a
// generation waits on the scheduler); every other method's runs on an io
// thread and must not block.
//
// Ownership: the server owns its io_context, threads and connections; the
// handler is borrowed and must outlive stop(). Threads: start() and stop()
// from one thread; Responder methods from any.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::coordinator::http {

struct Request {
  uint64_t id = 0;          // per server, from 1
  std::string method;       // "GET", "POST", ...
  std::string target;       // as sent: path and query
  std::string path;         // target without the query
  std::string body;
  std::string authorization;  // the Authorization header, or ""
  std::string remote;       // peer address, for logs
};

using Headers = std::vector<std::pair<std::string, std::string>>;

// The answer to one request. Thread-safe; calls after the response ended
// (or after the client went away) are ignored.
class Responder {
 public:
  virtual ~Responder() = default;
  // The whole response (Content-Length set; keep-alive kept).
  virtual void send(int status, std::string content_type, std::string body,
                    Headers headers = {}) = 0;
  // A server-sent event stream: 200 with text/event-stream, chunked.
  virtual void start_events(Headers headers = {}) = 0;
  // One event: "data: <data>\n\n" in one chunk.
  virtual void event(std::string_view data) = 0;
  // The end of the stream (the last chunk).
  virtual void end_events() = 0;
  // The client closed the connection, a write timed out, or the server is
  // stopping: nobody will read what is sent.
  virtual bool gone() const = 0;
};

using Handler =
    std::function<void(Request request, std::shared_ptr<Responder> responder)>;

// The body of an error the server answers by itself (413, 431, 400 for
// bytes that are not HTTP, 503 over the connection or job limit):
// {content type, body}.
using ErrorBodyFn =
    std::function<std::pair<std::string, std::string>(int status, const std::string& message)>;

struct ServerOptions {
  int io_threads = 1;
  // GET and the like run on an io thread; POST runs on a thread of its own
  // (generation blocks), at most this many at once (beyond: 503).
  int max_jobs = 1024;
  ErrorBodyFn error_body;  // empty: text/plain with the message
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 8 << 20;
  int request_timeout_ms = 30000;   // first byte -> whole request
  int idle_timeout_ms = 120000;     // keep-alive: between requests
  int write_timeout_ms = 60000;     // one write of a response or chunk
  int max_connections = 4096;
  // CORS (browser clients on another origin; the Fetch standard): "*" any
  // origin, "" none, else that one origin exactly. A request whose Origin
  // is allowed gets Access-Control-Allow-Origin on its response; an
  // OPTIONS preflight from it (Access-Control-Request-Method set) is
  // answered 204 here, allowing GET, POST and the headers it asks for,
  // without reaching the handler. No credentials (cookies) are allowed: the
  // API key travels in Authorization.
  std::string cors_allow_origin = "*";
};

class HttpServer {
 public:
  HttpServer(ServerOptions options, Handler handler);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds `listen` ("host:port"; port 0: any free one) and starts serving.
  // Returns the bound port. Unavailable when the address cannot be bound.
  absl::StatusOr<int> start(const std::string& listen);
  // Stops accepting, makes every responder gone(), joins the io threads and
  // then the POST handlers' threads (a handler must return soon after its
  // responder is gone()).
  void stop();

  int open_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Starts `server` on `listen`, or — when `fallback` — on the next free port
// after it (up to 100 further), like `strata serve --listen` without the
// flag. Returns the address bound ("host:port").
absl::StatusOr<std::string> start_with_fallback(HttpServer& server,
                                                const std::string& listen,
                                                bool fallback);

}  // namespace strata::coordinator::http
