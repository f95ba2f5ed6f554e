#include "coordinator/http/openai.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/json_nesting.h"

namespace strata::coordinator::http {
namespace {

using json = nlohmann::json;

absl::Status bad(absl::string_view param, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(param, ": ", what));
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "a value";
  }
}

absl::Status wrong_type(absl::string_view param, absl::string_view expected, const json& v) {
  return bad(param, absl::StrCat("expected ", expected, ", got ", type_name(v)));
}

// OpenAI's logit_bias: {"<token id>": bias, ...}, the ids as decimal
// strings. The ids' range and the biases' [-100, 100] are checked with the
// rest of the sampling (worker/sampling_proto.h), against the vocabulary;
// two keys of one id ("7", "07") are refused there.
// A JSON integer as int32, nullopt beyond that range (an unsigned value
// read as such: nlohmann's get<int64_t> would wrap one above 2^63).
std::optional<int32_t> json_int32(const json& v) {
  const int64_t x = v.is_number_unsigned()
                        ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), 1ull << 40))
                        : v.get<int64_t>();
  if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
    return std::nullopt;
  }
  return static_cast<int32_t>(x);
}

absl::Status read_logit_bias(const json& bias, v1::SamplingParams* s, bool llama_forms) {
  if (llama_forms && bias.is_array()) {
    // llama.cpp's server's form: [[id, bias], ...], false for "never" (a
    // bias of -100 here, which all but bans the token).
    for (size_t i = 0; i < bias.size(); ++i) {
      const json& pair = bias[i];
      const std::string param = absl::StrCat("logit_bias[", i, "]");
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer()) {
        return wrong_type(param, "[token id, bias or false]", pair);
      }
      const std::optional<int32_t> id = json_int32(pair[0]);
      if (!id || *id < 0) return bad(param, absl::StrCat(pair[0].dump(), " is not a token id"));
      double b = -100.0;
      if (pair[1].is_number()) {
        b = pair[1].get<double>();
      } else if (!(pair[1].is_boolean() && !pair[1].get<bool>())) {
        return wrong_type(param, "[token id, bias or false]", pair);
      }
      if (!(b >= -100.0 && b <= 100.0)) {
        return bad(param, absl::StrCat(pair[1].dump(), " is out of range [-100, 100]"));
      }
      s->add_logit_bias_ids(*id);
      s->add_logit_bias_values(static_cast<float>(b));
    }
    return absl::OkStatus();
  }
  if (!bias.is_object()) return wrong_type("logit_bias", "an object", bias);
  for (const auto& [key, value] : bias.items()) {
    int32_t id = 0;
    const bool digits = !key.empty() && key.size() <= 10 &&
                        std::all_of(key.begin(), key.end(),
                                    [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || !absl::SimpleAtoi(key, &id)) {
      return bad("logit_bias", absl::StrCat("key '", key.substr(0, 64),
                                            "' is not a token id (a non-negative integer)"));
    }
    if (!value.is_number()) {
      return wrong_type(absl::StrCat("logit_bias[", key, "]"), "a number", value);
    }
    // Checked as sent: 100.0000001 would round to the float 100.
    const double b = value.get<double>();
    if (!(b >= -100.0 && b <= 100.0)) {
      return bad("logit_bias", absl::StrCat(value.dump(), " for token id ", key,
                                            " is out of range [-100, 100]"));
    }
    s->add_logit_bias_ids(id);
    s->add_logit_bias_values(static_cast<float>(b));
  }
  return absl::OkStatus();
}

// Typed reads of an object's members; the first error sticks. Absent and
// null members read as nullopt.
class Fields {
 public:
  explicit Fields(const json& object) : o_(object) {}

