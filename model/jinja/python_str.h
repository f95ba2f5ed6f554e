// Python's str operations over UTF-8 text, as CPython 3 defines them, for
// the str methods (methods.cc) and the filters (builtins.cc) (internal).
// Case mapping is ASCII only (as the templates need; a non-ASCII letter
// keeps its case but counts as a letter for title()); whitespace is
// Python's str.isspace().
#pragma once

#include <cstdint>
#include <string>

#include "model/jinja/value.h"

namespace strata::jinja {

// str.strip / lstrip / rstrip: `chars` none or undefined strips whitespace.
std::u32string strip_chars(const std::u32string& s, const Value& chars, bool left, bool right, int line);
std::string upper(const std::string& s);
std::string lower(const std::string& s);
std::string title(const std::string& s);
std::string capitalize(const std::string& s);
// Whether the code point counts as a letter: ASCII letters and every code
// point from U+00C0 (an approximation of Python's str.isalpha()).
bool is_alpha_cp(char32_t c);
// A string a filter or method builds, refused past the output limit (no
// render could print it; center(10**12) asked for a terabyte):
// ResourceExhausted "line N: WHAT would make more than ... bytes".
void check_built(size_t bytes, int line, const char* what);
// str.replace(old, new, count) (count < 0: all), within the output limit.
std::string replace(const std::string& s, const std::string& old, const std::string& with, int64_t count,
                    int line);
// str.split(sep, maxsplit) and rsplit (sep none or undefined: runs of
// whitespace).
List split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right, int line);
// str.splitlines() (every line boundary Python knows, \r\n as one).
List splitlines(const std::string& s);

}  // namespace strata::jinja
