// The coordinator's side of structured output: the grammar rides in a
// sequence's first slice only; a sampled token that carries an error fails
// only its sequence; requests name the field they got wrong.
#include <memory>
#include <string>

#include "coordinator/step_scheduler.h"
#include "coordinator/structured_output.h"
#include "gtest/gtest.h"
#include "model/grammar/grammar.h"

namespace strata::coordinator {
namespace {

class IdDetokenizer final : public Detokenizer {
 public:
  std::string push(int32_t id) override { return "<" + std::to_string(id) + ">"; }
  std::string finish() override { return ""; }
  bool is_end_of_generation(int32_t id) const override { return id == 0; }
};

TEST(SchedulerGrammar, GrammarInFirstSliceAndTokenErrorFailsOneSequence) {
  SchedulerOptions o;
  o.n_ctx = 256;
  o.max_sequences = 4;
  o.prefill_chunk = 2;
  StepScheduler s(o, [] { return std::make_unique<IdDetokenizer>(); });
  auto a = std::make_shared<SequenceHandle>(1);
  auto b = std::make_shared<SequenceHandle>(2);
  SequenceRequest ra;
  ra.prompt = {5, 6, 7};
  ra.params.max_tokens = 4;
  ra.grammar = "root ::= \"x\"";
  SequenceRequest rb = ra;
  rb.grammar.clear();
  s.add(a, ra);
  s.add(b, rb);

  // Chunks of 2 rows: the first carries the grammar, the second does not.
  std::optional<v1::MicroBatch> m1 = s.schedule();
  ASSERT_TRUE(m1.has_value());
  ASSERT_EQ(m1->slices_size(), 2);
  EXPECT_EQ(m1->slices(0).grammar(), "root ::= \"x\"");
  EXPECT_EQ(m1->slices(1).grammar(), "");
  v1::MicroBatchResult r1;
  r1.set_batch_id(m1->batch_id());
  ASSERT_TRUE(s.update_from_output(r1).ok());
  std::optional<v1::MicroBatch> m2 = s.schedule();
  ASSERT_TRUE(m2.has_value());
  ASSERT_EQ(m2->slices_size(), 2);
  EXPECT_EQ(m2->slices(0).grammar(), "");
  EXPECT_EQ(m2->slices(0).start_pos(), 2);

  // The last stage refused a's grammar: a fails with its error, b goes on.
  v1::MicroBatchResult r2;
  r2.set_batch_id(m2->batch_id());
  v1::SampledToken* ta = r2.add_tokens();
  ta->set_seq_id(1);
  ta->set_id(-1);
  ta->set_error_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
  ta->set_error_message("worker w1: sequence 1: slices[0].grammar: line 1 col 1: x");
  v1::SampledToken* tb = r2.add_tokens();
  tb->set_seq_id(2);
  tb->set_id(9);
  ASSERT_TRUE(s.update_from_output(r2).ok());
  auto ea = a->next(absl::Seconds(1));
  ASSERT_TRUE(ea.has_value());
  EXPECT_EQ(ea->kind, SequenceEvent::Kind::kError);
  EXPECT_EQ(ea->error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ea->error.message(), "worker w1: sequence 1: slices[0].grammar: line 1 col 1: x");
  auto eb = b->next(absl::Seconds(1));
  ASSERT_TRUE(eb.has_value());
  EXPECT_EQ(eb->kind, SequenceEvent::Kind::kDelta);
  EXPECT_EQ(eb->ids, std::vector<int32_t>{9});
  std::optional<v1::MicroBatch> m3 = s.schedule();
  ASSERT_TRUE(m3.has_value());
  ASSERT_EQ(m3->slices_size(), 1);
  EXPECT_EQ(m3->slices(0).seq_id(), 2u);
}

TEST(StructuredOutput, RequestFieldsAreCheckedAndNamed) {
  EXPECT_EQ(structured_output_grammar("", "", false).value(), "");
  EXPECT_EQ(structured_output_grammar("root ::= \"a\"", "", false).value(), "root ::= \"a\"");
  EXPECT_NE(structured_output_grammar("", "", true).value().find("root ::= object"),
            std::string::npos);
  EXPECT_NE(structured_output_grammar("", R"({"type":"boolean"})", false).value().find("root ::= boolean"),
            std::string::npos);
  auto both = structured_output_grammar("root ::= \"a\"", "{}", false);
  EXPECT_EQ(both.status().message(), "grammar, json_schema, json_object: give at most one of them");
  auto bad = structured_output_grammar("root ::= [", "", false);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "grammar: line 1 col 10: unterminated character class");
  auto big = structured_output_grammar(std::string(kMaxGrammarBytes + 1, ' '), "", false);
  EXPECT_EQ(big.status().message(), "grammar: 65537 bytes exceed 65536");
  auto schema = structured_output_grammar("", R"({"type":"object","additionalProperties":{"not":{}}})", false);
  EXPECT_EQ(schema.status().message(),
            "json_schema: #/additionalProperties: keyword 'not' is not supported");
  v1::GenerateRequest r;
  r.set_json_schema("{\"type\":\"null\"}");
  r.set_json_object(true);
  EXPECT_EQ(structured_output_grammar(r).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StructuredOutput, OpenAiResponseFormat) {
  using nlohmann::ordered_json;
  EXPECT_EQ(response_format_grammar(ordered_json::parse(R"({"type":"text"})")).value(), "");
  EXPECT_NE(response_format_grammar(ordered_json::parse(R"({"type":"json_object"})"))
                .value()
                .find("root ::= object"),
            std::string::npos);
  auto g = response_format_grammar(ordered_json::parse(
      R"({"type":"json_schema","json_schema":{"name":"p","strict":true,
          "schema":{"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"boolean"}},
                    "required":["z","a"],"additionalProperties":false}}})"));
  ASSERT_TRUE(g.ok()) << g.status();
  // Property order as written: z before a.
  auto parsed = grammar::parse_gbnf(*g);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto table = grammar::TokenTable::build({}, {});
  grammar::GrammarMatcher in_order(*parsed, table);
  EXPECT_TRUE(in_order.accept_bytes(R"({"z":1,"a":true})") && in_order.complete());
  grammar::GrammarMatcher swapped(*parsed, table);
  EXPECT_FALSE(swapped.accept_bytes(R"({"a":true,"z":1})"));
  EXPECT_EQ(response_format_grammar(ordered_json::parse(R"({"type":"xml"})")).status().message(),
            "response_format.type: 'xml' is not text, json_object or json_schema");
  EXPECT_EQ(response_format_grammar(ordered_json::parse(R"({"type":"json_schema","json_schema":{}})"))
                .status()
                .message(),
            "response_format.json_schema.schema: absent");
  EXPECT_EQ(response_format_grammar(ordered_json::parse(
                R"({"type":"json_schema","json_schema":{"schema":{"type":"string","format":"uri"}}})"))
                .status()
                .message(),
            "response_format.json_schema.schema: #: keyword 'format' is not supported");
  EXPECT_EQ(response_format_grammar(nlohmann::json::parse(R"({"type":"json_object"})")).ok(), true);
}

}  // namespace
}  // namespace strata::coordinator
