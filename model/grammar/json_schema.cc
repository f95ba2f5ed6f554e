// JSON Schema -> GBNF. The subset, and what the grammar makes of it:
//   type: object | array | string | number | integer | boolean | null, or an
//     array of them (alternatives); nullable: true adds null (OpenAPI).
//   object: properties in the order given, required ones first (each in
//     the order of `properties`), then the optional ones, each optional in
//     that order; additionalProperties false or absent (with properties:
//     like OpenAI's strict mode) allows no other key; true or a schema
//     allows further "key": value pairs after the known ones (keys are any
//     string). An object with neither properties nor additionalProperties
//     is any JSON object. required names a property not in properties:
//     error.
//   array: items (a schema), minItems, maxItems.
//   string: minLength, maxLength (code points; an escape is one), enum,
//     const. pattern and format are refused (no regex compiler yet).
//   number / integer: any value with at most 16 integer and 16 fraction
//     digits and a 2-digit exponent (so a generation always ends, and the
//     value, below 1e115, is a finite double: JSON parsers refuse 1e400 or
//     read it as infinity);
//     minimum / maximum / exclusiveMinimum / exclusiveMaximum are ACCEPTED
//     BUT NOT ENFORCED. multipleOf is refused.
//   enum, const: any JSON values, written compactly.
//   anyOf, oneOf: alternatives (oneOf is not made exclusive); allOf of one
//     schema.
//   $ref: "#/$defs/NAME" or "#/definitions/NAME" (local only; recursion is
//     fine).
//   Annotations (title, description, default, examples, $schema, $id,
//   $comment, deprecated, readOnly, writeOnly) are ignored. Any other
//   keyword: InvalidArgument naming it and its path.
// Whitespace: none before the value; after each token at most one space,
// or a newline and up to 20 spaces or tabs (a bounded run, so a sampler
// cannot loop on whitespace forever).
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/grammar/grammar.h"

namespace strata::grammar {
namespace {

using json = nlohmann::ordered_json;

constexpr char kPrimitives[] = R"(ws ::= | " " | "\n" [ \t]{0,20}
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))
string ::= "\"" char* "\"" ws
int-part ::= "-"? ([0-9] | [1-9] [0-9]{1,15})
integer ::= int-part ws
number ::= int-part ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? ws
boolean ::= ("true" | "false") ws
null ::= "null" ws
value ::= object | array | string | number | boolean | null
object ::= "{" ws (string ":" ws value ("," ws string ":" ws value)*)? "}" ws
array ::= "[" ws (value ("," ws value)*)? "]" ws
)";

