// The parsed template (internal): expressions and statements as jinja2's
// parser builds them, each with its source line for errors.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/jinja/value.h"

namespace strata::jinja {

struct Expr;
using ExprP = std::shared_ptr<const Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // args (tuple: literal.tuple)
    kDict,     // kwnames (keys as expressions in args: key, value, key, value...)
    kAttr,     // args[0].name
    kItem,     // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null parts omitted)
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs); args[0] null in a filter block
    kTest,     // args[0] is [not] name(args[1..])
    kUnary,    // name ("-", "+", "not") args[0]
    kBinary,   // args[0] name args[1]: + - * / // % ** ~ and or
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ...
    kCond,     // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  Value literal;
  std::string name;
  bool negated = false;  // kTest: `is not`
  bool tuple = false;    // kList: a tuple
  std::vector<ExprP> args;
  std::vector<std::string> ops;  // kCompare
  std::vector<std::string> kwnames;
  std::vector<ExprP> kwargs;
};

struct Node;
using NodeP = std::shared_ptr<const Node>;
using Body = std::vector<NodeP>;

struct Node {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // conds[k] -> bodies[k]; bodies.size() == conds.size() + 1 with else
    kFor,          // for targets in expr [if filter]: bodies[0], else bodies[1]
    kSet,          // targets (or expr2 = namespace attribute target) = expr
    kSetBlock,     // targets[0] = rendered bodies[0] (through filter, if any)
    kMacro,        // targets[0](params = defaults): bodies[0]
    kFilterBlock,  // filter(bodies[0])
    kBreak,
    kContinue,
    kBlock,        // bodies[0] rendered in place (generation)
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  ExprP expr;
  ExprP expr2;   // kSet: the attribute target (ns.x); kFor: the `if` filter
  ExprP filter;  // kSetBlock / kFilterBlock: a kFilter chain with a null innermost operand
  std::vector<std::string> targets;
  std::vector<std::string> params;
  std::vector<ExprP> defaults;  // per param, null where none
  std::vector<ExprP> conds;
  std::vector<Body> bodies;
};

}  // namespace strata::jinja

#include <string_view>

#include "model/jinja/jinja.h"

namespace strata::jinja {

// The template's statements (parser.cc); throws Error (InvalidArgument
// "line N: ...").
NodeP parse_template(std::string_view source, const Options& options);

// Renders `root` (interpreter.cc); throws Error.
std::string render_template(const Node& root, const Value& context, std::time_t now);

}  // namespace strata::jinja
