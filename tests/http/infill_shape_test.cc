// llama.cpp's /infill answer and code-completion limits (coordinator/http/
// infill.h): response_fields' flat keys and n_indent's cut, as llama.cpp's
// server (tools/server json_get_nested_values, process_token) makes them.
#include "coordinator/http/infill.h"

#include <gtest/gtest.h>

#include <string>

namespace strata::coordinator::http {
namespace {

using json = nlohmann::ordered_json;

TEST(InfillShape, ResponseFieldsAreFlatKeysOfNestedMembers) {
  InfillDone d;
  d.content = "x = 1\n";
  d.tokens_predicted = 3;
  d.tokens_evaluated = 10;
  d.cache_n = 4;
  d.stop_type = "eos";
  const json all = infill_done_json(d);
  EXPECT_EQ(all["timings"]["prompt_n"], 6);  // evaluated - cached
  EXPECT_EQ(all["tokens_cached"], 13);
  const json some = select_response_fields(
      all, {"content", "timings/prompt_n", "timings/nothing", "nothing/prompt_n", "content/x",
            "stop_type", "timings"});
  EXPECT_EQ(some, json::parse(R"({"content": "x = 1\n", "timings/prompt_n": 6,
                                 "stop_type": "eos", "timings": )" + all["timings"].dump() + "}"));
  EXPECT_EQ(select_response_fields(all, {""}), json::object());  // llama.vim's warm-up asks this
}

TEST(InfillShape, NIndentCutsTheFirstLineIndentedLessKeepingItsIndentation) {
  EXPECT_EQ(indent_cut("a\n    b\n  c", 4), std::string("a\n    b\n  ").size());
  EXPECT_EQ(indent_cut("a\n    b\n\tc", 1), std::string::npos);  // a tab counts one
  EXPECT_EQ(indent_cut("a\n    b\n\tc", 2), std::string("a\n    b\n\t").size());
  EXPECT_EQ(indent_cut("a\n\n    b", 4), std::string("a\n").size());  // an empty line too
  EXPECT_EQ(indent_cut("a\n  ", 4), std::string::npos);  // the line may go on
  EXPECT_EQ(indent_cut("  a b c", 4), std::string::npos);  // the first line is never cut
  EXPECT_EQ(indent_cut("a\nb", 0), std::string::npos);
}

}  // namespace
}  // namespace strata::coordinator::http
