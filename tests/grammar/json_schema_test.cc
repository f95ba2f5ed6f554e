// JSON Schema -> GBNF: what each keyword allows and refuses (checked with
// the matcher on JSON texts), and the errors for unsupported keywords.
#include <string>

#include "gtest/gtest.h"
#include "model/grammar/grammar.h"

namespace strata::grammar {
namespace {

class SchemaMatcher {
 public:
  explicit SchemaMatcher(std::string_view schema) {
    auto gbnf = json_schema_text_to_gbnf(schema);
    EXPECT_TRUE(gbnf.ok()) << gbnf.status();
    if (!gbnf.ok()) return;
    gbnf_ = *gbnf;
    auto g = parse_gbnf(*gbnf);
    EXPECT_TRUE(g.ok()) << g.status() << "\n" << *gbnf;
    if (g.ok()) grammar_ = *g;
  }
  bool accepts(const std::string& json) const {
    if (grammar_ == nullptr) return false;
    GrammarMatcher m(grammar_, TokenTable::build({}, {}));
    return m.accept_bytes(json) && m.complete();
  }
  const std::string& gbnf() const { return gbnf_; }

 private:
  std::string gbnf_;
  std::shared_ptr<const Grammar> grammar_;
};

std::string error_of(std::string_view schema) {
  auto g = json_schema_text_to_gbnf(schema);
  return g.ok() ? "ok" : std::string(g.status().message());
}

TEST(JsonSchema, ObjectPropertiesInOrderRequiredFirst) {
  SchemaMatcher m(R"({"type":"object","properties":{
      "b":{"type":"integer"},"a":{"type":"string"},"c":{"type":"boolean"}},
      "required":["a","c"]})");
  EXPECT_TRUE(m.accepts(R"({"a":"x","c":true})"));
  EXPECT_TRUE(m.accepts(R"({"a": "x", "c": false, "b": -12})"));
  EXPECT_TRUE(m.accepts("{\n  \"a\": \"x\",\n  \"c\": true\n}"));
  EXPECT_FALSE(m.accepts(R"({"c":true,"a":"x"})"));    // order
  EXPECT_FALSE(m.accepts(R"({"a":"x"})"));             // c required
  EXPECT_FALSE(m.accepts(R"({"a":"x","c":true,"d":1})"));  // no extras
  EXPECT_FALSE(m.accepts(R"({"a":1,"c":true})"));      // type
  EXPECT_FALSE(m.accepts(R"( {"a":"x","c":true})"));   // no leading space
}

TEST(JsonSchema, OptionalPropertiesWithoutRequired) {
  SchemaMatcher m(R"({"type":"object","properties":{"x":{"type":"null"},"y":{"type":"null"}}})");
  EXPECT_TRUE(m.accepts("{}"));
  EXPECT_TRUE(m.accepts(R"({"x":null})"));
  EXPECT_TRUE(m.accepts(R"({"y":null})"));
  EXPECT_TRUE(m.accepts(R"({"x":null,"y":null})"));
  EXPECT_FALSE(m.accepts(R"({,"y":null})"));
  EXPECT_FALSE(m.accepts(R"({"y":null,"x":null})"));
}

// Three optional properties: every subset, in order, and nothing else; and
// the grammar grows linearly with their number (it was quadratic: 6,000
// optional properties made a 467 MB grammar).
TEST(JsonSchema, OptionalPropertiesEverySubsetInOrderLinearSize) {
  SchemaMatcher m(R"({"type":"object","properties":{"a":{"type":"null"},"b":{"type":"null"},"c":{"type":"null"}}})");
  for (int mask = 0; mask < 8; ++mask) {
    std::string j = "{";
    for (int k = 0; k < 3; ++k) {
      if (mask & (1 << k)) {
        if (j.size() > 1) j += ",";
        j += std::string("\"") + static_cast<char>('a' + k) + "\":null";
      }
    }
    EXPECT_TRUE(m.accepts(j + "}")) << j;
  }
  EXPECT_FALSE(m.accepts(R"({"b":null,"a":null})"));
  EXPECT_FALSE(m.accepts(R"({"a":null,,"c":null})"));
  EXPECT_FALSE(m.accepts(R"({"a":null,})"));
  auto schema_of = [](int n) {
    std::string s = R"({"type":"object","properties":{)";
    for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::string("\"k") + std::to_string(i) + "\":{\"type\":\"integer\"}";
    return s + "}}";
  };
  auto g100 = json_schema_text_to_gbnf(schema_of(100));
  auto g1000 = json_schema_text_to_gbnf(schema_of(1000));
  ASSERT_TRUE(g100.ok() && g1000.ok());
  EXPECT_LT(g1000->size(), 15 * g100->size()) << g100->size() << " -> " << g1000->size();
}

