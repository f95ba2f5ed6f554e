// The tool-call parser (model/chat_template/tool_calls.h): the calls the shared
// chat templates render (data/rendered.json from make_rendered.py), the same
// text streamed a byte at a time and at random points, content around calls,
// several calls, reasoning, malformed and hostile output, format detection and
// the tool_choice grammar.
#include "model/chat_template/tool_calls.h"
#include "model/grammar/grammar.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::chat_template {
namespace {

using json = nlohmann::json;

struct Result {
  std::string content;
  std::string reasoning;
  std::vector<ToolCallDelta> calls;
  json tool_calls;
};

bool valid_utf8(std::string_view s) {
  try {
    (void)json(std::string(s)).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

// Pushes the pieces, then finishes; checks the stream's invariants on the way.
Result run(ToolCallFormat format, const std::vector<std::string>& pieces, ToolCallParser::Options options = {},
           bool check_utf8 = true) {
  options.id_seed = 7;
  ToolCallParser parser(format, options);
  Result r;
  auto take = [&](ToolCallParser::Delta d) {
    if (check_utf8) {
      EXPECT_TRUE(valid_utf8(d.content)) << "a content delta splits a character";
      EXPECT_TRUE(valid_utf8(d.reasoning_content)) << "a reasoning delta splits a character";
    }
    r.content += d.content;
    r.reasoning += d.reasoning_content;
    for (auto& c : d.tool_calls) {
      EXPECT_EQ(c.index, static_cast<int>(r.calls.size()));
      r.calls.push_back(std::move(c));
    }
  };
  for (const auto& p : pieces) take(parser.push(p));
  take(parser.finish());
  r.tool_calls = parser.tool_calls();
  EXPECT_EQ(r.tool_calls.size(), r.calls.size());
  EXPECT_EQ(parser.has_tool_calls(), !r.calls.empty());
  return r;
}

Result run_whole(ToolCallFormat format, const std::string& text, ToolCallParser::Options options = {}) {
  return run(format, {text}, std::move(options));
}

std::vector<std::string> bytes_of(const std::string& text) {
  std::vector<std::string> v;
  for (char c : text) v.emplace_back(1, c);
  return v;
}

std::vector<std::string> random_split(const std::string& text, std::mt19937& rng) {
  std::vector<std::string> v;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t n = 1 + rng() % 12;
    v.push_back(text.substr(i, n));
    i += n;
  }
  return v;
}

void expect_same(const Result& a, const Result& b, const std::string& what) {
  EXPECT_EQ(a.content, b.content) << what;
  EXPECT_EQ(a.reasoning, b.reasoning) << what;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << what;
  for (std::size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << what;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << what;
    EXPECT_EQ(a.calls[i].id, b.calls[i].id) << what;
  }
}

ToolCallFormat format_named(const std::string& name) {
  for (auto f : {ToolCallFormat::kNone, ToolCallFormat::kLlama3Json, ToolCallFormat::kHermes,
                 ToolCallFormat::kQwen3Coder, ToolCallFormat::kGlm, ToolCallFormat::kMistral, ToolCallFormat::kHarmony,
                 ToolCallFormat::kDeepSeek, ToolCallFormat::kKimiK2, ToolCallFormat::kMiniMax,
                 ToolCallFormat::kCommandR}) {
    if (tool_call_format_name(f) == name) return f;
  }
  ADD_FAILURE() << "unknown format " << name;
  return ToolCallFormat::kNone;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json rendered() {
  std::ifstream in(std::filesystem::path(STRATA_TOOL_CALLS_DATA) / "rendered.json");
  return json::parse(in);
}

std::filesystem::path templates_dir() {
  return std::filesystem::path(STRATA_SHARED_DIR) / "conformance" / "chat-templates";
}

// The options a server would use for this record's template: think tags when
// it writes them, and a turn that begins inside the block its prompt opened
// (unless the rendered turn opens its own).
ToolCallParser::Options options_for(const json& rec) {
  ToolCallParser::Options o;
  auto path = templates_dir() / rec["template"].get<std::string>();
  if (std::filesystem::exists(path)) o.think_tags = template_uses_think_tags(read_file(path));
  o.starts_in_reasoning = o.think_tags && prompt_opens_reasoning(rec["prompt_tail"].get<std::string>()) &&
                          rec["text"].get<std::string>().rfind("<think>", 0) != 0;
  return o;
}

TEST(ToolCallParser, ParsesTheCallsEachTemplateRenders) {
  json records = rendered();
  ASSERT_GT(records.size(), 50u);
  for (const auto& rec : records) {
    std::string what = rec["template"].get<std::string>() + " " + rec["case"].get<std::string>();
    ToolCallFormat format = format_named(rec["format"]);
    Result r = run_whole(format, rec["text"], options_for(rec));
    EXPECT_EQ(r.content, rec["content"].get<std::string>()) << what;
    EXPECT_EQ(r.reasoning, rec["reasoning"].get<std::string>()) << what;
    ASSERT_EQ(r.calls.size(), rec["calls"].size()) << what;
    for (std::size_t i = 0; i < r.calls.size(); ++i) {
      EXPECT_EQ(r.calls[i].name, rec["calls"][i]["name"].get<std::string>()) << what;
      EXPECT_EQ(json::parse(r.calls[i].arguments), rec["calls"][i]["arguments"]) << what;
      const json& tc = r.tool_calls[i];
      EXPECT_EQ(tc["type"], "function") << what;
      EXPECT_EQ(tc["function"]["name"], r.calls[i].name) << what;
      EXPECT_TRUE(tc["function"]["arguments"].is_string()) << what;
      EXPECT_EQ(tc["id"], r.calls[i].id) << what;
    }
  }
}

TEST(ToolCallParser, StreamedAByteAtATimeOrAtRandomPointsGivesTheSameResult) {
  json records = rendered();
  std::mt19937 rng(2026);
  for (const auto& rec : records) {
    std::string what = rec["template"].get<std::string>() + " " + rec["case"].get<std::string>();
    ToolCallFormat format = format_named(rec["format"]);
    auto options = options_for(rec);
    std::string text = rec["text"];
    Result whole = run_whole(format, text, options);
    expect_same(whole, run(format, bytes_of(text), options), what + " (bytes)");
    for (int k = 0; k < 10; ++k) expect_same(whole, run(format, random_split(text, rng), options), what + " (random)");
  }
}

TEST(ToolCallParser, TemplatesAreRecognisedByTheirCallSyntax) {
  if (!std::filesystem::exists(templates_dir())) GTEST_SKIP() << "no " << templates_dir();
  json records = rendered();
  for (const auto& rec : records) {
    std::string t = read_file(templates_dir() / rec["template"].get<std::string>());
    EXPECT_EQ(tool_call_format_name(detect_tool_call_format(t)), rec["format"].get<std::string>())
        << rec["template"];
  }
  // Every shared template is recognised without trouble; ones without tool calls are kNone.
  int known = 0;
  for (const auto& entry : std::filesystem::directory_iterator(templates_dir())) {
    if (entry.path().extension() != ".jinja") continue;
    known += detect_tool_call_format(read_file(entry.path())) != ToolCallFormat::kNone;
  }
  EXPECT_GE(known, 28);
  EXPECT_EQ(detect_tool_call_format("{% for m in messages %}{{ m.content }}{% endfor %}"), ToolCallFormat::kNone);
}

TEST(ToolCallParser, LlamaBuiltinToolCallBecomesACall) {
  Result r = run_whole(ToolCallFormat::kLlama3Json,
                       "<|python_tag|>brave_search.call(query=\"weather in \\\"Paris\\\"\", count=3, safe=True)<|eom_id|>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "brave_search");
  EXPECT_EQ(json::parse(r.calls[0].arguments), json({{"query", "weather in \"Paris\""}, {"count", 3}, {"safe", true}}));
  EXPECT_EQ(r.content, "");
  // Code for code_interpreter is a call of "python".
  r = run_whole(ToolCallFormat::kLlama3Json, "<|python_tag|>print(1 + 1)<|eom_id|>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "python");
  EXPECT_EQ(json::parse(r.calls[0].arguments), json({{"code", "print(1 + 1)"}}));
  // JSON after the tag, several separated by ';'.
  r = run_whole(ToolCallFormat::kLlama3Json,
                "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].name, "b");
  EXPECT_EQ(r.content, "");
  r = run_whole(ToolCallFormat::kLlama3Json, "{\"name\": \"a\", \"parameters\": {}};\n");
  EXPECT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallParser, LlamaJsonThatIsNotACallIsContent) {
  std::string text = "{\"answer\": 42}";
  Result r = run_whole(ToolCallFormat::kLlama3Json, text);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, text);
  // A '{' later in an answer is never a call.
  text = "Use {\"name\": \"f\", \"parameters\": {}} like this.";
  r = run_whole(ToolCallFormat::kLlama3Json, text);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, text);
}

TEST(ToolCallParser, ContentAroundAndBetweenCallsIsContent) {
  std::string text =
      "Checking both. <tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call> Done.<|im_end|>";
  for (const auto& pieces : {std::vector<std::string>{text}, bytes_of(text)}) {
    Result r = run(ToolCallFormat::kHermes, pieces);
    EXPECT_EQ(r.content, "Checking both. Done.");
    ASSERT_EQ(r.calls.size(), 2u);
    EXPECT_EQ(r.calls[0].name, "a");
    EXPECT_EQ(r.calls[0].arguments, "{\"x\":1}");
    EXPECT_EQ(r.calls[1].arguments, "{}");
    EXPECT_NE(r.calls[0].id, r.calls[1].id);
    EXPECT_EQ(r.calls[0].id.substr(0, 5), "call_");
    EXPECT_EQ(r.calls[0].id.size(), 29u);
  }
  Result r = run_whole(ToolCallFormat::kMistral,
                       "Sure.[TOOL_CALLS]a[ARGS]{\"k\": [1, {\"z\": \"]}\"}]}[TOOL_CALLS]b[CALL_ID]abcdefghi[ARGS]{}</s>");
  EXPECT_EQ(r.content, "Sure.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(json::parse(r.calls[0].arguments), json::parse("{\"k\": [1, {\"z\": \"]}\"}]}"));
  EXPECT_EQ(r.calls[0].id.size(), 9u);  // Mistral templates want 9 characters back
  EXPECT_EQ(r.calls[1].id, "abcdefghi");
}

TEST(ToolCallParser, AClosingTagInsideAJsonStringDoesNotEndTheCall) {
  std::string text =
      "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"text\": \"end with </tool_call> here\"}}\n</tool_call>";
  for (const auto& pieces : {std::vector<std::string>{text}, bytes_of(text)}) {
    Result r = run(ToolCallFormat::kHermes, pieces);
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(json::parse(r.calls[0].arguments)["text"], "end with </tool_call> here");
    EXPECT_EQ(r.content, "");
  }
}

// DeepSeek and Kimi K2 write a call's arguments between markers: a marker
// inside a JSON string of the arguments (a call that writes about the format)
// stays in the string, for one call and for the second of two.
TEST(ToolCallParser, EndMarkersInsideArgumentStringsOfDeepSeekAndKimiStayThere) {
  const std::string ds_end = "<｜tool▁call▁end｜>", ds_all = "<｜tool▁calls▁end｜>";
  const std::string ds_text =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>write\n```json\n{\"text\": \"a " +
      ds_end + " b " + ds_all + " c \\\" " + ds_end + "\"}\n```" + ds_end +
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>read\n```json\n{\"path\": \"" + ds_all + ds_end +
      "\"}\n```" + ds_end + ds_all + "Done.";
  const std::string kimi_end = "<|tool_call_end|>", kimi_all = "<|tool_calls_section_end|>";
  const std::string kimi_text =
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.write:0<|tool_call_argument_begin|>"
      "{\"text\": \"a " + kimi_end + " b " + kimi_all + "\"}" + kimi_end +
      "<|tool_call_begin|>functions.read:1<|tool_call_argument_begin|>{\"path\": \"" + kimi_all + kimi_end +
      "\"}" + kimi_end + kimi_all + "Done.";
  struct Case {
    ToolCallFormat format;
    std::string text, first, second;
  };
  for (const Case& c : {Case{ToolCallFormat::kDeepSeek, ds_text, "a " + ds_end + " b " + ds_all + " c \" " + ds_end,
                             ds_all + ds_end},
                        Case{ToolCallFormat::kKimiK2, kimi_text, "a " + kimi_end + " b " + kimi_all,
                             kimi_all + kimi_end}}) {
    std::mt19937 rng(11);
    for (const auto& pieces : {std::vector<std::string>{c.text}, random_split(c.text, rng)}) {
      Result r = run(c.format, pieces);
      ASSERT_EQ(r.calls.size(), 2u) << tool_call_format_name(c.format);
      EXPECT_EQ(r.calls[0].name, "write");
      EXPECT_EQ(json::parse(r.calls[0].arguments)["text"], c.first);
      EXPECT_EQ(r.calls[1].name, "read");
      EXPECT_EQ(json::parse(r.calls[1].arguments)["path"], c.second);
      EXPECT_EQ(r.content, "Done.");
    }
  }
}

// Closing tags inside strings, many of them, with escaped quotes before some,
// then a second call: each call's text is scanned once for where its strings
// are (this output took 13.8 s at 16000 tags when each tag re-parsed the call
// so far; tests/tool_calls has no timing, the note has the figures).
TEST(ToolCallParser, ManyClosingTagsInsideStringsStayInTheArguments) {
  std::string a, b;
  for (int i = 0; i < 5000; ++i) a += i % 3 == 0 ? "\\\"</tool_call>" : "</tool_call>x";
  for (int i = 0; i < 100; ++i) b += "{</tool_call>}";
  const std::string text = "Both. <tool_call>\n{\"name\": \"w\", \"arguments\": {\"a\": \"" + a +
                           "\", \"b\": \"" + b + "\"}}\n</tool_call>\n<tool_call>{\"name\": \"v\", "
                           "\"arguments\": {\"c\": [\"</tool_call>\"]}}</tool_call> End.";
  std::mt19937 rng(7);
  for (const auto& pieces : {std::vector<std::string>{text}, random_split(text, rng)}) {
    Result r = run(ToolCallFormat::kHermes, pieces);
    ASSERT_EQ(r.calls.size(), 2u);
    const json args = json::parse(r.calls[0].arguments);
    EXPECT_EQ(args["a"], json::parse("\"" + a + "\""));
    EXPECT_EQ(args["b"], b);
    EXPECT_EQ(json::parse(r.calls[1].arguments)["c"][0], "</tool_call>");
    EXPECT_EQ(r.content, "Both. End.");
  }
  // A body that is an array, not an object, ends at the first tag (a tag
  // inside its string is not looked past): its text is content.
  const std::string array = "<tool_call>[\"</tool_call>\"]</tool_call>";
  Result r = run(ToolCallFormat::kHermes, {array});
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, array);
}

TEST(ToolCallParser, ArgumentsKeepTheModelsKeyOrder) {
  Result r = run_whole(ToolCallFormat::kHermes,
                       "<tool_call>{\"name\": \"f\", \"arguments\": {\"zeta\": 1, \"alpha\": 2}}</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{\"zeta\":1,\"alpha\":2}");
}

TEST(ToolCallParser, TextThatMayStartAMarkerIsHeldNotLeakedNorLost) {
  ToolCallParser p(ToolCallFormat::kHermes);
  EXPECT_EQ(p.push("Hello <tool").content, "Hello");
  auto d = p.push("tip> is HTML");
  EXPECT_EQ(d.content, " <tooltip> is HTML");
  d = p.push(" <tool_");
  EXPECT_EQ(d.content, "");
  d = p.push("call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(p.finish().content, "");
  // A marker prefix left at the end is content.
  ToolCallParser q(ToolCallFormat::kMistral);
  EXPECT_EQ(q.push("a [TOOL_CA").content, "a");
  EXPECT_EQ(q.finish().content, " [TOOL_CA");
}

TEST(ToolCallParser, ThinkBlocksAreReasoning) {
  ToolCallParser::Options o;
  o.think_tags = true;
  std::string text = "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n"
                     "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>";
  for (const auto& pieces : {std::vector<std::string>{text}, bytes_of(text)}) {
    Result r = run(ToolCallFormat::kHermes, pieces, o);
    EXPECT_EQ(r.reasoning, "The user wants weather.");
    EXPECT_EQ(r.content, "");
    ASSERT_EQ(r.calls.size(), 1u);
  }
  // DeepSeek R1 distills: the prompt opened the block.
  o.starts_in_reasoning = prompt_opens_reasoning("<｜Assistant｜><think>\n");
  EXPECT_TRUE(o.starts_in_reasoning);
  EXPECT_FALSE(prompt_opens_reasoning("<｜Assistant｜><think>\n</think>"));
  Result r = run_whole(ToolCallFormat::kDeepSeek, "Hmm, 6*7.\n</think>\n\nIt is 42.<｜end▁of▁sentence｜>", o);
  EXPECT_EQ(r.reasoning, "Hmm, 6*7.");
  EXPECT_EQ(r.content, "It is 42.");
  // Mistral reasoning models.
  r = run_whole(ToolCallFormat::kMistral, "[THINK]Weather, so call.[/THINK]Calling.[TOOL_CALLS]w[ARGS]{}");
  EXPECT_EQ(r.reasoning, "Weather, so call.");
  EXPECT_EQ(r.content, "Calling.");
  EXPECT_EQ(r.calls.size(), 1u);
}

TEST(ToolCallParser, CommandRPlansAreReasoningAndResponsesContent) {
  std::string text =
      "<|START_THINKING|>I will search.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", "
      "\"tool_name\": \"search\", \"parameters\": {\"query\": \"x\"}}\n]<|END_ACTION|><|END_OF_TURN_TOKEN|>";
  for (const auto& pieces : {std::vector<std::string>{text}, bytes_of(text)}) {
    Result r = run(ToolCallFormat::kCommandR, pieces);
    EXPECT_EQ(r.reasoning, "I will search.");
    EXPECT_EQ(r.content, "");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].name, "search");
    EXPECT_EQ(r.calls[0].id.substr(0, 5), "call_");  // not its per-turn "0"
  }
  Result r = run_whole(ToolCallFormat::kCommandR,
                       "<|START_THINKING|><|END_THINKING|><|START_RESPONSE|>It is sunny.<|END_RESPONSE|><|END_OF_TURN_TOKEN|>");
  EXPECT_EQ(r.content, "It is sunny.");
  EXPECT_TRUE(r.calls.empty());
}

TEST(ToolCallParser, HarmonyChannelsSplitReasoningContentAndCalls) {
  std::string text =
      "<|channel|>analysis<|message|>Need weather.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
      "{\"location\":\"Tokyo\"}<|call|>";
  for (const auto& pieces : {std::vector<std::string>{text}, bytes_of(text)}) {
    Result r = run(ToolCallFormat::kHarmony, pieces);
    EXPECT_EQ(r.reasoning, "Need weather.");
    EXPECT_EQ(r.content, "");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(r.calls[0].arguments, "{\"location\":\"Tokyo\"}");
  }
  text = "<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>Hi there!<|return|>";
  Result r = run_whole(ToolCallFormat::kHarmony, text);
  EXPECT_EQ(r.reasoning, "Simple.");
  EXPECT_EQ(r.content, "Hi there!");
  EXPECT_TRUE(r.calls.empty());
  // Output that is not harmony at all is content.
  r = run_whole(ToolCallFormat::kHarmony, "Just text.");
  EXPECT_EQ(r.content, "Just text.");
}

TEST(ToolCallParser, QwenXmlParametersFollowTheToolSchema) {
  ToolCallParser::Options o;
  o.tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"zip": {"type": "string"}, "n": {"type": "integer"}, "flags": {"type": "array"}}}}}])");
  std::string text =
      "<tool_call>\n<function=f>\n<parameter=zip>\n01234\n</parameter>\n<parameter=n>\n5\n</parameter>\n"
      "<parameter=flags>\n[1, 2]\n</parameter>\n<parameter=note>\nline 1\nline 2\n</parameter>\n</function>\n</tool_call>";
  Result r = run_whole(ToolCallFormat::kQwen3Coder, text, o);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(json::parse(r.calls[0].arguments),
            json::parse(R"({"zip": "01234", "n": 5, "flags": [1, 2], "note": "line 1\nline 2"})"));
  // Without a schema "01234" is no JSON number and stays a string.
  r = run_whole(ToolCallFormat::kQwen3Coder, text);
  EXPECT_EQ(json::parse(r.calls[0].arguments)["zip"], "01234");
}