// A GBNF literal for `bytes`.
std::string literal(std::string_view bytes) {
  std::string out = "\"";
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      static const char kHex[] = "0123456789ABCDEF";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {}

  absl::StatusOr<std::string> run() {
    absl::StatusOr<std::string> body = visit(root_, "#");
    if (!body.ok()) return body.status();
    std::string out = absl::StrCat("root ::= ", *body, "\n");
    for (const auto& [name, rule] : rules_) absl::StrAppend(&out, name, " ::= ", rule, "\n");
    return out + kPrimitives;
  }

 private:
  absl::Status bad(const std::string& path, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: ", path, ": ", what));
  }

  // A fresh rule name from a hint.
  std::string name_for(std::string_view hint) {
    std::string n = "s-";
    for (char c : hint) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
      n += ok ? c : '-';
      if (n.size() > 40) break;
    }
    return absl::StrCat(n, "-", next_++);
  }
  std::string add_rule(std::string_view hint, std::string body) {
    if (auto it = by_body_.find(body); it != by_body_.end()) return it->second;
    std::string name = name_for(hint);
    by_body_[body] = name;
    rules_[name] = std::move(body);
    return name;
  }

  // A JSON value written compactly, as a GBNF literal.
  std::string value_literal(const json& v) {
    return absl::StrCat(literal(v.dump(-1, ' ', false, json::error_handler_t::replace)), " ws");
  }

  // A subschema's GBNF. A subschema may be converted more than once (a type
  // list converts its items once a type, "nullable" its schema again), so
  // a small schema can ask for exponential work ({"type": ["array",
  // "array"], "items": ...} 40 deep: 2^40 conversions): the conversions
  // and the text they make are bounded, far above what a schema whose
  // grammar fits the request limits needs.
  absl::StatusOr<std::string> visit(const json& s, const std::string& path) {
    if (++depth_ > 64) return bad(path, "schema nested too deep");
    if (++visits_ > kMaxVisits) {
      return bad(path, absl::StrCat("more than ", kMaxVisits,
                                    " subschemas to convert (each type of a type list "
                                    "converts its subschemas again)"));
    }
    absl::StatusOr<std::string> r = visit_inner(s, path);
    --depth_;
    if (r.ok() && (made_ += r->size()) > kMaxMadeBytes) {
      return bad(path, absl::StrCat("the conversion made more than ", kMaxMadeBytes,
                                    " bytes of grammar text"));
    }
    return r;
  }

  absl::StatusOr<std::string> visit_inner(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) return bad(path, "schema false allows nothing");
      return std::string("value");
    }
    if (!s.is_object()) return bad(path, "a schema must be an object or a boolean");
    static const std::set<std::string> kIgnored = {
        "title", "description", "default", "examples", "$schema", "$id",
        "$comment", "deprecated", "readOnly", "writeOnly",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "$defs",
        "definitions"};
    static const std::set<std::string> kKnown = {
        "type", "properties", "required", "additionalProperties", "items",
        "minItems", "maxItems", "minLength", "maxLength", "enum", "const",
        "anyOf", "oneOf", "allOf", "$ref", "nullable"};
    for (const auto& [k, v] : s.items()) {
      if (!kKnown.count(k) && !kIgnored.count(k)) {
        return bad(path, absl::StrCat("keyword '", k, "' is not supported"));
      }
    }
    if (s.contains("nullable")) {
      if (!s["nullable"].is_boolean()) return bad(path + "/nullable", "expected a boolean");
      if (s["nullable"].get<bool>()) {
        json inner = s;
        inner.erase("nullable");
        absl::StatusOr<std::string> b = visit(inner, path);
        if (!b.ok()) return b.status();
        return absl::StrCat("(", *b, " | null)");
      }
    }
    if (s.contains("$ref")) {
      if (s.size() > 1) {
        for (const auto& [k, v] : s.items()) {
          if (k != "$ref" && !kIgnored.count(k)) {
            return bad(path, absl::StrCat("keyword '", k, "' beside $ref is not supported"));
          }
        }
      }
      return ref(s["$ref"], path + "/$ref");
    }
    if (s.contains("const")) return value_literal(s["const"]);
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) return bad(path + "/enum", "expected a non-empty array");
      std::string out = "(";
      for (size_t i = 0; i < e.size(); ++i) {
        absl::StrAppend(&out, i ? " | " : "", value_literal(e[i]));
      }
      return out + ")";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& alts = s[key];
      const std::string p = absl::StrCat(path, "/", key);
      if (!alts.is_array() || alts.empty()) return bad(p, "expected a non-empty array");
      std::string out = "(";
      for (size_t i = 0; i < alts.size(); ++i) {
        absl::StatusOr<std::string> b = visit(alts[i], absl::StrCat(p, "/", i));
        if (!b.ok()) return b.status();
        absl::StrAppend(&out, i ? " | " : "", *b);
      }
      return out + ")";
    }
    if (s.contains("allOf")) {
      const json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) {
        return bad(path + "/allOf", "only an allOf of one schema is supported");
      }
      return visit(all[0], path + "/allOf/0");
    }
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) return typed(s, t.get<std::string>(), path);
      if (t.is_array() && !t.empty()) {
        std::string out = "(";
        for (size_t i = 0; i < t.size(); ++i) {
          if (!t[i].is_string()) return bad(absl::StrCat(path, "/type/", i), "expected a string");
          absl::StatusOr<std::string> b = typed(s, t[i].get<std::string>(), path);
          if (!b.ok()) return b.status();
          absl::StrAppend(&out, i ? " | " : "", *b);
        }
        return out + ")";
      }
      return bad(path + "/type", "expected a type name or an array of them");
    }
    // No type: infer from the keywords present.
    if (s.contains("properties") || s.contains("additionalProperties")) return typed(s, "object", path);
    if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) return typed(s, "array", path);
    if (s.contains("minLength") || s.contains("maxLength")) return typed(s, "string", path);
    return std::string("value");
  }

  absl::StatusOr<int64_t> count(const json& s, const char* key, const std::string& path,
                                int64_t dflt) {
    if (!s.contains(key)) return dflt;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000) {
      return bad(absl::StrCat(path, "/", key), "expected an integer in [0, 1000]");
    }
    return v.get<int64_t>();
  }

  absl::StatusOr<std::string> typed(const json& s, const std::string& type,
                                    const std::string& path) {
    if (type == "boolean" || type == "null" || type == "integer" || type == "number") {
      return type;
    }
    if (type == "string") {
      absl::StatusOr<int64_t> lo = count(s, "minLength", path, 0);
      if (!lo.ok()) return lo.status();
      absl::StatusOr<int64_t> hi = count(s, "maxLength", path, -1);
      if (!hi.ok()) return hi.status();
      if (*lo == 0 && *hi < 0) return std::string("string");
      if (*hi >= 0 && *hi < *lo) return bad(path + "/maxLength", "below minLength");
      return absl::StrCat("\"\\\"\" char{", *lo, ",", *hi >= 0 ? absl::StrCat(*hi) : "",
                          "} \"\\\"\" ws");
    }
    if (type == "array") {
      absl::StatusOr<int64_t> lo = count(s, "minItems", path, 0);
      if (!lo.ok()) return lo.status();
      absl::StatusOr<int64_t> hi = count(s, "maxItems", path, -1);
      if (!hi.ok()) return hi.status();
      if (*hi >= 0 && *hi < *lo) return bad(path + "/maxItems", "below minItems");
      std::string item = "value";
      if (s.contains("items")) {
        if (s["items"].is_array()) return bad(path + "/items", "an array of schemas (tuple) is not supported");
        absl::StatusOr<std::string> b = visit(s["items"], path + "/items");
        if (!b.ok()) return b.status();
        item = add_rule(path + "-item", *b);
      }
      if (*hi == 0) return std::string("\"[\" ws \"]\" ws");
      const std::string more = absl::StrCat(
          "(\",\" ws ", item, "){", *lo > 0 ? *lo - 1 : 0, ",",
          *hi >= 0 ? absl::StrCat(*hi - 1) : "", "}");
      std::string list = absl::StrCat(item, " ", more);
      if (*lo == 0) list = absl::StrCat("(", list, ")?");
      return absl::StrCat("\"[\" ws ", list, " \"]\" ws");
    }
    if (type == "object") return object(s, path);
    return bad(path + "/type", absl::StrCat("unknown type '", type, "'"));
  }

  absl::StatusOr<std::string> object(const json& s, const std::string& path) {
    const json* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props != nullptr && !props->is_object()) return bad(path + "/properties", "expected an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      const json& r = s["required"];
      if (!r.is_array()) return bad(path + "/required", "expected an array of names");
      for (const json& n : r) {
        if (!n.is_string()) return bad(path + "/required", "expected an array of names");
        if (props == nullptr || !props->contains(n.get<std::string>())) {
          return bad(path + "/required",
                     absl::StrCat("'", n.get<std::string>(), "' is not in properties"));
        }
        required.insert(n.get<std::string>());
      }
    }
    std::string extra;  // "" = no additional properties
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) {
        absl::StatusOr<std::string> b = visit(a, path + "/additionalProperties");
        if (!b.ok()) return b.status();
        extra = add_rule(path + "-extra", *b);
      }
    } else if (props == nullptr) {
      return std::string("object");
    }
    // "key": value pairs in order; props as written (nlohmann keeps the
    // input order only with ordered_json, so the caller parses with it).
    std::vector<std::string> req, opt;
    if (props != nullptr) {
      for (const auto& [k, v] : props->items()) {
        absl::StatusOr<std::string> b =
            visit(v, absl::StrCat(path, "/properties/", pointer_token(k)));
        if (!b.ok()) return b.status();
        const std::string key = literal(json(k).dump(-1, ' ', false, json::error_handler_t::replace));
        std::string kv = add_rule(absl::StrCat(k, "-kv"),
                                  absl::StrCat(key, " ws \":\" ws ", *b));
        (required.count(k) ? req : opt).push_back(std::move(kv));
      }
    }
    if (!extra.empty()) {
      opt.push_back(add_rule("additional-kv",
                             absl::StrCat("string \":\" ws ", extra, " (\",\" ws string \":\" ws ",
                                          extra, ")*")));
    }
    std::string body = "\"{\" ws ";
    for (size_t i = 0; i < req.size(); ++i) {
      absl::StrAppend(&body, i ? "\",\" ws " : "", req[i], " ");
    }
    if (!req.empty()) {
      for (const std::string& o : opt) absl::StrAppend(&body, "(\",\" ws ", o, ")? ");
    } else if (!opt.empty()) {
      // The first optional one present has no comma before it.
      // tail[j]: the optional ones from j on, each maybe present after a
      // comma; a rule each, so the grammar grows linearly with the
      // properties (spelling every tail out was quadratic: 6,000 optional
      // properties made a 467 MB grammar).
      std::vector<std::string> tail(opt.size() + 1);
      for (size_t j = opt.size(); j-- > 1;) {
        tail[j] = add_rule(path + "-tail",
                           absl::StrCat("(\",\" ws ", opt[j], ")?",
                                        tail[j + 1].empty() ? "" : " ", tail[j + 1]));
      }
      std::string alts;
      for (size_t i = 0; i < opt.size(); ++i) {
        absl::StrAppend(&alts, i ? " | " : "", opt[i], tail[i + 1].empty() ? "" : " ",
                        tail[i + 1]);
      }
      absl::StrAppend(&body, "(", alts, ")? ");
    }
    return body + "\"}\" ws";
  }

  absl::StatusOr<std::string> ref(const json& r, const std::string& path) {
    if (!r.is_string()) return bad(path, "expected a string");
    const std::string target = r.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    std::string section, name;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (target.rfind(prefix, 0) == 0) {
        section = std::string(prefix).substr(2, std::string(prefix).size() - 3);
        name = target.substr(std::string(prefix).size());
      }
    }
    if (section.empty() || !root_.is_object() || !root_.contains(section) ||
        !root_[section].is_object() || !root_[section].contains(name)) {
      return bad(path, absl::StrCat("'", target, "' is not a local #/$defs/ or #/definitions/ entry"));
    }
    // Name the rule first, so a recursive reference finds it.
    const std::string rule = name_for(name);
    refs_[target] = rule;
    absl::StatusOr<std::string> b = visit(root_[section][name], target);
    if (!b.ok()) return b.status();
    rules_[rule] = *b;
    return rule;
  }

  const json& root_;
  std::map<std::string, std::string> rules_;    // name -> body
  std::map<std::string, std::string> by_body_;  // body -> name
  std::map<std::string, std::string> refs_;     // $ref -> rule
  int next_ = 0;
  int depth_ = 0;
  static constexpr int kMaxVisits = 1 << 16;
  static constexpr size_t kMaxMadeBytes = size_t{16} << 20;
  int visits_ = 0;      // subschemas converted
  size_t made_ = 0;     // bytes of the conversions' results, in all
};

}  // namespace

absl::StatusOr<std::string> json_schema_to_gbnf(const nlohmann::json& schema) {
  const json ordered = json::parse(schema.dump());
  Converter c(ordered);
  return c.run();
}

absl::StatusOr<std::string> json_schema_text_to_gbnf(std::string_view schema_text) {
  json schema = json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) {
    return absl::InvalidArgumentError("json_schema: not valid JSON");
  }
  Converter c(schema);
  return c.run();
}

std::string json_object_gbnf() {
  return absl::StrCat("root ::= object\n", kPrimitives);
}

}  // namespace strata::grammar