TEST(JsonSchema, AdditionalProperties) {
  SchemaMatcher open(R"({"type":"object","properties":{"a":{"type":"integer"}},
                         "required":["a"],"additionalProperties":{"type":"string"}})");
  EXPECT_TRUE(open.accepts(R"({"a":1,"k":"v","z":""})"));
  EXPECT_FALSE(open.accepts(R"({"a":1,"k":2})"));
  SchemaMatcher any(R"({"type":"object"})");
  EXPECT_TRUE(any.accepts(R"({"k":[1,{"x":null}],"s":"\u00e9\n"})"));
}

TEST(JsonSchema, Strings) {
  SchemaMatcher m(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(m.accepts(R"("a")"));
  EXPECT_TRUE(m.accepts(R"("ab")"));
  EXPECT_TRUE(m.accepts(R"("a\"é")"));
  EXPECT_FALSE(m.accepts(R"("abcd")"));
  EXPECT_FALSE(m.accepts("\"a\nb\""));  // raw control character
  EXPECT_FALSE(m.accepts(R"("\ud800")"));  // a lone surrogate escape
  SchemaMatcher e(R"({"enum":["red","gr\"een",3,null]})");
  EXPECT_TRUE(e.accepts(R"("red")"));
  EXPECT_TRUE(e.accepts(R"("gr\"een")"));
  EXPECT_TRUE(e.accepts("3"));
  EXPECT_TRUE(e.accepts("null"));
  EXPECT_FALSE(e.accepts(R"("blue")"));
  SchemaMatcher c(R"({"const":{"k":[1,2]}})");
  EXPECT_TRUE(c.accepts(R"({"k":[1,2]})"));
  EXPECT_FALSE(c.accepts(R"({"k":[1,3]})"));
}

TEST(JsonSchema, NumbersBooleansNull) {
  SchemaMatcher i(R"({"type":"integer","minimum":0})");  // bounds: not enforced
  EXPECT_TRUE(i.accepts("0"));
  EXPECT_TRUE(i.accepts("-42"));
  EXPECT_FALSE(i.accepts("01"));
  EXPECT_FALSE(i.accepts("1.5"));
  SchemaMatcher n(R"({"type":"number"})");
  EXPECT_TRUE(n.accepts("-0.25e+10"));
  EXPECT_TRUE(n.accepts("3"));
  // Every number the grammar allows is a finite double: nlohmann (and so
  // the tool-call parser) refuses 1e400, Python reads it as inf.
  EXPECT_TRUE(n.accepts("9999999999999999.5e99"));
  EXPECT_TRUE(n.accepts("1E-99"));
  EXPECT_FALSE(n.accepts("1e400"));
  EXPECT_FALSE(n.accepts("1e100"));
  EXPECT_FALSE(n.accepts("10000000000000000"));  // 17 integer digits
  EXPECT_FALSE(n.accepts("3."));
  EXPECT_FALSE(n.accepts(".5"));
  SchemaMatcher b(R"({"type":["boolean","null"]})");
  EXPECT_TRUE(b.accepts("true"));
  EXPECT_TRUE(b.accepts("null"));
  EXPECT_FALSE(b.accepts("0"));
  SchemaMatcher nb(R"({"type":"integer","nullable":true})");
  EXPECT_TRUE(nb.accepts("null"));
  EXPECT_TRUE(nb.accepts("7"));
}

TEST(JsonSchema, Arrays) {
  SchemaMatcher m(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})");
  EXPECT_FALSE(m.accepts("[]"));
  EXPECT_TRUE(m.accepts("[1]"));
  EXPECT_TRUE(m.accepts("[1, 2,3]"));
  EXPECT_FALSE(m.accepts("[1,2,3,4]"));
  EXPECT_FALSE(m.accepts("[1,]"));
  SchemaMatcher any(R"({"type":"array"})");
  EXPECT_TRUE(any.accepts("[]"));
  EXPECT_TRUE(any.accepts(R"([1,"a",[null]])"));
}

