// The language, case by case, against jinja2: data/language_expected.json
// holds each case's template, context and jinja2's output or error
// (make_expected.py from data/language_cases.json); and the errors and
// limits that are ours (line numbers, hostile templates).
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "model/jinja/jinja.h"
#include "nlohmann/json.hpp"

namespace strata::jinja {
namespace {

using Json = nlohmann::ordered_json;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::string> render(std::string_view source, const Json& context = Json::object()) {
  auto t = Template::parse(source);
  if (!t.ok()) return t.status();
  return t->render(context, RenderOptions{1785059430});
}

TEST(Jinja, LanguageCasesMatchJinja2) {
  Json cases = Json::parse(read(std::string(STRATA_JINJA_DATA) + "/language_expected.json"));
  ASSERT_GT(cases.size(), 70u);
  for (const auto& c : cases) {
    std::string source = c["template"].get<std::string>();
    SCOPED_TRACE(source);
    auto got = render(source, c["context"]);
    if (c.contains("output")) {
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, c["output"].get<std::string>());
    } else if (c.contains("raise")) {
      ASSERT_FALSE(got.ok()) << *got;
      EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(got.status().message(), c["raise"].get<std::string>());
    } else {
      EXPECT_FALSE(got.ok()) << "jinja2: " << c["error"] << "; we rendered: " << *got;
    }
  }
}

TEST(Jinja, SyntaxErrorsNameTheLine) {
  auto bad = render("a\nb\n{% if x %}\n{{ (1 + }}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().substr(0, 7), "line 4:") << bad.status();
  auto unsupported = render("x\n{% include 'other.html' %}");
  ASSERT_FALSE(unsupported.ok());
  EXPECT_EQ(unsupported.status().message(), "line 2: unsupported statement 'include'");
  auto unclosed = render("{% for x in y %}\n{{ x }}");
  ASSERT_FALSE(unclosed.ok());
  EXPECT_NE(unclosed.status().message().find("endfor"), std::string::npos) << unclosed.status();
}

TEST(Jinja, RuntimeErrorsNameTheLine) {
  auto r = render("\n\n{{ x | no_such_filter }}", Json{{"x", 1}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "line 3: No filter named 'no_such_filter'.");
  auto u = render("{{ missing.attr }}");
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().message(), "line 1: 'missing' is undefined");
}

TEST(Jinja, RaiseExceptionIsFailedPreconditionWithTheMessage) {
  auto r = render("{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "Conversation roles must alternate user/assistant/user/assistant/...");
}

// Chains parsed in a loop nest the tree as deeply as parentheses do
// ("a.b.c" is ((a.b).c)): 100000 links of each kind are refused at parse
// time like 100000 parentheses, not evaluated and freed by recursion until
// the stack overflows; 200 links still render.
TEST(Jinja, LongLeftNestedChainsFailCleanly) {
  const std::pair<const char*, const char*> links[] = {
      {"x", ".a"},       {"x", "[0]"},          {"f", "()"},         {"x", " | string"},
      {"1", " + 1"},     {"1", " - 1"},         {"'a'", " ~ 'a'"},    {"1", " * 1"},
      {"2", " ** 1"},    {"x", " or x"},        {"x", " and x"},      {"x", " if x"},
  };  // ("x is defined is defined" is refused as Jinja does: no chain)
  for (const auto& [head, link] : links) {
    std::string chain = head;
    for (int k = 0; k < 100000; ++k) chain += link;
    auto r = render("{{ " + chain + " }}");
    ASSERT_FALSE(r.ok()) << link;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << link << ": " << r.status();
    EXPECT_NE(r.status().message().find("nested too deep"), std::string::npos)
        << link << ": " << r.status();
  }
  std::string joined = "'a'";
  for (int k = 0; k < 200; ++k) joined += " ~ 'a'";
  auto ok = render("{{ " + joined + " }}");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, std::string(201, 'a'));
}

TEST(Jinja, HostileTemplatesFailCleanly) {
  std::string deep(100000, '(');
  auto r = render("{{ " + deep + " }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  auto rec = render("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}");
  ASSERT_FALSE(rec.ok());
  EXPECT_EQ(rec.status().code(), absl::StatusCode::kResourceExhausted) << rec.status();
  auto big = render("{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ s }}{% endfor %}");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  // A namespace's attribute may not hold a namespace (or a list or dict
  // with one): a million of them chained were freed by recursion, and one
  // holding itself was never freed. Plain values, lists and dicts still go.
  for (const char* chain : {
           "{% set h = namespace(p=none) %}{% for i in range(1000) %}{% set n = namespace() %}"
           "{% set n.p = h.p %}{% set h.p = n %}{% endfor %}",
           "{% set ns = namespace() %}{% set ns.s = ns %}",
           "{% set ns = namespace() %}{% set ns.s = [1, {'a': ns}] %}"}) {
    auto held = render(chain);
    ASSERT_FALSE(held.ok()) << chain;
    EXPECT_NE(held.status().message().find("of a namespace to a namespace or a value holding one"),
              std::string::npos)
        << held.status();
  }
  auto plain = render(
      "{% set ns = namespace(n=0, items=[]) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}"
      "{% set ns.items = ns.items + [{'i': i}] %}{% endfor %}{{ ns.n }} {{ ns.items | length }}");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*plain, "3 3");
  // Filters and methods that build strings from a count or by replacing:
  // refused past the output limit (64 MiB) when asked for more, as they
  // build, not after a terabyte's allocation.
  for (const char* wide : {"{{ 'x' | center(1000000000000) }}",
                           "{{ 'a\nb' | indent(1000000000000) }}",
                           "{{ ('x\n' * 1000000) | indent(100) }}",
                           "{{ ('a' * 1000000).replace('a', 'b' * 100) }}",
                           "{{ ('a' * 1000000) | replace('', 'b' * 100) }}"}) {
    auto built = render(wide);
    ASSERT_FALSE(built.ok()) << wide;
    EXPECT_EQ(built.status().code(), absl::StatusCode::kResourceExhausted) << wide << ": " << built.status();
    EXPECT_NE(built.status().message().find("would make more than 67108864 bytes"), std::string::npos)
        << built.status();
  }
  auto fits = render("{{ 'x' | center(5) }}|{{ 'a\nb' | indent(2) }}|{{ 'aXa'.replace('a', 'bb') }}");
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(*fits, "  x  |a\n  b|bbXbb");
  // Repetition counts that overflow a 64-bit size, and empty units
  // repeated 10^18 times: refused, or nothing, at once.
  for (const char* huge : {"{{ 'aaaa' * 4611686018427387904 }}", "{{ [1, 2] * 9223372036854775807 }}"}) {
    auto wraps = render(huge);
    ASSERT_FALSE(wraps.ok()) << huge;
    EXPECT_EQ(wraps.status().code(), absl::StatusCode::kResourceExhausted) << wraps.status();
  }
  auto empty = render("{{ '' * 1000000000000000000 }}|{{ ([] * 1000000000000000000) | length }}|{{ 'ab' * 2 }}");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, "|0|abab");
  auto loops = render(
      "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}");
  ASSERT_FALSE(loops.ok());
  EXPECT_EQ(loops.status().code(), absl::StatusCode::kResourceExhausted) << loops.status();
  auto deep_value = render(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}");
  ASSERT_FALSE(deep_value.ok());
  EXPECT_EQ(deep_value.status().code(), absl::StatusCode::kResourceExhausted) << deep_value.status();
  // Deeper than Value::kMaxDepth (256). Built by moves: an initializer list
  // copies, and nlohmann's copy recurses (10,000 levels overflowed the
  // stack under ASan in the test itself).
  Json deep_context = Json::array();
  for (int k = 0; k < 1000; ++k) {
    Json outer = Json::array();
    outer.push_back(std::move(deep_context));
    deep_context = std::move(outer);
  }
  Json deep_holder = Json::object();
  deep_holder["x"] = std::move(deep_context);
  auto deep_input = render("{{ x }}", deep_holder);
  ASSERT_FALSE(deep_input.ok());
  EXPECT_EQ(deep_input.status().code(), absl::StatusCode::kInvalidArgument) << deep_input.status();
  auto quadratic = render(
      "{% set ns = namespace(s='') %}{% for i in range(100000) %}{% for j in range(10) %}"
      "{% set ns.s = ns.s ~ 'x' %}{% endfor %}{% endfor %}{{ ns.s|length }}");
  ASSERT_FALSE(quadratic.ok());
  EXPECT_EQ(quadratic.status().code(), absl::StatusCode::kResourceExhausted) << quadratic.status();
  std::string blocks;
  for (int k = 0; k < 10000; ++k) blocks += "{% if true %}";
  auto nested = render(blocks);
  ASSERT_FALSE(nested.ok());
  EXPECT_EQ(nested.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* junk : {"{{", "{%", "{#", "{{ 'abc }}", "{% for %}", "{% set %}", "{{ a[ }}", "{{ } }}",
                           "{% endif %}", "{{ 1 if }}", "{% macro %}", "{{ a.  }}", "{{ \"\\", "{%- -%}"}) {
    auto j = render(junk);
    EXPECT_FALSE(j.ok()) << junk;
  }
}