  const json* get(const char* key) const {
    auto it = o_.find(key);
    if (it == o_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  std::optional<double> number(const char* key) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) return fail(wrong_type(key, "a number", *v));
    return v->get<double>();
  }
  // An integer (5.0 counts), clamped to int64.
  std::optional<int64_t> integer(const char* key) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    // Unsigned first: nlohmann's is_number_integer() holds for unsigned
    // values too, and 2^63 read as int64 wrapped to -2^63.
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      return u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                 ? std::numeric_limits<int64_t>::max()
                 : static_cast<int64_t>(u);
    }
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_number_float()) {
      // An integral value (1e3, 2.0) is taken; beyond int64 it saturates
      // like the unsigned case (casting it would be undefined behaviour).
      const double d = v->get<double>();
      if (std::isfinite(d) && d == std::trunc(d)) {
        if (d >= 9223372036854775808.0) return std::numeric_limits<int64_t>::max();
        if (d < -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
        return static_cast<int64_t>(d);
      }
    }
    return fail(wrong_type(key, "an integer", *v));
  }
  // An integer of int32's range; another is refused showing it as sent
  // (not a clamped value a later range check would name).
  std::optional<int32_t> int32(const char* key) {
    std::optional<int64_t> v = integer(key);
    if (!v) return std::nullopt;
    if (*v < std::numeric_limits<int32_t>::min() || *v > std::numeric_limits<int32_t>::max()) {
      return fail(bad(key, absl::StrCat(get(key)->dump(), " is out of range")));
    }
    return static_cast<int32_t>(*v);
  }
  std::optional<bool> boolean(const char* key) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) return fail(wrong_type(key, "a boolean", *v));
    return v->get<bool>();
  }
  std::optional<std::string> string(const char* key) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) return fail(wrong_type(key, "a string", *v));
    return v->get<std::string>();
  }

  std::nullopt_t fail(absl::Status st) {
    if (status_.ok()) status_ = std::move(st);
    return std::nullopt;
  }
  const absl::Status& status() const { return status_; }

 private:
  const json& o_;
  absl::Status status_;
};

// A message's content: a string, or text parts joined by "\n".
absl::Status map_content(const json& content, const std::string& param, std::string* out) {
  if (content.is_string()) {
    *out = content.get<std::string>();
    return absl::OkStatus();
  }
  if (!content.is_array()) return wrong_type(param, "a string or an array of parts", content);
  std::vector<std::string> texts;
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string p = absl::StrCat(param, "[", j, "]");
    const json& part = content[j];
    if (!part.is_object()) return wrong_type(p, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      return bad(p + ".type", "expected a string such as \"text\"");
    }
    if (*type != "text") {
      return bad(p + ".type", absl::StrCat("'", type->get<std::string>(),
                                           "' is not supported (text parts only)"));
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) {
      return bad(p + ".text", text == part.end() ? "missing" : "expected a string");
    }
    texts.push_back(text->get<std::string>());
  }
  *out = absl::StrJoin(texts, "\n");
  return absl::OkStatus();
}

absl::Status map_messages(const json& messages, v1::GenerateRequest* g) {
  if (!messages.is_array()) return wrong_type("messages", "an array", messages);
  if (messages.empty()) return bad("messages", "empty; expected at least one message");
  v1::ChatMessages* out = g->mutable_messages();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string p = absl::StrCat("messages[", i, "]");
    const json& m = messages[i];
    if (!m.is_object()) return wrong_type(p, "an object", m);
    Fields f(m);
    const json* role_value = f.get("role");
    if (role_value == nullptr) return bad(p + ".role", "missing");
    if (!role_value->is_string()) return wrong_type(p + ".role", "a string", *role_value);
    const std::string role = role_value->get<std::string>();
    v1::ChatMessage* cm = out->add_messages();
    cm->set_role(role);
    const json* content = f.get("content");
    if (content != nullptr && !content->is_null()) {
      std::string text;
      if (absl::Status st = map_content(*content, p + ".content", &text); !st.ok()) return st;
      cm->set_content(std::move(text));
    } else if (role != "assistant") {
      return bad(p + ".content", "missing");
    }
    // An assistant's calls (arguments as the JSON text OpenAI sends) and a
    // tool result's call id: the chat template renders them.
    if (const json* calls = f.get("tool_calls"); calls != nullptr && !calls->is_null()) {
      if (!calls->is_array()) return wrong_type(p + ".tool_calls", "an array", *calls);
      if (!calls->empty()) cm->set_tool_calls_json(calls->dump());
    }
    if (const json* id = f.get("tool_call_id"); id != nullptr && !id->is_null()) {
      if (!id->is_string()) return wrong_type(p + ".tool_call_id", "a string", *id);
      cm->set_tool_call_id(id->get<std::string>());
    }
    if (const json* name = f.get("name"); name != nullptr && !name->is_null()) {
      if (!name->is_string()) return wrong_type(p + ".name", "a string", *name);
      cm->set_name(name->get<std::string>());
    }
  }
  return absl::OkStatus();
}

