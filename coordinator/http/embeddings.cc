#include "coordinator/http/embeddings.h"

#include <openssl/evp.h>

#include <charconv>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/http/openai.h"
#include "nlohmann/json.hpp"

namespace strata::coordinator::http {
namespace {

using json = nlohmann::json;

absl::Status bad(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// An array of token ids into `ids`; false when an element is not an
// integer in int32's range (the ids' vocabulary bound is run_embed's).
bool read_ids(const json& a, v1::TokenIds* ids, std::string* error) {
  for (size_t k = 0; k < a.size(); ++k) {
    const json& v = a[k];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      *error = absl::StrCat("[", k, "]: expected a token id (an integer >= 0)");
      return false;
    }
    ids->add_ids(static_cast<int32_t>(v.get<int64_t>()));
  }
  return true;
}

std::string base64_of(const float* v, int n) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  std::vector<unsigned char> raw(bytes);
  std::memcpy(raw.data(), v, bytes);  // little-endian hosts only (x86-64, arm64)
  std::string out(4 * ((bytes + 2) / 3), '\0');
  const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), raw.data(),
                                      static_cast<int>(bytes));
  out.resize(static_cast<size_t>(written));
  return out;
}

}  // namespace

absl::StatusOr<EmbeddingsRequest> parse_embeddings_request(std::string_view body, int n_embd) {
  absl::StatusOr<json> parsed = parse_json_object(body);
  if (!parsed.ok()) return parsed.status();
  const json& b = *parsed;
  EmbeddingsRequest r;
  v1::EmbedRequest& e = r.embed;
  if (auto m = b.find("model"); m != b.end() && !m->is_null()) {
    if (!m->is_string()) return bad("model", "expected a string");
    e.set_model(m->get<std::string>());
  }
  auto in = b.find("input");
  if (in == b.end() || in->is_null()) return bad("input", "missing");
  std::string error;
  if (in->is_string()) {
    e.add_inputs()->set_text(in->get<std::string>());
  } else if (in->is_array()) {
    if (in->empty()) return bad("input", "empty (give 1 to 2048 inputs)");
    if (in->size() > 2048) return bad("input", absl::StrCat(in->size(), " inputs; at most 2048"));
    const json& first = (*in)[0];
    if (first.is_number()) {  // one input as token ids
      if (!read_ids(*in, e.add_inputs()->mutable_ids(), &error)) return bad("input", error);
    } else {
      for (size_t i = 0; i < in->size(); ++i) {
        const json& v = (*in)[i];
        const std::string field = absl::StrCat("input[", i, "]");
        if (first.is_string()) {
          if (!v.is_string()) return bad(field, "expected a string, as input[0]");
          e.add_inputs()->set_text(v.get<std::string>());
        } else if (first.is_array()) {
          if (!v.is_array()) return bad(field, "expected an array of token ids, as input[0]");
          if (!read_ids(v, e.add_inputs()->mutable_ids(), &error)) return bad(field, error);
        } else {
          return bad(field, "expected a string or an array of token ids");
        }
      }
    }
  } else {
    return bad("input", "expected a string or an array");
  }
  if (auto f = b.find("encoding_format"); f != b.end() && !f->is_null()) {
    if (!f->is_string() || (*f != "float" && *f != "base64")) {
      return bad("encoding_format",
                 absl::StrCat(f->is_string() ? absl::StrCat("'", f->get<std::string>(), "'")
                                             : std::string("a non-string"),
                              " is not float or base64"));
    }
    r.base64 = *f == "base64";
  }
  if (auto d = b.find("dimensions"); d != b.end() && !d->is_null()) {
    if (!d->is_number_integer() || d->get<int64_t>() != n_embd) {
      return bad("dimensions", absl::StrCat(d->dump(), " is not this model's ", n_embd,
                                            " (it gives no shorter embeddings)"));
    }
  }
  if (auto n = b.find("normalize"); n != b.end() && !n->is_null()) {
    if (!n->is_boolean()) return bad("normalize", "expected a boolean");
    e.set_normalize(n->get<bool>());
  }
  if (auto p = b.find("pooling"); p != b.end() && !p->is_null()) {
    if (*p == "mean") {
      e.set_pooling(v1::POOLING_MEAN);
    } else if (*p == "last") {
      e.set_pooling(v1::POOLING_LAST);
    } else {
      return bad("pooling", absl::StrCat(p->dump(), " is not \"mean\" or \"last\""));
    }
  }
  if (auto s = b.find("cache_salt"); s != b.end() && !s->is_null()) {
    if (!s->is_string()) return bad("cache_salt", "expected a string");
    e.set_cache_salt(s->get<std::string>());
  }
  if (auto u = b.find("user"); u != b.end() && !u->is_null() && !u->is_string()) {
    return bad("user", "expected a string");
  }
  return r;
}

std::string embeddings_response_json(const v1::EmbedResponse& response, const std::string& model,
                                     bool base64) {
  // The vectors are written here, each float in its shortest form that
  // reads back as the same float (std::to_chars), not through a json
  // value (a double each, printed with 17 digits).
  std::string out = R"({"object":"list","data":[)";
  char buf[32];
  for (int i = 0; i < response.embeddings_size(); ++i) {
    const v1::Embedding& em = response.embeddings(i);
    absl::StrAppend(&out, i == 0 ? "" : ",", R"({"object":"embedding","index":)", i,
                    R"(,"embedding":)");
    if (base64) {
      absl::StrAppend(&out, "\"", base64_of(em.values().data(), em.values_size()), "\"}");
      continue;
    }
    out += '[';
    for (int k = 0; k < em.values_size(); ++k) {
      if (k > 0) out += ',';
      const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, em.values(k));
      out.append(buf, ec == std::errc() ? end : buf);
    }
    out += "]}";
  }
  const int tokens = response.usage().prompt_tokens();
  absl::StrAppend(&out, R"(],"model":)", dump_json(json(model)), R"(,"usage":{"prompt_tokens":)",
                  tokens, R"(,"total_tokens":)", tokens,
                  R"(,"prompt_tokens_details":{"cached_tokens":)",
                  response.usage().cached_tokens(), "}}}");
  return out;
}

std::string http_field_names(std::string message) {
  if (message.rfind("inputs", 0) != 0) return message;
  message.erase(5, 1);  // "inputs" -> "input"
  for (const char* from : {"].text", "].ids"}) {
    if (size_t at = message.find(from); at != std::string::npos) {
      message.erase(at + 1, std::strlen(from) - 1);
    }
  }
  return message;
}

}  // namespace strata::coordinator::http
