// How deeply JSON text nests, counted on the text before it is parsed.
// nlohmann's parser does not recurse, but copying a parsed value, dump()
// and our own walks do, once a level: a request's JSON deeper than
// kMaxJsonDepth is refused up front (the HTTP body as a whole, and the
// JSON a GenerateRequest carries as text: json_schema, tools_json,
// tool_choice, chat_template_kwargs_json, a message's tool_calls_json).
#pragma once

#include <string_view>

namespace strata::coordinator {

inline constexpr int kMaxJsonDepth = 64;

// The deepest nesting of `[` and `{` in `text` (0 for a scalar), brackets
// inside strings not counted; stops counting once past `limit` (so the
// cost is one pass however deep the text). Text that is not JSON gets a
// number too; its parser says what is wrong with it.
int json_nesting_depth(std::string_view text, int limit = kMaxJsonDepth);

}  // namespace strata::coordinator
