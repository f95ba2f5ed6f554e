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

// OK for "" or a GBNF grammar that parses within kMaxGrammarBytes; else
// InvalidArgument "grammar: ...".
absl::Status check_grammar(std::string_view gbnf);

}  // namespace strata::coordinator
