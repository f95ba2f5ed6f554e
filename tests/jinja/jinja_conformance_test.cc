// Every chat template in data/templates/ over every conversation in
// data/conversations/, byte-equal to Python jinja2's rendering in
// data/expected/ (make_expected.py): the same text, or raise_exception's
// same message, or an error where jinja2 failed too.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/jinja/jinja.h"
#include "nlohmann/json.hpp"

namespace strata::jinja {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr std::time_t kNow = 1785059430;  // make_expected.py's NOW

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> template_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fs::path(STRATA_JINJA_DATA) / "templates")) {
    if (e.path().extension() == ".jinja") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// What make_expected.py passes to the template.
Json context_of(const Json& conv) {
  Json c = Json::object();
  c["messages"] = conv["messages"];
  c["tools"] = conv.contains("tools") ? conv["tools"] : Json();
  c["documents"] = conv.contains("documents") ? conv["documents"] : Json();
  c["add_generation_prompt"] = conv.value("add_generation_prompt", true);
  c["bos_token"] = "<s>";
  c["eos_token"] = "</s>";
  if (conv.contains("kwargs")) {
    for (const auto& [k, v] : conv["kwargs"].items()) c[k] = v;
  }
  return c;
}

class Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Conformance, ByteEqualToJinja2OnEveryConversation) {
  const fs::path data(STRATA_JINJA_DATA);
  const std::string name = GetParam();
  auto parsed = Template::parse(read(data / "templates" / (name + ".jinja")));
  Json expected = Json::parse(read(data / "expected" / (name + ".json")));
  int equal = 0;
  for (const auto& [conv_name, want] : expected.items()) {
    SCOPED_TRACE(name + " x " + conv_name);
    if (!parsed.ok()) {
      EXPECT_TRUE(want.contains("error")) << parsed.status();
      continue;
    }
    Json conv = Json::parse(read(data / "conversations" / (conv_name + ".json")));
    auto got = parsed->render(context_of(conv), RenderOptions{kNow});
    if (want.contains("output")) {
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, want["output"].get<std::string>());
      equal += got.ok() && *got == want["output"].get<std::string>();
    } else if (want.contains("raise")) {
      ASSERT_FALSE(got.ok()) << "rendered:\n" << *got;
      EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition) << got.status();
      EXPECT_EQ(got.status().message(), want["raise"].get<std::string>());
    } else {
      EXPECT_FALSE(got.ok()) << "jinja2 failed with " << want["error"] << " but we rendered:\n" << *got;
      if (!got.ok()) {
        EXPECT_NE(got.status().code(), absl::StatusCode::kFailedPrecondition) << got.status();
      }
    }
  }
  (void)equal;
}

// The corpus reaches every template: each renders at least one conversation
// (not only errors), and all together the pairs number what make_expected.py
// wrote.
TEST(ConformanceCorpus, EveryTemplateRendersSomeConversation) {
  const fs::path data(STRATA_JINJA_DATA);
  const std::vector<std::string> names = template_names();
  EXPECT_EQ(names.size(), 49u);
  size_t outputs = 0, pairs = 0;
  for (const auto& name : names) {
    Json expected = Json::parse(read(data / "expected" / (name + ".json")));
    size_t n = 0;
    for (const auto& [conv, want] : expected.items()) n += want.contains("output");
    EXPECT_GT(n, 0u) << name;
    outputs += n;
    pairs += expected.size();
  }
  EXPECT_GE(pairs, 49u * 25u);
  EXPECT_GE(outputs, 900u);
}

// Templates with bytes deleted, duplicated or replaced by Jinja's own
// punctuation parse or fail cleanly, and render or fail cleanly: never a
// crash, a hang or an exception.
TEST(ConformanceCorpus, MutatedTemplatesFailCleanly) {
  const fs::path data(STRATA_JINJA_DATA);
  Json conv = Json::parse(read(data / "conversations" / "tools_call_dict.json"));
  const Json context = context_of(conv);
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  auto next = [&seed]() {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
  };
  const std::string punct = "{}%#-+()[]|.,:'\"~=<>!*/ \n";
  int rendered = 0;
  for (const auto& name : template_names()) {
    const std::string source = read(data / "templates" / (name + ".jinja"));
    for (int k = 0; k < 200; ++k) {
      std::string t = source;
      for (int m = 0; m < 3 && !t.empty(); ++m) {
        size_t at = next() % t.size();
        switch (next() % 3) {
          case 0: t.erase(at, 1 + next() % 8); break;
          case 1: t.insert(at, t.substr(at, 1 + next() % 16)); break;
          default: t[at] = punct[next() % punct.size()];
        }
      }
      auto parsed = Template::parse(t);
      if (!parsed.ok()) {
        EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
        continue;
      }
      auto out = parsed->render(context, RenderOptions{kNow});
      rendered += out.ok();
    }
  }
  EXPECT_GT(rendered, 0);
}

INSTANTIATE_TEST_SUITE_P(Templates, Conformance, ::testing::ValuesIn(template_names()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string n = param.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace strata::jinja