TEST(ToolCallParser, MalformedCallsComeBackAsContentByteForByte) {
  struct Case {
    ToolCallFormat format;
    std::string text;
  };
  std::vector<Case> cases = {
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {oops}}\n</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>\n{\"arguments\": {}}\n</tool_call>"},  // no name
      {ToolCallFormat::kHermes, "Let me see <tool_call>\n{\"name\": \"f\", \"argum"},  // cut off
      {ToolCallFormat::kQwen3Coder, "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>"},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"f\", \"parameters\": {\"a\": }"},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"f\", \"parameters\": {\"a\": 1"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]not a call at all"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, 3]"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]f[ARGS]{\"a\": tru}"},
      {ToolCallFormat::kHarmony, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{nope}<|call|>"},
      {ToolCallFormat::kDeepSeek, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
  };
  for (const auto& c : cases) {
    Result whole = run_whole(c.format, c.text);
    EXPECT_TRUE(whole.calls.empty()) << c.text;
    EXPECT_EQ(whole.content, c.text) << c.text;
    expect_same(whole, run(c.format, bytes_of(c.text)), c.text);
  }
}

TEST(ToolCallParser, HostileOutputGivesAClearResultAndNoCrash) {
  // Nesting far deeper than any parser's stack should see.
  std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": " + std::string(200000, '[') +
                     std::string(200000, ']') + "}</tool_call>";
  Result r = run_whole(ToolCallFormat::kHermes, deep);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_TRUE(r.content == deep);
  std::string deep_llama = std::string(100000, '{');
  r = run_whole(ToolCallFormat::kLlama3Json, deep_llama);
  EXPECT_TRUE(r.content == deep_llama);
  // A call body over kMaxCallBytes is given up as content, every byte kept.
  std::string huge = "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": \"" +
                     std::string(kMaxCallBytes + 100000, 'a') + "\"}}</tool_call>";
  std::vector<std::string> chunks;
  for (std::size_t i = 0; i < huge.size(); i += 4096) chunks.push_back(huge.substr(i, 4096));
  r = run(ToolCallFormat::kHermes, chunks);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_TRUE(r.content == huge) << "content of " << r.content.size() << " bytes, sent " << huge.size();
  // A large but legal call is fine.
  std::string big = "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": \"" + std::string(1 << 20, 'b') +
                    "\"}}</tool_call>";
  chunks.clear();
  for (std::size_t i = 0; i < big.size(); i += 3) chunks.push_back(big.substr(i, 3));
  r = run(ToolCallFormat::kHermes, chunks);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments.size(), (1u << 20) + 8);
  // Invalid UTF-8: in JSON it is malformed (content); in a raw name it is replaced.
  std::string bad_json = "<tool_call>{\"name\": \"f\xff\", \"arguments\": {}}</tool_call>";
  r = run(ToolCallFormat::kHermes, {bad_json}, {}, /*check_utf8=*/false);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, bad_json);
  r = run(ToolCallFormat::kQwen3Coder,
          {"<tool_call><function=f\xc3\x28><parameter=p\xfe>\n\xe2\x82\n</parameter></function></tool_call>"}, {},
          /*check_utf8=*/false);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_NO_THROW((void)r.tool_calls.dump());
  EXPECT_EQ(r.calls[0].name, "f\xEF\xBF\xBD(");
  // Random bytes in every format: no crash, and without markers nothing is lost.
  std::mt19937 rng(99);
  for (auto format : {ToolCallFormat::kNone, ToolCallFormat::kLlama3Json, ToolCallFormat::kHermes,
                      ToolCallFormat::kQwen3Coder, ToolCallFormat::kGlm, ToolCallFormat::kMistral, ToolCallFormat::kHarmony,
                      ToolCallFormat::kDeepSeek, ToolCallFormat::kKimiK2, ToolCallFormat::kMiniMax,
                 ToolCallFormat::kCommandR}) {
    for (int k = 0; k < 50; ++k) {
      std::string noise;
      for (int i = 0; i < 300; ++i) noise += static_cast<char>(rng() % 256);
      Result whole = run(format, {noise}, {}, /*check_utf8=*/false);
      Result split = run(format, random_split(noise, rng), {}, /*check_utf8=*/false);
      expect_same(whole, split, std::string(tool_call_format_name(format)));
      EXPECT_NO_THROW((void)whole.tool_calls.dump());
      if (format == ToolCallFormat::kNone) {
        EXPECT_EQ(whole.content, noise);
      }
    }
  }
}

