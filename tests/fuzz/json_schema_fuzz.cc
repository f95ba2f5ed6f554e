// libFuzzer target: JSON Schema -> GBNF (model/grammar/json_schema.cc) on a
// hostile schema, as a request's response_format json_schema or a tool's
// parameters bring it, and the matcher on the grammar it makes.
//
// Input: the schema's JSON text, a NUL byte, then a candidate JSON text (no
// NUL: no candidate).
//
// Asserted, beyond no crash and no sanitizer report:
//   - a refusal is InvalidArgument;
//   - a grammar made is at most 16 MiB and parses (parse_gbnf): the
//     converter never writes GBNF its own parser refuses;
//   - what the grammar accepts is JSON: a candidate the matcher takes
//     whole (accept_bytes and complete) parses as JSON, and when the
//     schema's only constraint on the top level is a single `type`, the
//     value has that type.
// Seeds: corpus/json_schema/ (make_fuzz_seeds).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "model/grammar/grammar.h"
#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_util.h"

namespace {

using strata::fuzz::check;

// Whether `value` has JSON Schema type `type` (integer: a number with no
// fraction, as the grammar writes it).
bool has_type(const nlohmann::json& value, const std::string& type) {
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  if (type == "number") return value.is_number();
  if (type == "integer") return value.is_number_integer();
  return true;  // not a type the converter takes (it refused the schema)
}

// The top-level `type` when it is the schema's only constraint there (no
// composition, enum, const, nullable or $ref that widens or replaces it).
const nlohmann::json* sole_type(const nlohmann::json& schema) {
  if (!schema.is_object()) return nullptr;
  const auto type = schema.find("type");
  if (type == schema.end() || !type->is_string()) return nullptr;
  for (const char* k : {"anyOf", "oneOf", "allOf", "enum", "const", "nullable", "$ref"}) {
    if (schema.contains(k)) return nullptr;
  }
  return &*type;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view schema_text = input.substr(0, nul);
  const bool has_candidate = nul != std::string_view::npos;
  const std::string_view candidate = has_candidate ? input.substr(nul + 1) : std::string_view();

  auto gbnf = strata::grammar::json_schema_text_to_gbnf(schema_text);
  if (!gbnf.ok()) {
    check(gbnf.status().code() == absl::StatusCode::kInvalidArgument, "a refusal is InvalidArgument");
    strata::fuzz::note("schema: " + std::string(gbnf.status().message()));
    return 0;
  }
  check(gbnf->size() <= (16u << 20), "a grammar made is at most 16 MiB");
  auto grammar = strata::grammar::parse_gbnf(*gbnf);
  if (!grammar.ok()) {
    std::fprintf(stderr, "%s\n--- the grammar:\n%.4000s\n", std::string(grammar.status().message()).c_str(),
                 gbnf->c_str());
  }
  check(grammar.ok(), "the grammar made parses");
  if (!has_candidate) {
    strata::fuzz::note("grammar of " + std::to_string(gbnf->size()) + " bytes");
    return 0;
  }
  strata::grammar::GrammarMatcher m(*grammar, strata::grammar::TokenTable::build({}, {}));
  if (!m.accept_bytes(candidate) || !m.complete()) {
    strata::fuzz::note("candidate refused");
    return 0;
  }
  const auto value = nlohmann::json::parse(candidate, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    std::fprintf(stderr, "accepted: %.*s\n", static_cast<int>(candidate.size()), candidate.data());
  }
  check(!value.is_discarded(), "what the grammar accepts is JSON");
  const auto schema = nlohmann::json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (const nlohmann::json* type = sole_type(schema)) {
    check(has_type(value, type->get<std::string>()), "the value has the schema's type");
  }
  strata::fuzz::note("candidate accepted");
  return 0;
}
