// Structured output on the coordinator: the GBNF a request asks for (its
// own grammar, or one made from a JSON Schema or for any JSON object), and
// the check that a grammar parses before a sequence is admitted. The last
// stage enforces it (worker/stage.cc, model/grammar/grammar.h).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "strata/v1/inference.pb.h"

namespace strata::coordinator {

inline constexpr size_t kMaxGrammarBytes = 64 * 1024;
inline constexpr size_t kMaxJsonSchemaBytes = 256 * 1024;

// The GBNF for a request that gives at most one of `grammar` (GBNF),
// `json_schema` (JSON Schema as JSON text) and `json_object`; "" for none.
// InvalidArgument naming the field: more than one given, a schema that is
// not JSON or uses an unsupported keyword ("json_schema: #/properties/a:
// keyword 'pattern' is not supported"), a grammar that does not parse
// ("grammar: line 2 col 5: ..."), or one over the size limit.
absl::StatusOr<std::string> structured_output_grammar(std::string_view grammar,
                                                      std::string_view json_schema,
                                                      bool json_object);
// The same for a strata.v1.GenerateRequest's fields 16-18.
absl::StatusOr<std::string> structured_output_grammar(const v1::GenerateRequest& request);

// The GBNF for an OpenAI `response_format` object: {"type": "text"} -> "";
// {"type": "json_object"}; {"type": "json_schema", "json_schema": {"name":
// ..., "schema": {...}, "strict": ...}}. Errors are InvalidArgument naming
// the field ("response_format.type: 'xml' is not text, json_object or
// json_schema", "response_format.json_schema.schema: #/...: keyword
// 'pattern' is not supported"). Parse the request body with
// nlohmann::ordered_json to keep the schema's property order (a plain
// nlohmann::json sorts the keys, and the properties come in key order).
absl::StatusOr<std::string> response_format_grammar(const nlohmann::ordered_json& response_format);
absl::StatusOr<std::string> response_format_grammar(const nlohmann::json& response_format);

// OK for "" or a GBNF grammar that parses within kMaxGrammarBytes; else
// InvalidArgument "grammar: ...".
absl::Status check_grammar(std::string_view gbnf);

}  // namespace strata::coordinator