TEST(ToolCallParser, MadeFromTheTemplateAndPromptItParsesThatFamilysOutput) {
  if (!std::filesystem::exists(templates_dir())) GTEST_SKIP() << "no " << templates_dir();
  std::string r1 = read_file(templates_dir() / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja");
  ToolCallParser parser = make_tool_call_parser(r1, "<｜User｜>Hi<｜Assistant｜><think>\n", nullptr);
  auto d = parser.push("Greet back.\n</think>\n\nHello!");
  auto last = parser.finish();
  EXPECT_EQ(d.reasoning_content + last.reasoning_content, "Greet back.");
  EXPECT_EQ(d.content + last.content, "Hello!");
  std::string qwen = read_file(templates_dir() / "Qwen3-Coder.jinja");
  json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"id": {"type": "string"}}}}}])");
  ToolCallParser coder = make_tool_call_parser(qwen, "<|im_start|>assistant\n", tools);
  d = coder.push("<tool_call>\n<function=f>\n<parameter=id>\n42\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"id\":\"42\"}");
  json delta = tool_call_delta_json(d.tool_calls[0]);
  EXPECT_EQ(delta["index"], 0);
  EXPECT_EQ(delta["type"], "function");
  EXPECT_EQ(delta["function"]["name"], "f");
  EXPECT_EQ(delta["id"], d.tool_calls[0].id);
}