// `prompt` into g; several prompts (an array of strings or of id arrays):
// the first into g, the others' inputs into `rest` (OpenAI's batch).
absl::Status map_prompt(const json& prompt, v1::GenerateRequest* g,
                        std::vector<v1::GenerateRequest>* rest) {
  auto ids = [&](const json& a, const std::string& param, v1::TokenIds* out) -> absl::Status {
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].is_number_integer() && !a[i].is_number_unsigned()) {
        return wrong_type(absl::StrCat(param, "[", i, "]"), "a token id", a[i]);
      }
      // Beyond int32 no id can be: refused showing it as sent (the
      // vocabulary's bound is checked with the model).
      const std::optional<int32_t> id = json_int32(a[i]);
      if (!id) {
        return bad(absl::StrCat(param, "[", i, "]"), absl::StrCat(a[i].dump(), " is not a token id"));
      }
      out->add_ids(*id);
    }
    return absl::OkStatus();
  };
  if (prompt.is_string()) {
    g->set_prompt(prompt.get<std::string>());
    return absl::OkStatus();
  }
  if (!prompt.is_array()) return wrong_type("prompt", "a string or an array", prompt);
  if (prompt.empty()) return bad("prompt", "empty");
  if (!prompt[0].is_string() && !prompt[0].is_array()) {
    return ids(prompt, "prompt", g->mutable_prompt_ids());
  }
  if (prompt.size() > static_cast<size_t>(kMaxChoices)) {
    return bad("prompt", absl::StrCat(prompt.size(), " prompts are over ", kMaxChoices,
                                      " in one request"));
  }
  for (size_t p = 0; p < prompt.size(); ++p) {
    v1::GenerateRequest* into = p == 0 ? g : &rest->emplace_back();
    const std::string param = absl::StrCat("prompt[", p, "]");
    if (prompt[p].is_string()) {
      into->set_prompt(prompt[p].get<std::string>());
    } else if (!prompt[p].is_array()) {
      return wrong_type(param, "a string or an array of token ids", prompt[p]);
    } else if (prompt[p].empty()) {
      return bad(param, "empty");
    } else if (absl::Status st = ids(prompt[p], param, into->mutable_prompt_ids()); !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

// Fields shared by both endpoints.
absl::Status map_common(const json& body, OpenAiRequest* r) {
  v1::GenerateRequest& g = r->generate;
  Fields f(body);
  if (auto model = f.string("model")) g.set_model(*model);
  if (auto n = f.integer("n")) {
    if (*n < 1 || *n > kMaxChoices) {
      return bad("n", absl::StrCat(*n, " is out of range [1, ", kMaxChoices, "]"));
    }
    r->n = static_cast<int>(*n);
  }
  if (auto stream = f.boolean("stream")) r->stream = *stream;
  bool stream_options = false;
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) return wrong_type("stream_options", "an object", *so);
    Fields sf(*so);
    stream_options = true;
    if (auto u = sf.boolean("include_usage")) r->include_usage = *u;
    if (!sf.status().ok()) {
      return absl::InvalidArgumentError(absl::StrCat("stream_options.", sf.status().message()));
    }
  }
  if (stream_options && !r->stream) return bad("stream_options", "only with stream: true");
  // Sampling. Defaults: OpenAI's (temperature 1), or for /infill and
  // /completion llama.cpp server's (temperature 0.8, top_k 40, top_p 0.95,
  // min_p 0.05).
  const bool llama_server =
      r->endpoint == Endpoint::kInfill || r->endpoint == Endpoint::kLlamaCompletion;
  v1::SamplingParams* s = g.mutable_sampling();
  s->set_temperature(llama_server ? 0.8f : 1.0f);
  if (llama_server) {
    s->set_top_k(40);
    s->set_top_p(0.95f);
    s->set_min_p(0.05f);
  }
  if (auto v = f.number("temperature")) {
    // Below 0: refused as OpenAI and vLLM do; greedy on llama.cpp's
    // endpoints, as llama.cpp's server reads it.
    if (*v < 0 && !llama_server) return bad("temperature", absl::StrCat(json(*v).dump(), " is less than 0"));
    s->set_temperature(static_cast<float>(std::max(*v, 0.0)));
  }
  if (auto v = f.number("top_p")) s->set_top_p(static_cast<float>(*v));
  if (auto v = f.int32("top_k")) s->set_top_k(*v <= 0 ? 0 : *v);
  if (auto v = f.number("min_p")) s->set_min_p(static_cast<float>(*v));
  // OpenAI's and vLLM's [-2, 2] (llama.cpp's /infill and /completion: any value).
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    auto v = f.number(penalty);
    if (!v) continue;
    if (!llama_server && !(*v >= -2.0 && *v <= 2.0)) {
      return bad(penalty, absl::StrCat(json(*v).dump(), " is out of range [-2, 2]"));
    }
    if (penalty[0] == 'p') s->set_presence_penalty(static_cast<float>(*v));
    else s->set_frequency_penalty(static_cast<float>(*v));
  }
  if (auto v = f.number(llama_server ? "repeat_penalty" : "repetition_penalty")) {
    s->set_repeat_penalty(static_cast<float>(*v));
  }
  if (llama_server) {
    // -1: the context, as llama.cpp reads it; the sampler looks back at most
    // 4096 tokens (worker/sampling_proto.h).
    if (auto v = f.int32("repeat_last_n")) s->set_repeat_last_n(*v == -1 ? 4096 : *v);
  }
  // -1: a random seed, as llama.cpp's server reads it (LLAMA_DEFAULT_SEED);
  // else any integer in [-2^63, 2^64) (a negative one as its 64 bits).
  if (const json* seed = f.get("seed")) {
    if (seed->is_number_unsigned()) {
      s->set_seed(seed->get<uint64_t>());
    } else if (seed->is_number_integer()) {
      if (seed->get<int64_t>() != -1) s->set_seed(static_cast<uint64_t>(seed->get<int64_t>()));
    } else if (seed->is_number_float()) {
      const double d = seed->get<double>();  // 7.0 is 7, as other integers here
      if (!(d == std::trunc(d) && d >= -9223372036854775808.0 && d < 18446744073709551616.0)) {
        return bad("seed", absl::StrCat(seed->dump(), " is not an integer in [-2^63, 2^64)"));
      }
      if (d != -1.0) {
        s->set_seed(d < 0 ? static_cast<uint64_t>(static_cast<int64_t>(d)) : static_cast<uint64_t>(d));
      }
    } else {
      return wrong_type("seed", "an integer", *seed);
    }
  }
  if (!f.status().ok()) return f.status();
  // Stop strings.
  if (const json* stop = f.get("stop")) {
    if (stop->is_string()) {
      g.add_stop(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) {
          return wrong_type(absl::StrCat("stop[", i, "]"), "a string", (*stop)[i]);
        }
        g.add_stop((*stop)[i].get<std::string>());
      }
    } else {
      return wrong_type("stop", "a string or an array of strings", *stop);
    }
  }
  if (auto user = f.string("user")) g.set_user(*user);
  if (auto salt = f.string("cache_salt")) g.set_cache_salt(*salt);
  if (auto ignore = f.boolean("ignore_eos")) g.set_ignore_eos(*ignore);
  if (const json* bias = f.get("logit_bias")) {
    if (absl::Status st = read_logit_bias(*bias, s, llama_server); !st.ok()) return st;
  }
  // What cannot be honoured is refused, never ignored.
  if (auto best_of = f.integer("best_of"); best_of && *best_of != 1 && *best_of != r->n) {
    return bad("best_of", "not supported (give n)");
  }
  if (f.get("functions") != nullptr) return bad("functions", "not supported (give tools)");
  // Tools and structured output: mapped; prompt preparation decides.
  if (const json* tools = f.get("tools")) {
    if (!tools->is_array()) return wrong_type("tools", "an array", *tools);
    if (!tools->empty()) g.set_tools_json(tools->dump());
  }
  if (auto parallel = f.boolean("parallel_tool_calls")) g.set_parallel_tool_calls(*parallel);
  if (const json* choice = f.get("tool_choice")) {
    if (choice->is_string()) g.set_tool_choice(choice->get<std::string>());
    else if (choice->is_object()) g.set_tool_choice(choice->dump());
    else return wrong_type("tool_choice", "a string or an object", *choice);
  }
  if (const json* kwargs = f.get("chat_template_kwargs")) {
    if (!kwargs->is_object()) return wrong_type("chat_template_kwargs", "an object", *kwargs);
    if (!kwargs->empty()) g.set_chat_template_kwargs_json(kwargs->dump());
  }
  if (auto grammar = f.string("grammar"); grammar && !grammar->empty()) {
    g.set_grammar(*grammar);
  }
  if (const json* rf = f.get("response_format")) {
    if (!rf->is_object()) return wrong_type("response_format", "an object", *rf);
    auto type = rf->find("type");
    if (type == rf->end() || !type->is_string()) {
      return bad("response_format.type", "expected \"text\", \"json_object\" or \"json_schema\"");
    }
    if (*type == "json_object") {
      g.set_json_object(true);
    } else if (*type == "json_schema") {
      auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object()) {
        return bad("response_format.json_schema", "expected an object with a `schema`");
      }
      auto schema = js->find("schema");
      if (schema == js->end() || !schema->is_object()) {
        return bad("response_format.json_schema.schema", "expected an object");
      }
      g.set_json_schema(schema->dump());
    } else if (*type != "text") {
      return bad("response_format.type",
                 absl::StrCat("'", type->get<std::string>(),
                              "' is not text, json_object or json_schema"));
    }
  }
  return f.status();
}

