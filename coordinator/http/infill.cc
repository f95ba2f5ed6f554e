#include "coordinator/http/infill.h"

namespace strata::coordinator::http {

nlohmann::ordered_json infill_done_json(const InfillDone& d) {
  const int processed = d.tokens_evaluated - d.cache_n;
  const int n = d.tokens_predicted;
  auto per_token = [](double ms, int k) { return k > 0 ? ms / k : 0.0; };
  auto per_second = [](double ms, int k) { return ms > 0 ? 1e3 * k / ms : 0.0; };
  return {{"index", 0},
          {"content", d.content},
          {"tokens", d.tokens},
          {"stop", true},
          {"model", d.model},
          {"tokens_predicted", n},
          {"tokens_evaluated", d.tokens_evaluated},
          {"generation_settings", d.generation_settings},
          {"prompt", d.prompt},
          {"has_new_line", d.has_new_line},
          {"truncated", false},
          {"stop_type", d.stop_type},
          {"stopping_word", d.stopping_word},
          {"tokens_cached", d.tokens_evaluated + n},
          {"timings",
           {{"cache_n", d.cache_n},
            {"prompt_n", processed},
            {"prompt_ms", d.prompt_ms},
            {"prompt_per_token_ms", per_token(d.prompt_ms, processed)},
            {"prompt_per_second", per_second(d.prompt_ms, processed)},
            {"predicted_n", n},
            {"predicted_ms", d.predicted_ms},
            {"predicted_per_token_ms", per_token(d.predicted_ms, n)},
            {"predicted_per_second", per_second(d.predicted_ms, n)}}}};
}

nlohmann::ordered_json infill_piece_json(std::string_view content, const std::vector<int32_t>& ids,
                                         int tokens_predicted, int tokens_evaluated) {
  return {{"index", 0},
          {"content", content},
          {"tokens", ids},
          {"stop", false},
          {"tokens_predicted", tokens_predicted},
          {"tokens_evaluated", tokens_evaluated}};
}

nlohmann::ordered_json select_response_fields(const nlohmann::ordered_json& object,
                                              const std::vector<std::string>& paths) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const std::string& path : paths) {
    const nlohmann::ordered_json* at = &object;
    std::size_t from = 0;
    while (at != nullptr) {
      const std::size_t slash = path.find('/', from);
      const std::string key = path.substr(from, slash == std::string::npos ? slash : slash - from);
      auto it = at->is_object() ? at->find(key) : at->end();
      at = it == at->end() ? nullptr : &*it;
      if (slash == std::string::npos) break;
      from = slash + 1;
    }
    if (at != nullptr) out[path] = *at;
  }
  return out;
}

std::size_t indent_cut(std::string_view text, int n_indent) {
  if (n_indent <= 0) return std::string_view::npos;
  for (std::size_t nl = text.find('\n'); nl != std::string_view::npos; nl = text.find('\n', nl + 1)) {
    std::size_t pos = nl + 1;
    int indent = 0;
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) {
      ++indent;
      ++pos;
    }
    if (pos < text.size() && indent < n_indent) return pos;  // an empty line too, as llama.cpp
  }
  return std::string_view::npos;
}

}  // namespace strata::coordinator::http