// Random mixtures of each format's pieces (calls, broken calls, marker
// prefixes, text, whitespace, end tokens): any split gives the same result as
// the whole, and the result always serializes.
constexpr int kSoupRounds = 300;  // per format; raise locally to hunt for splits that differ

TEST(ToolCallParser, RandomMixturesOfPiecesParseTheSameHoweverSplit) {
  struct Soup {
    ToolCallFormat format;
    std::vector<std::string> pieces;
  };
  const std::vector<std::string> common = {"Hello", " world", "\n", "  ", "{", "}", "\"", "\\", "<", "<|", "[",
                                           "é", "\xe2\x82", "\xac", "<think>", "</think>", "{\"a\": 1}"};
  std::vector<Soup> soups = {
      {ToolCallFormat::kHermes,
       {"<tool_call>", "</tool_call>", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": [1, \"}\"]}}\n</tool_call>",
        "<tool_", "<|im_end|>", "{\"name\": \"g\"}"}},
      {ToolCallFormat::kQwen3Coder,
       {"<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>", "<function=g>",
        "</function>", "<parameter=", "</parameter>", "<tool_call>"}},
      {ToolCallFormat::kGlm, {"<tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>", "<arg_key>", "<tool_call>"}},
      {ToolCallFormat::kLlama3Json,
       {"{\"name\": \"f\", \"parameters\": {}}", "<|python_tag|>", "brave_search.call(query=\"x\")", "<|eom_id|>", ";",
        "<function=h>{}</function>"}},
      {ToolCallFormat::kMistral,
       {"[TOOL_CALLS]", "f[ARGS]{\"a\": 1}", "[{\"name\": \"g\", \"arguments\": {}}]", "[CALL_ID]abc", "[THINK]", "[/THINK]",
        "</s>"}},
      {ToolCallFormat::kHarmony,
       {"<|channel|>analysis<|message|>", "<|channel|>final<|message|>", "<|end|>", "<|start|>assistant",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>", "<|call|>", "<|return|>", "<|message|>"}},
      {ToolCallFormat::kDeepSeek,
       {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>",
        "<｜tool▁sep｜>", "<｜end▁of▁sentence｜>"}},
      {ToolCallFormat::kKimiK2,
       {"<|tool_calls_section_begin|>", "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>",
        "<|tool_calls_section_end|>", "<|tool_call_argument_begin|>", "<|im_end|>"}},
      {ToolCallFormat::kMiniMax,
       {"<tool_calls>", "\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n", "</tool_calls>", "<end_of_sentence>"}},
      {ToolCallFormat::kCommandR,
       {"<|START_THINKING|>", "<|END_THINKING|>", "<|START_ACTION|>", "<|END_ACTION|>",
        "[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": {}}]", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
        "<|END_OF_TURN_TOKEN|>"}},
  };
  std::mt19937 rng(5);
  for (const auto& soup : soups) {
    std::vector<std::string> all = common;
    all.insert(all.end(), soup.pieces.begin(), soup.pieces.end());
    for (int k = 0; k < kSoupRounds; ++k) {
      std::string text;
      int n = 1 + static_cast<int>(rng() % 30);
      for (int i = 0; i < n; ++i) text += all[rng() % all.size()];
      ToolCallParser::Options o;
      o.think_tags = k % 2 == 0;
      Result whole = run(soup.format, {text}, o, /*check_utf8=*/false);
      expect_same(whole, run(soup.format, bytes_of(text), o, /*check_utf8=*/false), text);
      expect_same(whole, run(soup.format, random_split(text, rng), o, /*check_utf8=*/false), text);
      EXPECT_NO_THROW((void)whole.tool_calls.dump()) << text;
      for (const auto& c : whole.calls) EXPECT_TRUE(json::accept(c.arguments)) << text;
    }
  }
}