TEST(JsonSchema, AnyOfOneOfAndRefs) {
  SchemaMatcher m(R"({"$defs":{"node":{"type":"object","properties":{
        "v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},
        "required":["v","next"]}},
      "oneOf":[{"$ref":"#/$defs/node"},{"type":"string","maxLength":1}]})");
  EXPECT_TRUE(m.accepts(R"({"v":1,"next":{"v":2,"next":null}})"));
  EXPECT_TRUE(m.accepts(R"("x")"));
  EXPECT_FALSE(m.accepts(R"({"v":1,"next":{"v":2}})"));
  SchemaMatcher d(R"({"definitions":{"a":{"type":"boolean"}},"$ref":"#/definitions/a"})");
  EXPECT_TRUE(d.accepts("false"));
}

TEST(JsonSchema, UnsupportedKeywordsNameKeywordAndPath) {
  EXPECT_EQ(error_of(R"({"type":"object","properties":{"a":{"type":"string","pattern":"x+"}}})"),
            "json_schema: #/properties/a: keyword 'pattern' is not supported");
  EXPECT_EQ(error_of(R"({"type":"string","format":"date"})"),
            "json_schema: #: keyword 'format' is not supported");
  EXPECT_EQ(error_of(R"({"type":"array","items":{"multipleOf":2}})"),
            "json_schema: #/items: keyword 'multipleOf' is not supported");
  EXPECT_EQ(error_of(R"({"$ref":"https://example.com/s.json"})"),
            "json_schema: #/$ref: 'https://example.com/s.json' is not a local #/$defs/ or "
            "#/definitions/ entry");
  EXPECT_EQ(error_of(R"({"type":"object","required":["z"],"properties":{}})"),
            "json_schema: #/required: 'z' is not in properties");
  EXPECT_EQ(error_of(R"({"type":"strin"})"), "json_schema: #/type: unknown type 'strin'");
  EXPECT_EQ(error_of(R"({"type":"string","maxLength":-1})"),
            "json_schema: #/maxLength: expected an integer in [0, 1000]");
  EXPECT_EQ(error_of("[1"), "json_schema: not valid JSON");
  EXPECT_EQ(error_of("3"), "json_schema: #: a schema must be an object or a boolean");
}

// A type list converts its subschemas once a type, so a small schema can
// ask for exponential work: 40 levels of {"type": ["array", "array"],
// "items": ...} (1.5 KB) are 2^40 conversions. They are bounded (65536
// conversions), and the refusal names where it stopped.
TEST(JsonSchema, ExponentialConversionsAreBounded) {
  std::string schema = "{}";
  for (int i = 0; i < 40; ++i) schema = R"({"type": ["array", "array"], "items": )" + schema + "}";
  absl::StatusOr<std::string> g = json_schema_text_to_gbnf(schema);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("more than 65536 subschemas to convert"), std::string::npos)
      << g.status();
  EXPECT_EQ(g.status().message().substr(0, 15), "json_schema: #/") << g.status();
  // 10 levels (1024 conversions) still convert.
  schema = "{}";
  for (int i = 0; i < 10; ++i) schema = R"({"type": ["array", "array"], "items": )" + schema + "}";
  EXPECT_TRUE(json_schema_text_to_gbnf(schema).ok());
  // Few conversions of a large value: bounded by the text they make (16
  // MiB), here 2^7 conversions of a 200 KB const.
  schema = R"({"const": ")" + std::string(200 * 1024, 'c') + R"("})";
  for (int i = 0; i < 7; ++i) schema = R"({"type": ["array", "array"], "items": )" + schema + "}";
  g = json_schema_text_to_gbnf(schema);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("made more than 16777216 bytes of grammar text"),
            std::string::npos)
      << g.status().message().substr(0, 300);
}

TEST(JsonSchema, JsonObjectGrammar) {
  auto g = parse_gbnf(json_object_gbnf());
  ASSERT_TRUE(g.ok()) << g.status();
  GrammarMatcher m(*g, TokenTable::build({}, {}));
  EXPECT_TRUE(m.accept_bytes(R"({"a": [1, 2.5e3, true, null, "s", {}]})"));
  EXPECT_TRUE(m.complete());
  GrammarMatcher arr(*g, TokenTable::build({}, {}));
  EXPECT_FALSE(arr.accept_bytes("[1]"));
}

}  // namespace
}  // namespace strata::grammar
