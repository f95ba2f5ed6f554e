#include "coordinator/structured_output.h"

#include "absl/strings/str_cat.h"
#include "model/grammar/grammar.h"

namespace strata::coordinator {

absl::Status check_grammar(std::string_view gbnf) {
  if (gbnf.empty()) return absl::OkStatus();
  if (gbnf.size() > kMaxGrammarBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: ", gbnf.size(), " bytes exceed ", kMaxGrammarBytes));
  }
  auto g = grammar::parse_gbnf(gbnf);
  if (!g.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("grammar: ", g.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> structured_output_grammar(std::string_view gbnf,
                                                      std::string_view json_schema,
                                                      bool json_object) {
  const int given = (gbnf.empty() ? 0 : 1) + (json_schema.empty() ? 0 : 1) + (json_object ? 1 : 0);
  if (given > 1) {
    return absl::InvalidArgumentError(
        "grammar, json_schema, json_object: give at most one of them");
  }
  std::string out;
  if (!gbnf.empty()) {
    out = std::string(gbnf);
  } else if (!json_schema.empty()) {
    if (json_schema.size() > kMaxJsonSchemaBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "json_schema: ", json_schema.size(), " bytes exceed ", kMaxJsonSchemaBytes));
    }
    absl::StatusOr<std::string> g = grammar::json_schema_text_to_gbnf(json_schema);
    if (!g.ok()) return g.status();  // "json_schema: ..."
    out = *std::move(g);
  } else if (json_object) {
    out = grammar::json_object_gbnf();
  }
  if (gbnf.empty() && out.size() > kMaxGrammarBytes) {
    // A schema too large for a grammar is the request's to shrink.
    return absl::InvalidArgumentError(absl::StrCat(
        json_object ? "json_object" : "json_schema", ": the grammar it needs is ", out.size(),
        " bytes, over the limit of ", kMaxGrammarBytes));
  }
  if (absl::Status st = check_grammar(out); !st.ok()) {
    if (!gbnf.empty()) return st;  // the client's own grammar: "grammar: ..."
    // A generated grammar that does not parse is our bug, not the client's.
    return absl::InternalError(absl::StrCat("the grammar made for the request: ", st.message()));
  }
  return out;
}

absl::StatusOr<std::string> response_format_grammar(const nlohmann::ordered_json& rf) {
  auto bad = [](absl::string_view field, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("response_format", field, ": ", what));
  };
  if (!rf.is_object()) return bad("", "expected an object");
  auto type = rf.find("type");
  if (type == rf.end() || !type->is_string()) return bad(".type", "expected a string");
  const std::string t = type->get<std::string>();
  if (t == "text") return std::string();
  if (t == "json_object") return grammar::json_object_gbnf();
  if (t != "json_schema") {
    return bad(".type", absl::StrCat("'", t, "' is not text, json_object or json_schema"));
  }
  auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object()) return bad(".json_schema", "expected an object");
  auto schema = js->find("schema");
  if (schema == js->end()) return bad(".json_schema.schema", "absent");
  const std::string text = schema->dump();
  if (text.size() > kMaxJsonSchemaBytes) {
    return bad(".json_schema.schema",
               absl::StrCat(text.size(), " bytes exceed ", kMaxJsonSchemaBytes));
  }
  absl::StatusOr<std::string> g = grammar::json_schema_text_to_gbnf(text);
  if (!g.ok()) {
    // "json_schema: #/...: what" -> "response_format.json_schema.schema: #/...: what"
    absl::string_view m = g.status().message();
    constexpr absl::string_view kPrefix = "json_schema: ";
    if (m.substr(0, kPrefix.size()) == kPrefix) m.remove_prefix(kPrefix.size());
    return bad(".json_schema.schema", m);
  }
  return g;
}

absl::StatusOr<std::string> response_format_grammar(const nlohmann::json& rf) {
  return response_format_grammar(nlohmann::ordered_json::parse(rf.dump()));
}

absl::StatusOr<std::string> structured_output_grammar(const v1::GenerateRequest& r) {
  return structured_output_grammar(r.grammar(), r.json_schema(), r.json_object());
}

}  // namespace strata::coordinator