// Inputs the fuzzer (tests/fuzz/tool_calls_fuzz.cc) found, and the limits:
// a call or header that runs past its limit is given up at the limit, so
// whole and split text still agree.
TEST(ToolCallParser, LimitsAndFuzzFindingsParseTheSameHoweverSplit) {
  std::mt19937 rng(11);
  struct Case {
    ToolCallFormat format;
    std::string text;
  };
  std::vector<Case> cases = {
      {ToolCallFormat::kMistral,
       "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}[TOOL_CALLS]search[ARGS]</tool_calls>{\"query\": \"x\"}</s>"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]" + std::string(2000, 'n') + "[ARGS]{}[TOOL_CALLS]f[ARGS]{}"},
      {ToolCallFormat::kHarmony, "<|channel|>" + std::string(2000, 'c') + "<|message|>text<|end|>"},
      {ToolCallFormat::kLlama3Json, std::string(300, '[') + "{\"name\": \"f\", \"parameters\": {}}"},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"f\", \"parameters\": " + std::string(300, '[') + "}"},
  };
  for (const auto& c : cases) {
    Result whole = run(c.format, {c.text}, {}, /*check_utf8=*/false);
    expect_same(whole, run(c.format, bytes_of(c.text), {}, false), c.text.substr(0, 80));
    expect_same(whole, run(c.format, random_split(c.text, rng), {}, false), c.text.substr(0, 80));
  }
  // The Mistral call whose name runs past the limit: the next one still parses.
  Result r = run_whole(ToolCallFormat::kMistral, cases[1].text);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "f");
}