// llama.cpp server's fields of /completion and /infill: n_predict
// (max_tokens; -1: the rest of the context; 0: the prompt evaluated, no
// text), response_fields, return_tokens, n_indent, t_max_predict_ms.
absl::Status map_llama_server_fields(const json& body, OpenAiRequest* r) {
  v1::GenerateRequest& g = r->generate;
  Fields f(body);
  const char* endpoint = r->endpoint == Endpoint::kInfill ? "/infill" : "/completion";
  if (r->n != 1) return bad("n", absl::StrCat("one completion per ", endpoint, " request"));
  std::optional<int32_t> n_predict = f.int32("n_predict");
  if (!n_predict) n_predict = f.int32("max_tokens");
  if (n_predict && *n_predict == 0) {
    // llama.cpp evaluates the prompt and generates nothing (editor plugins
    // warm the cache so): one token is generated and not shown.
    r->prompt_only = true;
    g.set_max_tokens(1);
  } else if (n_predict && *n_predict != -1 && *n_predict != -2) {
    g.set_max_tokens(*n_predict);  // -1 and -2 (llama.cpp's): the rest of the context
  }
  // llama.cpp's json_schema: the output follows it (a grammar there).
  if (const json* schema = f.get("json_schema")) {
    if (!schema->is_object()) return wrong_type("json_schema", "an object", *schema);
    g.set_json_schema(schema->dump());
  }
  if (const json* fields = f.get("response_fields")) {
    if (!fields->is_array()) return wrong_type("response_fields", "an array of strings", *fields);
    for (size_t i = 0; i < fields->size(); ++i) {
      if (!(*fields)[i].is_string()) {
        return wrong_type(absl::StrCat("response_fields[", i, "]"), "a string", (*fields)[i]);
      }
      r->response_fields.push_back((*fields)[i].get<std::string>());
    }
  }
  if (auto rt = f.boolean("return_tokens")) r->return_tokens = *rt;
  if (auto v = f.int32("n_indent")) {
    if (*v < 0) return bad("n_indent", absl::StrCat(*v, " is less than 0"));
    r->n_indent = *v;
  }
  if (auto v = f.integer("t_max_predict_ms")) r->t_max_predict_ms = std::max<int64_t>(0, *v);
  return f.status();
}

