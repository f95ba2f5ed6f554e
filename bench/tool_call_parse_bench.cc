// The tool-call parser's time against the closing tags a call's JSON
// strings hold: k copies of the format's end marker inside one argument
// string, the text pushed a few bytes at a time as a stream arrives.
//   tool_call_parse_bench [--format hermes|all] [--max-k 64000] [--piece 4]
// Prints, per format and k (quadrupling), the bytes, the calls and content
// parsed, the thread CPU time and its ratio to the k before: about 4 when
// the parse is linear in the text, 16 when quadratic (session 43 measured
// 13.8 s for k = 16000 on the quadratic parser).
#include <cstdio>
#include <string>
#include <time.h>
#include <vector>

#include "bench/parse_flags.h"
#include "model/chat_template/tool_calls.h"

namespace {

double cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

using strata::chat_template::ToolCallFormat;
using strata::chat_template::ToolCallParser;

// A format's call with k end markers inside a JSON string argument.
struct Shape {
  const char* name;
  ToolCallFormat format;
  std::string open, marker, close;
};

std::vector<Shape> shapes() {
  return {
      {"hermes", ToolCallFormat::kHermes, "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":\"",
       "</tool_call>x", "\"}}</tool_call>"},
      {"minimax", ToolCallFormat::kMiniMax, "<tool_calls>\n{\"name\":\"f\",\"arguments\":{\"a\":\"",
       "</tool_calls>x", "\"}}\n</tool_calls>"},
      {"mistral", ToolCallFormat::kMistral, "[TOOL_CALLS]f[ARGS]{\"a\":\"", "[TOOL_CALLS]x",
       "\"}"},
      {"deepseek", ToolCallFormat::kDeepSeek,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\":\"",
       "<｜tool▁call▁end｜>x", "\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {"kimi", ToolCallFormat::kKimiK2,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
       "<|tool_call_argument_begin|>{\"a\":\"",
       "<|tool_call_end|>x", "\"}<|tool_call_end|><|tool_calls_section_end|>"},
  };
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tool-call parse time against closing tags inside JSON strings"};
  std::string only = "all";
  int max_k = 64000;
  int piece = 4;
  app.add_option("--format", only, "hermes, minimax, mistral, deepseek, kimi or all (all)");
  app.add_option("--max-k", max_k, "largest number of markers (64000)")->check(CLI::Range(1, 1 << 24));
  app.add_option("--piece", piece, "bytes pushed at a time (4)")->check(CLI::Range(1, 1 << 20));
  if (auto exit = strata::bench::parse_flags(app, argc, argv)) return *exit;
  std::printf("%-9s %9s %10s %5s %8s %10s %8s\n", "format", "k", "bytes", "calls", "content",
              "cpu_s", "ratio");
  bool any = false;
  for (const Shape& s : shapes()) {
    if (only != "all" && only != s.name) continue;
    any = true;
    double before = 0.0;
    for (int k = 250; k <= max_k; k *= 4) {
      std::string text = s.open;
      for (int i = 0; i < k; ++i) text += s.marker;
      text += s.close;
      ToolCallParser parser(s.format);
      size_t content = 0;
      const double t0 = cpu_s();
      for (size_t at = 0; at < text.size(); at += static_cast<size_t>(piece)) {
        content += parser.push(std::string_view(text).substr(at, static_cast<size_t>(piece)))
                       .content.size();
      }
      content += parser.finish().content.size();
      const double t = cpu_s() - t0;
      const size_t calls = parser.tool_calls().size();
      std::printf("%-9s %9d %10zu %5zu %8zu %10.4f %8s\n", s.name, k, text.size(), calls, content,
                  t, before > 0 ? std::to_string(t / before).substr(0, 6).c_str() : "-");
      before = t;
    }
  }
  if (!any) {
    std::fprintf(stderr, "tool_call_parse_bench: --format %s: no such format\n", only.c_str());
    return 2;
  }
  return 0;
}