TEST(ToolCallParser, FinishReasonIsToolCallsOnlyWhenACallWasParsedAndGenerationStopped) {
  ToolCallParser none(ToolCallFormat::kHermes);
  none.push("plain answer");
  none.finish();
  EXPECT_EQ(finish_reason("stop", none), "stop");
  ToolCallParser some(ToolCallFormat::kHermes);
  some.push("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
  some.finish();
  EXPECT_EQ(finish_reason("stop", some), "tool_calls");
  EXPECT_EQ(finish_reason("length", some), "length");
}

TEST(ToolCallGrammar, RequiredAndNamedChoicesGiveAGrammarForEachFormat) {
  json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather"}},
                               {"type": "function", "function": {"name": "search"}}])");
  for (auto format : {ToolCallFormat::kLlama3Json, ToolCallFormat::kHermes, ToolCallFormat::kQwen3Coder,
                      ToolCallFormat::kGlm, ToolCallFormat::kMistral, ToolCallFormat::kHarmony, ToolCallFormat::kDeepSeek,
                      ToolCallFormat::kKimiK2, ToolCallFormat::kMiniMax,
                 ToolCallFormat::kCommandR}) {
    auto g = tool_call_gbnf(format, tools, "required");
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_NE(g->find("root ::="), std::string::npos);
    EXPECT_NE(g->find("\"get_weather\" | \"search\""), std::string::npos) << *g;
    auto named = tool_call_gbnf(format, tools, json::parse(R"({"type": "function", "function": {"name": "search"}})"));
    ASSERT_TRUE(named.ok()) << named.status();
    EXPECT_NE(named->find("name ::= \"search\"\n"), std::string::npos) << *named;
  }
  auto bad = tool_call_gbnf(ToolCallFormat::kHermes, tools, json::parse(R"({"function": {"name": "nope"}})"));
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tool_choice.function.name"), std::string::npos);
  bad = tool_call_gbnf(ToolCallFormat::kHermes, json::parse(R"([{"function": {"name": "a b"}}])"), "required");
  EXPECT_NE(bad.status().message().find("tools[0].function.name"), std::string::npos);
  EXPECT_FALSE(tool_call_gbnf(ToolCallFormat::kNone, tools, "required").ok());
  EXPECT_FALSE(tool_call_gbnf(ToolCallFormat::kHermes, tools, "auto").ok());
  // parallel_tool_calls false: "required" forces exactly one call.
  auto many = tool_call_gbnf(ToolCallFormat::kHermes, tools, "required");
  auto one = tool_call_gbnf(ToolCallFormat::kHermes, tools, "required", /*parallel=*/false);
  ASSERT_TRUE(many.ok() && one.ok());
  EXPECT_NE(many->find("root ::= call ( \"\\n\" call )*"), std::string::npos) << *many;
  EXPECT_NE(one->find("root ::= call\n"), std::string::npos) << *one;
}