// llama.cpp server's /infill: input_prefix and input_suffix (required),
// prompt (typed after the prefix), input_extra [{"filename", "text"}],
// spm_infill (strata's per-request choice of llama.cpp's --spm-infill),
// and the fields above.
absl::Status map_infill(const json& body, OpenAiRequest* r) {
  v1::GenerateRequest& g = r->generate;
  Fields f(body);
  v1::FillInMiddle* fim = g.mutable_infill();
  for (auto [key, out] : {std::pair{"input_prefix", fim->mutable_prefix()},
                          std::pair{"input_suffix", fim->mutable_suffix()}}) {
    const json* v = f.get(key);
    if (v == nullptr) return bad(key, "missing");
    if (!v->is_string()) return wrong_type(key, "a string", *v);
    *out = v->get<std::string>();
  }
  if (auto prompt = f.string("prompt")) fim->set_prompt(*prompt);
  if (const json* extra = f.get("input_extra")) {
    if (!extra->is_array()) {
      return wrong_type("input_extra", "an array of {\"filename\", \"text\"}", *extra);
    }
    for (size_t i = 0; i < extra->size(); ++i) {
      const std::string p = absl::StrCat("input_extra[", i, "]");
      const json& chunk = (*extra)[i];
      if (!chunk.is_object()) return wrong_type(p, "an object", chunk);
      Fields cf(chunk);
      const json* text = cf.get("text");
      if (text == nullptr) return bad(p + ".text", "missing");
      if (!text->is_string()) return wrong_type(p + ".text", "a string", *text);
      v1::FimFile* file = fim->add_extra();
      file->set_text(text->get<std::string>());
      if (auto name = cf.string("filename")) file->set_filename(*name);
      if (!cf.status().ok()) return absl::InvalidArgumentError(absl::StrCat(p, ".", cf.status().message()));
    }
  }
  if (auto spm = f.boolean("spm_infill")) fim->set_suffix_first(*spm);
  if (!f.status().ok()) return f.status();
  return map_llama_server_fields(body, r);
}

