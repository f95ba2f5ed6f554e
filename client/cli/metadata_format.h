// Formatting of GGUF metadata values for the command line: JSON (complete)
// and text (arrays shortened).
#pragma once

#include <cstddef>
#include <string>

#include "model/gguf_reader.h"
#include "nlohmann/json.hpp"

namespace strata::cli {

// The value as JSON: numbers, bools, strings; arrays (nested too) as lists,
// never shortened.
nlohmann::ordered_json value_to_json(const gguf::Value& value);

// The value for a terminal: strings quoted, arrays shown as their first
// `max_items` elements followed by "... (N more)".
std::string value_to_text(const gguf::Value& value, size_t max_items);

// "UINT32", "STRING", "ARRAY[STRING]", "ARRAY[ARRAY]".
std::string type_label(const gguf::Value& value);

}  // namespace strata::cli