// What the grammar lets a model write as an argument, the parser reads: a
// number is a finite double (1e400 passed the grammar, then nlohmann refused
// the arguments and the forced call came back as content).
TEST(ToolCallGrammar, NumbersTheGrammarAllowsAreNumbersTheParserReads) {
  json tools = json::parse(R"([{"type": "function", "function": {"name": "search"}}])");
  auto gbnf = tool_call_gbnf(ToolCallFormat::kHermes, tools, "required");
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  auto grammar = grammar::parse_gbnf(*gbnf);
  ASSERT_TRUE(grammar.ok()) << grammar.status() << "\n" << *gbnf;
  auto text = [](const std::string& number) {
    return "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"x\": " + number + "}}\n</tool_call>";
  };
  auto allowed = [&](const std::string& t) {
    grammar::GrammarMatcher m(*grammar, grammar::TokenTable::build({}, {}));
    return m.accept_bytes(t) && m.complete();
  };
  for (const char* number : {"1e99", "-9999999999999999.25E-99", "0", "12.5e+7"}) {
    ASSERT_TRUE(allowed(text(number))) << number << "\n" << *gbnf;
    Result r = run_whole(ToolCallFormat::kHermes, text(number));
    ASSERT_EQ(r.calls.size(), 1u) << number;
    EXPECT_EQ(json::parse(r.calls[0].arguments)["x"], json::parse(number)) << number;
  }
  for (const std::string& number : {std::string("1e400"), std::string("1e100"), "1" + std::string(400, '0')}) {
    EXPECT_FALSE(allowed(text(number))) << number;
  }
}

}  // namespace
}  // namespace strata::chat_template