// llama.cpp server's /completion: prompt (a string or token ids; its
// special-token text read as the special tokens, BOS added as the model
// asks, as llama.cpp tokenizes it) and the fields above.
absl::Status map_llama_completion(const json& body, OpenAiRequest* r) {
  v1::GenerateRequest& g = r->generate;
  Fields f(body);
  const json* prompt = f.get("prompt");
  if (prompt == nullptr) return bad("prompt", "missing");
  std::vector<v1::GenerateRequest> more;
  if (absl::Status st = map_prompt(*prompt, &g, &more); !st.ok()) return st;
  if (!more.empty()) return bad("prompt", "one prompt per /completion request");
  g.set_parse_special(true);
  return map_llama_server_fields(body, r);
}

}  // namespace

absl::StatusOr<json> parse_json_object(std::string_view body) {
  if (json_nesting_depth(body) > kMaxJsonDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON: nested deeper than ", kMaxJsonDepth, " levels"));
  }
  json value;
  try {
    value = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", e.what()));
  }
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid request: expected a JSON object, got ", type_name(value)));
  }
  return value;
}

namespace {

// The tools, the assistants' tool_calls and a response_format's JSON Schema
// as the client ordered their keys: templates render the first two with
// tojson, and transformers keeps that order; a schema's properties are
// generated in the order given (the parse above sorts keys). The body
// parsed already, so it parses again.
void keep_key_order(std::string_view body, v1::GenerateRequest* g) {
  bool calls = false;
  for (const v1::ChatMessage& m : g->messages().messages()) calls = calls || !m.tool_calls_json().empty();
  if (g->tools_json().empty() && !calls && g->json_schema().empty()) return;
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
  if (!j.is_object()) return;
  if (!g->tools_json().empty()) g->set_tools_json(j["tools"].dump());
  if (!g->json_schema().empty()) {
    // OpenAI's response_format, or llama.cpp's top-level json_schema.
    g->set_json_schema(j.contains("response_format")
                           ? j["response_format"]["json_schema"]["schema"].dump()
                           : j["json_schema"].dump());
  }
  if (!calls) return;
  const nlohmann::ordered_json& messages = j["messages"];
  for (int i = 0; i < g->messages().messages_size(); ++i) {
    v1::ChatMessage* m = g->mutable_messages()->mutable_messages(i);
    if (!m->tool_calls_json().empty()) m->set_tool_calls_json(messages[i]["tool_calls"].dump());
  }
}

}  // namespace

