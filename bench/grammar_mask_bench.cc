// The cost of one grammar mask (every token of a vocabulary checked against
// a matcher's state) along a JSON document, per decode step: the figure a
// constrained decode adds to each token on the last stage.
//   grammar_mask_bench --model SmolLM2-135M-Instruct.Q4_1.gguf [--schema F]
// Prints the table build time and the mask time per step (mean, p50, max)
// over the steps of a fixed JSON text, tokenized by the model's tokenizer,
// accepted token after token.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <time.h>
#include <vector>

#include "bench/parse_flags.h"
#include "model/gguf_reader.h"
#include "model/grammar/grammar.h"
#include "model/grammar/vocabulary_table.h"

namespace {
using Clock = std::chrono::steady_clock;
double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
// This thread's CPU time in ms (unlike wall time, not inflated when other
// processes share the cores).
double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
constexpr char kSchema[] = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":40},
  "age":{"type":"integer"},
  "tags":{"type":"array","items":{"type":"string"},"maxItems":8},
  "address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string"}},
             "required":["city"]},
  "active":{"type":"boolean"}},
  "required":["name","age","tags","address","active"]})";
constexpr char kDocument[] =
    R"({"name": "Ada Lovelace", "age": 36, "tags": ["math", "engines", "poetry"], )"
    R"("address": {"city": "London", "zip": "W1"}, "active": true})";
}  // namespace

int main(int argc, char** argv) {
  using namespace strata;
  CLI::App app{"grammar mask cost per decode step"};
  std::string model, schema_file;
  bool any_object = false;
  app.add_option("--model", model, "GGUF whose vocabulary is masked")->required();
  app.add_option("--schema", schema_file, "JSON Schema file (default: a person record)");
  app.add_flag("--json-object", any_object, "any JSON object instead of the schema");
  std::string gbnf_file, list_after;
  app.add_option("--grammar", gbnf_file, "GBNF file instead of a schema");
  app.add_option("--list-after", list_after,
                 "print the tokens allowed after this text, then exit (debugging)");
  if (auto rc = bench::parse_flags(app, argc, argv)) return *rc;

  auto file = gguf::GgufModel::open(model);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", std::string(file.status().message()).c_str());
    return 1;
  }
  auto tok = tokenizer::Tokenizer::from_gguf((*file)->first());
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  std::string schema = kSchema;
  if (!schema_file.empty()) {
    std::ifstream in(schema_file);
    std::stringstream ss;
    ss << in.rdbuf();
    schema = ss.str();
  }
  auto gbnf = any_object ? absl::StatusOr<std::string>(grammar::json_object_gbnf())
                         : grammar::json_schema_text_to_gbnf(schema);
  if (!gbnf.ok()) {
    std::fprintf(stderr, "%s\n", std::string(gbnf.status().message()).c_str());
    return 1;
  }
  if (!gbnf_file.empty()) {
    std::ifstream in(gbnf_file);
    std::stringstream ss;
    ss << in.rdbuf();
    gbnf = ss.str();
  }
  auto g = grammar::parse_gbnf(*gbnf);
  if (!g.ok()) {
    std::fprintf(stderr, "%s\n", std::string(g.status().message()).c_str());
    return 1;
  }
  auto t0 = Clock::now();
  auto table = grammar::token_table(**tok);
  auto t1 = Clock::now();
  std::printf("vocabulary: %d tokens, trie %zu nodes, table built in %.1f ms\n",
              table->n_tokens(), table->nodes().size(), ms(t0, t1));

  if (app.count("--list-after")) {
    grammar::GrammarMatcher m(*g, table);
    if (!m.accept_bytes(list_after)) {
      std::fprintf(stderr, "the grammar refuses the text\n");
      return 1;
    }
    grammar::TokenMask mask;
    if (!m.fill_mask(&mask).ok()) return 1;
    for (int32_t id = 0; id < table->n_tokens(); ++id) {
      if (grammar::allowed(mask, id)) std::printf("%d %s\n", id, nlohmann::json(table->piece(id)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
    return 0;
  }
  auto ids = (*tok)->encode(kDocument);
  if (!ids.ok()) return 1;
  grammar::GrammarMatcher m(*g, table);
  grammar::TokenMask mask;
  std::vector<double> times, cpu;
  size_t allowed_sum = 0;
  for (int32_t id : *ids) {
    auto a = Clock::now();
    const double c = cpu_ms();
    if (!m.fill_mask(&mask).ok()) return 1;
    cpu.push_back(cpu_ms() - c);
    times.push_back(ms(a, Clock::now()));
    for (uint64_t w : mask) allowed_sum += static_cast<size_t>(__builtin_popcountll(w));
    if (!grammar::allowed(mask, id)) {
      std::fprintf(stderr, "the grammar refused token %d of the document\n", id);
      return 1;
    }
    if (!m.accept(id).ok()) return 1;
  }
  auto summary = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double t : v) sum += t;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%.3f ms mean, %.3f ms p50, %.3f ms max", sum / v.size(),
                  v[v.size() / 2], v.back());
    return std::string(buf);
  };
  std::printf("%s grammar, %zu steps (%.0f tokens allowed on average; complete: %s)\n"
              "  mask per token, wall: %s\n  mask per token, thread CPU: %s\n",
              any_object ? "json_object" : "json_schema", times.size(),
              static_cast<double>(allowed_sum) / times.size(), m.complete() ? "yes" : "no",
              summary(times).c_str(), summary(cpu).c_str());
  return 0;
}