// Integers are 64-bit here (Python's are unbounded): a conversion or an
// abs() past int64 fails naming its line, never wraps (a float cast out of
// range, found by jinja_template_fuzz). jinja2 gives these as big ints:
// 699999999999999957624242044928, 10**300-ish, 9223372036854775808, and
// '[Undefined]' for the index past any list.
TEST(Jinja, IntegersPastInt64FailCleanly) {
  for (const char* big : {"{{ '7e29' | int }}", "{{ 1e300 | int }}", "{{ -1e19 | int }}",
                          "{{ ['777777777777777777777777777773'] | map('int') | list }}",
                          "{{ (-9223372036854775807 - 1) | abs }}"}) {
    auto r = render(big);
    ASSERT_FALSE(r.ok()) << big;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << big;
    EXPECT_EQ(r.status().message().rfind("line 1: ", 0), 0u) << r.status();
  }
  auto in_range = render(
      "{{ '9e18' | int }}|{{ -9.2e18 | int }}|{{ '-9223372036854775808' | int }}|{{ 2.9 | int }}|"
      "{{ -2.9 | int }}|{{ (-9223372036854775807) | abs }}|{{ 'x' | int(5) }}|"
      "{{ [[1, 2]] | map(attribute='1') | list }}|{{ [[1]] | map(attribute='99999999999999999999') | list }}");
  ASSERT_TRUE(in_range.ok()) << in_range.status();
  EXPECT_EQ(*in_range,
            "9000000000000000000|-9200000000000000000|-9223372036854775808|2|-2|9223372036854775807|5|[2]|"
            "[Undefined]");
}
TEST(Jinja, NlohmannJsonContextRenders) {
  auto t = Template::parse("{{ messages[0].content }}|{{ add_generation_prompt }}");
  ASSERT_TRUE(t.ok());
  nlohmann::json ctx = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"add_generation_prompt", true}};
  auto r = t->render(ctx);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "hi|True");
}

}  // namespace
}  // namespace strata::jinja