absl::StatusOr<OpenAiRequest> parse_openai_request(Endpoint endpoint, std::string_view body) {
  absl::StatusOr<json> parsed = parse_json_object(body);
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  OpenAiRequest r;
  r.endpoint = endpoint;
  v1::GenerateRequest& g = r.generate;
  if (absl::Status st = map_common(j, &r); !st.ok()) return st;
  Fields f(j);
  std::vector<v1::GenerateRequest> more_prompts;  // their inputs only, till the end
  if (endpoint == Endpoint::kChat) {
    const json* messages = f.get("messages");
    if (messages == nullptr) return bad("messages", "missing");
    if (absl::Status st = map_messages(*messages, &g); !st.ok()) return st;
    std::optional<int32_t> max_tokens = f.int32("max_completion_tokens");
    if (!max_tokens) max_tokens = f.int32("max_tokens");
    if (max_tokens) g.set_max_tokens(*max_tokens);
    if (auto lp = f.boolean("logprobs")) g.set_logprobs(*lp);
    if (auto top = f.int32("top_logprobs")) {
      if (!g.logprobs() && *top > 0) return bad("top_logprobs", "needs logprobs: true");
      g.set_top_logprobs(*top);
    }
  } else if (endpoint == Endpoint::kInfill) {
    if (absl::Status st = map_infill(j, &r); !st.ok()) return st;
  } else if (endpoint == Endpoint::kLlamaCompletion) {
    if (absl::Status st = map_llama_completion(j, &r); !st.ok()) return st;
  } else {
    const json* prompt = f.get("prompt");
    if (prompt == nullptr) return bad("prompt", "missing");
    if (absl::Status st = map_prompt(*prompt, &g, &more_prompts); !st.ok()) return st;
    // Special-token text in a prompt ("<|im_start|>", "<fim_prefix>") is
    // the special token, as llama.cpp's server and vLLM read it (a prompt
    // templated by the client); "parse_special": false reads it as text.
    g.set_parse_special(true);
    if (auto ps = f.boolean("parse_special")) g.set_parse_special(*ps);
    g.set_max_tokens(kCompletionDefaultMaxTokens);
    if (auto max_tokens = f.int32("max_tokens")) g.set_max_tokens(*max_tokens);
    if (auto lp = f.integer("logprobs")) {
      if (*lp < 0 || *lp > 20) return bad("logprobs", absl::StrCat(*lp, " is out of range [0, 20]"));
      g.set_logprobs(true);
      g.set_top_logprobs(static_cast<int>(*lp));
    }
    if (auto echo = f.boolean("echo"); echo && *echo) {
      r.echo = true;
      if (g.logprobs()) g.set_prompt_logprobs(g.top_logprobs());
    }
    // suffix: fill in the middle (OpenAI's insert mode), the prompt before
    // the insertion; the model's FIM layout (coordinator/fill_in_middle.h).
    // "" is no suffix, as before (clients send it for "none").
    if (auto suffix = f.string("suffix"); suffix && !suffix->empty()) {
      if (g.input_case() != v1::GenerateRequest::kPrompt) {
        return bad("suffix", "needs a text prompt (the text before the insertion)");
      }
      if (r.echo) return bad("suffix", "not with echo");
      std::string prefix = g.prompt();
      v1::FillInMiddle* fim = g.mutable_infill();  // clears prompt
      fim->set_prefix(std::move(prefix));
      fim->set_suffix(*suffix);
    }
  }
  if (!f.status().ok()) return f.status();
  keep_key_order(body, &g);
  // Several prompts: each a copy of the first's request with its own input
  // (a suffix stays: each prompt is the text before the insertion).
  if (!more_prompts.empty() && (1 + more_prompts.size()) * r.n > static_cast<size_t>(kMaxChoices)) {
    return bad("prompt", absl::StrCat(1 + more_prompts.size(), " prompts x n ", r.n, " are over ",
                                      kMaxChoices, " choices in one request"));
  }
  for (v1::GenerateRequest& input : more_prompts) {
    v1::GenerateRequest full = g;
    if (full.input_case() == v1::GenerateRequest::kInfill) {
      if (input.input_case() != v1::GenerateRequest::kPrompt) {
        return bad("suffix", "needs text prompts (the text before the insertion)");
      }
      full.mutable_infill()->set_prefix(std::move(*input.mutable_prompt()));
    } else if (input.input_case() == v1::GenerateRequest::kPrompt) {
      full.set_prompt(std::move(*input.mutable_prompt()));
    } else {
      *full.mutable_prompt_ids() = std::move(*input.mutable_prompt_ids());
    }
    r.more_prompts.push_back(std::move(full));
  }
  return r;
}

