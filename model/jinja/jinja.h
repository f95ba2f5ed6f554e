// A Jinja interpreter for the subset that Hugging Face chat templates use,
// rendering byte for byte what Python's jinja2 (3.1) renders with the
// environment transformers' apply_chat_template builds: trim_blocks and
// lstrip_blocks on, keep_trailing_newline off, the loopcontrols extension
// ({% break %}, {% continue %}) and the {% generation %} tag, and the
// globals raise_exception(msg) and strftime_now(fmt), with tojson being
// json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...).
//
// The language:
//   - {{ expr }}, {% stmt %}, {# comment #}; `-` whitespace control on either
//     side, `+` to keep leading space with lstrip_blocks.
//   - Statements: if / elif / else, for (else, an `if` filter, tuple
//     unpacking, `loop.index`, index0, revindex, revindex0, first, last,
//     length, previtem, nextitem, depth, cycle()), break, continue, set (to a name, a
//     tuple, a namespace attribute, or a block `{% set x %}...{% endset %}`),
//     macro (defaults, keyword arguments), filter blocks, generation blocks.
//   - Expressions: literals (strings with Python escapes, ints, floats, lists,
//     tuples, dicts, true/false/none in either case), names, attributes,
//     subscripts and slices [a:b:c], calls with keyword arguments, filters,
//     `is` tests, `x if c else y`, and, or, not, in, not in, == != < <= > >=,
//     + - * / // % **, ~, unary - and +.
//   - Filters: abs, capitalize, center, count, d/default, dictsort, e/escape, first,
//     float, indent, int, items, join, last, length, list, lower, map, max,
//     min, reject, rejectattr, replace, reverse, round, safe, select,
//     selectattr, sort, string, sum, title, tojson, trim, unique, upper,
//     wordcount (tojson takes ensure_ascii, indent, separators, sort_keys).
//     Tests: boolean, callable, defined, divisibleby, eq/equalto/==,
//     even, false, float, ge, gt, in, integer, iterable, le, lower, lt,
//     mapping, ne, none, number, odd, sameas, sequence, string, true,
//     undefined, upper. Globals: namespace, range, dict, raise_exception,
//     strftime_now. Methods: str (startswith, endswith, strip, lstrip, rstrip,
//     split, rsplit, splitlines, replace, upper, lower, title, capitalize,
//     find, rfind, count, join, isdigit, isalpha, isspace), dict (get, items,
//     keys, values). The sandbox refuses mutating methods (list.append, ...)
//     as jinja2's ImmutableSandboxedEnvironment does.
//   - Values print as Python's str(): None, True, [1, 'a'], {'k': 1.0}.
//     Undefined is jinja2's default Undefined: prints as "", is false,
//     iterates as empty; any attribute of it or arithmetic on it is an error.
//
// Errors (absl::Status):
//   - parse: InvalidArgument "line N: ..." for a syntax error or a construct
//     outside the subset (e.g. `{% include %}`, an unknown statement).
//   - render: FailedPrecondition with exactly raise_exception's message;
//     InvalidArgument "line N: ..." for a runtime error (unknown filter or
//     test, wrong type, undefined attribute access, a security refusal) and
//     ResourceExhausted "line N: ..." past a limit (Limits below), so a
//     hostile template or input never crashes or runs away.
//
// Template is immutable after parse and may be rendered from any number of
// threads at once.
#pragma once

#include <cstddef>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace strata::jinja {

struct Options {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

struct RenderOptions {
  // strftime_now's clock (UTC); the current time when unset. Tests pin it.
  std::optional<std::time_t> now;
};

// Guards against hostile templates and inputs.
struct Limits {
  static constexpr int kMaxParseDepth = 256;        // nested expressions / blocks
  static constexpr int kMaxCallDepth = 64;          // nested macro calls
  static constexpr std::size_t kMaxOutputBytes = 64u << 20;
  static constexpr long kMaxLoopIterations = 1'000'000;  // all loops of one render
  // Bytes of strings built by + and ~ in one render (repeated concatenation
  // in a loop is quadratic).
  static constexpr std::size_t kMaxBuiltBytes = 512u << 20;
};

struct Node;  // the parsed template (internal, model/jinja/ast.h)

class Template {
 public:
  // InvalidArgument "line N: <what>" for a syntax error or an unsupported
  // construct.
  static absl::StatusOr<Template> parse(std::string_view source,
                                        const Options& options = {});

  // context: a JSON object; its keys are the template's variables. Objects
  // keep their key order (tojson and dict iteration print in that order, as
  // Python's dicts do), so pass an ordered_json where the order matters.
  absl::StatusOr<std::string> render(const nlohmann::ordered_json& context,
                                     const RenderOptions& options = {}) const;
  // The same with nlohmann::json (objects in sorted key order).
  absl::StatusOr<std::string> render(const nlohmann::json& context,
                                     const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Node> root_;
};

}  // namespace strata::jinja
