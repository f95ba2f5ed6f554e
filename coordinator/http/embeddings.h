// OpenAI's embeddings endpoint (POST /v1/embeddings, also /embeddings as
// llama.cpp's server and vLLM route it): the JSON request mapped to a
// v1::EmbedRequest for run_embed (coordinator/embedding.h), and the answer
// in OpenAI's shape.
//
// Request (OpenAI's fields, with vLLM's and strata's additions):
//   "input"            a string, an array of strings, an array of token ids
//                      or an array of arrays of token ids; 1 .. 2048 inputs
//   "model"            the served model's name (optional)
//   "encoding_format"  "float" (default) or "base64": the float32 values'
//                      little-endian bytes in base64 (RFC 4648), as OpenAI
//                      sends them and its Python SDK asks by default
//   "dimensions"       only the model's n_embd (no model here is trained
//                      for shorter vectors)
//   "normalize"        vLLM's: false gives the pooled vector as it is
//                      [true: L2-normalized]
//   "pooling"          strata's: "mean" or "last" [the model's]
//   "cache_salt", "user"
// Answer: {"object": "list", "data": [{"object": "embedding", "index": i,
// "embedding": [...] | "base64"}], "model", "usage": {"prompt_tokens",
// "total_tokens"}}.
//
// Errors: InvalidArgument naming the field, as OpenAI spells it ("input[2]:
// expected a string", "encoding_format: 'hex' is not float or base64").
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "strata/v1/inference.pb.h"

namespace strata::coordinator::http {

struct EmbeddingsRequest {
  v1::EmbedRequest embed;
  bool base64 = false;  // encoding_format
};

// Parses the JSON body; n_embd checks "dimensions".
absl::StatusOr<EmbeddingsRequest> parse_embeddings_request(std::string_view body, int n_embd);

// The answer's JSON text for `response` (its vectors in input order).
std::string embeddings_response_json(const v1::EmbedResponse& response, const std::string& model,
                                     bool base64);

// run_embed's messages name proto fields ("inputs[1].ids[0]: ..."); this
// spells them as the HTTP request does ("input[1][0]: ...").
std::string http_field_names(std::string message);

}  // namespace strata::coordinator::http