namespace {

// Proto paths (prompt preparation's messages) -> OpenAI's names.
std::string openai_param(absl::string_view field) {
  struct Rename {
    absl::string_view from, to;
  };
  static constexpr Rename kRenames[] = {
      {"sampling.repeat_penalty", "repetition_penalty"},
      {"sampling.", ""},
      {"messages.messages", "messages"},
      {"prompt_ids.ids", "prompt"},
      {"tools_json", "tools"},
      {"chat_template_kwargs_json", "chat_template_kwargs"},
      {"json_schema", "response_format"},
      {"json_object", "response_format"},
  };
  for (const Rename& r : kRenames) {
    if (absl::StartsWith(field, r.from)) {
      return absl::StrCat(r.to, field.substr(r.from.size()));
    }
  }
  return std::string(field);
}

}  // namespace

ApiError api_error(int http_status, std::string message, std::string param) {
  ApiError e;
  e.http_status = http_status;
  e.message = std::move(message);
  e.param = std::move(param);
  switch (http_status) {
    case 401: e.type = "authentication_error"; e.code = "invalid_api_key"; break;
    case 404: e.type = "not_found_error"; break;
    case 413: e.type = "invalid_request_error"; e.code = "request_too_large"; break;
    case 429: e.type = "rate_limit_error"; e.retry_after_s = 1; break;
    case 503: e.type = "service_unavailable_error"; e.retry_after_s = 1; break;
    default: e.type = http_status >= 500 ? "server_error" : "invalid_request_error"; break;
  }
  return e;
}

ApiError to_api_error(const absl::Status& status) {
  std::string message(status.message());
  std::string param;
  // "field: what": the field is a path (no spaces) before the first ": ".
  if (const size_t colon = message.find(": ");
      colon != std::string::npos && colon > 0 &&
      message.find(' ') > colon && message.substr(0, colon) != "invalid JSON") {
    param = openai_param(absl::string_view(message).substr(0, colon));
    message = absl::StrCat(param, message.substr(colon));
  }
  int http = 500;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: http = 400; break;
    case absl::StatusCode::kNotFound: http = 404; break;
    case absl::StatusCode::kUnauthenticated: http = 401; break;
    case absl::StatusCode::kPermissionDenied: http = 403; break;
    case absl::StatusCode::kResourceExhausted: http = 429; break;
    case absl::StatusCode::kUnavailable: http = 503; break;
    case absl::StatusCode::kDeadlineExceeded: http = 504; break;
    case absl::StatusCode::kUnimplemented: http = 501; break;
    case absl::StatusCode::kCancelled: http = 499; break;
    default: http = 500; break;
  }
  ApiError e = api_error(http, std::move(message), std::move(param));
  if (status.code() == absl::StatusCode::kOutOfRange) e.code = "context_length_exceeded";
  if (http == 404 && e.param == "model") e.code = "model_not_found";
  if (http == 401) e.param.clear();
  return e;
}

std::string error_json(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return dump_json(json{{"error", err}});
}

std::string dump_json(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string dump_json(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace strata::coordinator::http