namespace strata::chat_template {
namespace {

// The grammars parse in llama.cpp's GBNF engine, allow the text each format's
// models write and refuse other names (check_gbnf.py does the matching).
TEST(ToolCallGrammar, LlamaCppAcceptsTheFormatsOwnTextAndRefusesOtherNames) {
  std::filesystem::path model = std::filesystem::path(STRATA_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no " << model;
  json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather"}},
                               {"type": "function", "function": {"name": "search"}}])");
  json named = json::parse(R"({"type": "function", "function": {"name": "search"}})");
  struct Sample {
    ToolCallFormat format;
    std::string one;  // one call of search
    std::string two;  // calls of get_weather and search ("" where the format takes one)
  };
  std::vector<Sample> samples = {
      {ToolCallFormat::kLlama3Json, R"({"name": "search", "parameters": {"query": "x", "n": [1, -2.5e3, true, null]}})", ""},
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"Z\\u00fcrich\"}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}\n</tool_call>"},
      {ToolCallFormat::kQwen3Coder,
       "<tool_call>\n<function=search>\n<parameter=query>\nLouvre hours\n</parameter>\n</function>\n</tool_call>",
       "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>\n"
       "<tool_call>\n<function=search>\n<parameter=query>\nx\n</parameter>\n</function>\n</tool_call>"},
      {ToolCallFormat::kGlm, "<tool_call>search<arg_key>query</arg_key><arg_value>Louvre</arg_value></tool_call>",
       "<tool_call>get_weather</tool_call><tool_call>search<arg_key>q</arg_key><arg_value>x</arg_value></tool_call>"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]search[ARGS]{\"query\": \"x\"}",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}, {\"name\": \"search\", \"arguments\": {}}]"},
      {ToolCallFormat::kHarmony,
       "<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant<|channel|>commentary to=functions.search "
       "<|constrain|>json<|message|>{\"query\": \"x\"}<|call|>",
       ""},
      {ToolCallFormat::kDeepSeek,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"query\": \"x\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
       "<｜tool▁call▁begin｜>search<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {ToolCallFormat::kKimiK2,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0<|tool_call_argument_begin|>{\"query\": \"x\"}"
       "<|tool_call_end|><|tool_calls_section_end|>",
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{}<|tool_call_end|>"
       "<|tool_call_begin|>functions.search:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"},
      {ToolCallFormat::kMiniMax, "<tool_calls>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}\n</tool_calls>",
       "<tool_calls>\n{\"name\": \"get_weather\", \"arguments\": {}}\n{\"name\": \"search\", \"arguments\": {}}\n"
       "</tool_calls>"},
      {ToolCallFormat::kCommandR,
       "<|START_THINKING|>Look it up.<|END_THINKING|><|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"search\", "
       "\"parameters\": {\"query\": \"x\"}}]<|END_ACTION|>",
       "<|START_THINKING|><|END_THINKING|><|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", "
       "\"parameters\": {}}, {\"tool_call_id\": \"1\", \"tool_name\": \"search\", \"parameters\": {}}]<|END_ACTION|>"},
  };
  json cases = json::array();
  for (const auto& s : samples) {
    std::string name(tool_call_format_name(s.format));
    auto required = tool_call_gbnf(s.format, tools, "required");
    auto one = tool_call_gbnf(s.format, tools, named);
    ASSERT_TRUE(required.ok() && one.ok()) << name;
    std::string other = s.one;
    other.replace(other.find("search"), 6, "delete");
    json accept = {s.one};
    if (!s.two.empty()) accept.push_back(s.two);
    cases.push_back({{"name", name + " required"}, {"grammar", *required}, {"accept", accept},
                     {"reject", {other, "Plain text."}}});
    json reject_named = {other};
    if (!s.two.empty()) reject_named.push_back(s.two);
    cases.push_back({{"name", name + " named"}, {"grammar", *one}, {"accept", {s.one}}, {"reject", reject_named}});
  }
  auto dir = std::filesystem::temp_directory_path() / ("strata_gbnf_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "cases.json") << cases.dump(1);
  std::string cmd = std::string("\"") + STRATA_PYTHON + "\" \"" + STRATA_TOOL_CALLS_DATA + "/../check_gbnf.py\" \"" +
                    (dir / "cases.json").string() + "\" \"" + model.string() + "\" > \"" + (dir / "out.txt").string() +
                    "\" 2>&1";
  int rc = std::system(cmd.c_str());
  std::string out = read_file(dir / "out.txt");
  std::filesystem::remove_all(dir);
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << out;
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << out;
}

}  // namespace
}  // namespace strata::chat_template
