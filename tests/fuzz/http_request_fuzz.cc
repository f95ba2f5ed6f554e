// libFuzzer target: raw bytes from a client of the HTTP API, through
// Boost.Beast's request parser with the limits the OpenAI server sets
// (coordinator/http/api.h openai_server_options: header and body bytes),
// then, for a complete request, what the server and the API take from it:
// the path, the Authorization header through check_bearer, and a POST
// body of /v1/chat/completions, /v1/completions, /tokenize or /detokenize
// through the OpenAI parsers (coordinator/http/openai.h).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "coordinator/api_key.h"
#include "coordinator/http/api.h"
#include "coordinator/http/openai.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using strata::fuzz::check;
using namespace strata::coordinator;  // NOLINT: a test harness

void check_refusal(const absl::Status& status) {
  check(!status.ok(), "a refusal is an error");
  const http::ApiError e = http::to_api_error(status);
  check(e.http_status >= 400 && e.http_status < 500, "the client's bytes give a 4xx");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const http::ServerOptions options = http::openai_server_options();
  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
  parser.body_limit(options.max_body_bytes);
  parser.eager(true);
  beast::error_code ec;
  size_t used = 0;
  while (used < size && !parser.is_done()) {
    const size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
    if (ec == bhttp::error::need_more) {
      ec = {};
      break;
    }
    if (ec || n == 0) break;
    used += n;
  }
  if (!ec && !parser.is_done() && parser.got_some()) {
    parser.put_eof(ec);  // the client closed: a body read to the end
  }
  if (ec || !parser.is_done()) return 0;

  bhttp::request<bhttp::string_body> msg = parser.release();
  check(msg.body().size() <= options.max_body_bytes, "the body limit holds");
  const std::string target(msg.target());
  const std::string path = target.substr(0, target.find('?'));
  const std::string authorization(msg[bhttp::field::authorization]);
  const absl::Status auth = check_bearer("sk-fuzz", authorization);
  check(auth.ok() == strata::fuzz::bearer_matches(authorization, "sk-fuzz"), "only the key passes");
  if (msg.method() != bhttp::verb::post) return 0;
  if (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/infill" ||
      path == "/completion") {
    auto parsed = http::parse_openai_request(
        path == "/v1/chat/completions" ? http::Endpoint::kChat
        : path == "/infill"            ? http::Endpoint::kInfill
        : path == "/completion"        ? http::Endpoint::kLlamaCompletion
                                       : http::Endpoint::kCompletion,
        msg.body());
    if (!parsed.ok()) check_refusal(parsed.status());
  } else if (path == "/tokenize" || path == "/detokenize") {
    auto object = http::parse_json_object(msg.body());
    if (!object.ok()) check_refusal(object.status());
  }
  return 0;
}
