#include "coordinator/prompt.h"

#include <algorithm>
#include <random>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/fill_in_middle.h"
#include "coordinator/json_nesting.h"
#include "coordinator/structured_output.h"
#include "model/chat_template/tool_calls.h"
#include "model/chat_template/model_chat.h"
#include "worker/sampling_proto.h"

namespace strata::coordinator {
namespace {

constexpr int kMaxTokens = 1 << 20;          // max_tokens, Detokenize ids
constexpr int kMaxMessages = 1024;
constexpr size_t kMaxRoleBytes = 64;
constexpr size_t kMaxNameBytes = 256;  // a message's name and tool_call_id
constexpr int kMaxStops = 16;
constexpr size_t kMaxStopBytes = 256;
constexpr int kMaxTopLogprobs = 20;
constexpr size_t kMaxUserBytes = 256;
constexpr int kMaxFimFiles = 256;             // infill.extra

absl::Status bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// JSON carried as text (a field's value, parsed later): refused when it
// nests deeper than kMaxJsonDepth, as an HTTP body is (json_nesting.h).
absl::Status check_json_depth(absl::string_view field, std::string_view text) {
  if (json_nesting_depth(text) <= kMaxJsonDepth) return absl::OkStatus();
  return bad(field, absl::StrCat("JSON nested deeper than ", kMaxJsonDepth, " levels"));
}

// T as given: an int prints as one (top_k 100000000, not 1e+08).
template <typename T>
absl::Status range(absl::string_view field, T v, absl::string_view r) {
  return bad(field, absl::StrCat(v, " is out of range ", r));
}

// The prompt's ids: as given, `prompt` tokenized, or `messages` rendered
// with the model's chat template and tokenized.
// With messages, *spec receives what the output parser needs and
// *tool_grammar the grammar a forcing tool_choice asks for.
absl::StatusOr<std::vector<int32_t>> tokenize_input(const ServedModel& model,
                                                    const v1::GenerateRequest& request,
                                                    ChatOutputSpec* spec,
                                                    std::string* tool_grammar) {
  const tokenizer::Tokenizer& tok = *model.tokenizer;
  if (request.has_prompt_ids()) {
    return std::vector<int32_t>(request.prompt_ids().ids().begin(),
                                request.prompt_ids().ids().end());
  }
  if (request.has_infill()) {
    FimBudget budget;
    budget.n_ctx = model.n_ctx;
    budget.max_tokens = request.has_max_tokens() ? request.max_tokens() : 0;
    return fill_in_middle_prompt(tok, request.infill(),
                                 request.has_add_special() ? request.add_special() : true, budget);
  }
  if (request.has_prompt()) {
    tokenizer::EncodeOptions e;
    e.add_special = request.has_add_special() ? request.add_special() : true;
    e.parse_special = request.parse_special();
    return tok.encode(request.prompt(), e);
  }
  std::vector<chat_template::WireMessage> messages;
  for (const v1::ChatMessage& m : request.messages().messages()) {
    messages.push_back({m.role(), m.content(), m.name(), m.tool_call_id(), m.tool_calls_json()});
  }
  auto chat_request = chat_template::chat_request_from_wire(
      messages, request.tools_json(), request.tool_choice(),
      request.chat_template_kwargs_json(), true);
  if (!chat_request.ok()) return chat_request.status();
  // The rendered text is tokenized with control tokens parsed (the
  // template's turn markers); the request's own text must not spell one.
  if (absl::Status st = chat_template::check_request_text(tok, *chat_request); !st.ok()) {
    return st;
  }
  auto chat = chat_template::render_model_chat(model.gguf->first(), tok, *chat_request,
                                               model.chat_template, model.chat_template_source);
  if (!chat.ok()) {
    // No template in the model, or one outside the Jinja subset: the served
    // model cannot take messages (FAILED_PRECONDITION, not the request's
    // fault); a template that refuses this conversation keeps its code.
    const absl::StatusCode code =
        absl::IsNotFound(chat.status()) || absl::IsInvalidArgument(chat.status())
            ? absl::StatusCode::kFailedPrecondition
            : chat.status().code();
    return absl::Status(code, absl::StrCat("messages: ", chat.status().message()));
  }
  const std::string& choice = request.tool_choice();
  if (chat_request->tools.is_array() && !chat_request->tools.empty() && choice != "none") {
    const chat_template::ToolCallFormat format =
        chat_template::detect_tool_call_format(chat->template_text);
    // A template that writes no call format we know (nor <think> blocks):
    // the text passes through as it would without tools.
    spec->parse_tool_calls = format != chat_template::ToolCallFormat::kNone ||
                             chat_template::template_uses_think_tags(chat->template_text);
    spec->template_text = chat->template_text;
    spec->prompt_text = chat->text;
    spec->tools = nlohmann::json::parse(chat_request->tools.dump());
    if (!choice.empty() && choice != "auto") {
      // "required" or a named function (chat_request_from_wire checked it).
      if (format == chat_template::ToolCallFormat::kNone) {
        return bad("tool_choice", absl::StrCat("the chat template (", chat->template_name,
                                               ") writes no tool-call format this server knows"));
      }
      const nlohmann::json choice_json =
          choice == "required" ? nlohmann::json("required") : nlohmann::json::parse(choice);
      absl::StatusOr<std::string> gbnf =
          chat_template::tool_call_gbnf(format, spec->tools, choice_json,
                                        !request.has_parallel_tool_calls() ||
                                            request.parallel_tool_calls());
      if (!gbnf.ok()) return gbnf.status();
      *tool_grammar = *std::move(gbnf);
    }
  }
  tokenizer::EncodeOptions e;
  e.add_special = !chat->starts_with_bos;
  e.parse_special = true;
  return tok.encode(chat->text, e);
}

}  // namespace


size_t request_text_limit(int64_t n_ctx) {
  constexpr int64_t kBytesPerToken = 64;
  constexpr int64_t kLeast = int64_t{1} << 20;
  constexpr int64_t kMost = int64_t{8} << 20;
  const int64_t by_context = n_ctx > kMost / kBytesPerToken ? kMost : n_ctx * kBytesPerToken;
  return static_cast<size_t>(std::clamp(by_context, kLeast, kMost));
}

absl::Status check_request_size(const v1::GenerateRequest& r, int64_t n_ctx) {
  size_t total = 0;
  size_t largest = 0;
  std::string largest_field;
  const auto add = [&](size_t n, auto&& field) {
    total += n;
    if (n > largest) {
      largest = n;
      largest_field = field();
    }
  };
  add(r.prompt().size(), [] { return std::string("prompt"); });
  const v1::FillInMiddle& fim = r.infill();
  add(fim.prefix().size(), [] { return std::string("infill.prefix"); });
  add(fim.suffix().size(), [] { return std::string("infill.suffix"); });
  add(fim.prompt().size(), [] { return std::string("infill.prompt"); });
  for (int i = 0; i < fim.extra_size(); ++i) {
    add(fim.extra(i).filename().size(), [i] { return absl::StrCat("infill.extra[", i, "].filename"); });
    add(fim.extra(i).text().size(), [i] { return absl::StrCat("infill.extra[", i, "].text"); });
  }
  const auto& m = r.messages().messages();
  for (int i = 0; i < m.size(); ++i) {
    const auto name = [i](const char* member) {
      return [i, member] { return absl::StrCat("messages.messages[", i, "].", member); };
    };
    add(m[i].role().size(), name("role"));
    add(m[i].content().size(), name("content"));
    add(m[i].name().size(), name("name"));
    add(m[i].tool_call_id().size(), name("tool_call_id"));
    add(m[i].tool_calls_json().size(), name("tool_calls_json"));
  }
  add(r.tools_json().size(), [] { return std::string("tools_json"); });
  add(r.tool_choice().size(), [] { return std::string("tool_choice"); });
  add(r.chat_template_kwargs_json().size(),
      [] { return std::string("chat_template_kwargs_json"); });
  add(r.grammar().size(), [] { return std::string("grammar"); });
  add(r.json_schema().size(), [] { return std::string("json_schema"); });
  for (int i = 0; i < r.stop_size(); ++i) {
    add(r.stop(i).size(), [i] { return absl::StrCat("stop[", i, "]"); });
  }
  add(r.user().size(), [] { return std::string("user"); });
  add(r.cache_salt().size(), [] { return std::string("cache_salt"); });
  const size_t limit = request_text_limit(n_ctx);
  if (total <= limit) return absl::OkStatus();
  return bad("request", absl::StrCat(total, " bytes of text exceed ", limit,
                                     ", the bound for a context of ", n_ctx,
                                     " tokens (largest field: ", largest_field, ", ", largest,
                                     " bytes)"));
}

absl::Status check_model_name(const v1::ModelInfo& served, const std::string& model) {
  if (model.empty() || model == served.name()) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(
      "model: '", model.substr(0, 256), "' is not served here; this server "
      "serves '", served.name(), "'"));
}

absl::Status check_generate_request(const v1::GenerateRequest& r, int n_vocab,
                                    worker::SamplingParams* sampling) {
  worker::SamplingParams scratch;
  switch (r.input_case()) {
    case v1::GenerateRequest::kPrompt:
      if (r.prompt().empty()) return bad("prompt", "empty");
      if (r.prompt().size() > kMaxTextBytes) {
        return bad("prompt", absl::StrCat(r.prompt().size(),
                                          " bytes exceed ", kMaxTextBytes));
      }
      break;
    case v1::GenerateRequest::kPromptIds: {
      const auto& ids = r.prompt_ids().ids();
      if (ids.empty()) return bad("prompt_ids.ids", "empty");
      if (ids.size() > kMaxTokens) {
        return bad("prompt_ids.ids",
                   absl::StrCat(ids.size(), " ids exceed ", kMaxTokens));
      }
      for (int i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= n_vocab) {
          return bad(absl::StrCat("prompt_ids.ids[", i, "]"),
                     absl::StrCat(ids[i], " is not a token id [0, ", n_vocab,
                                  ")"));
        }
      }
      break;
    }
    case v1::GenerateRequest::kMessages: {
      const auto& m = r.messages().messages();
      if (m.empty() || m.size() > kMaxMessages) {
        return bad("messages.messages",
                   absl::StrCat(m.size(), " messages; expected 1 .. ",
                                kMaxMessages));
      }
      for (int i = 0; i < m.size(); ++i) {
        const std::string f = absl::StrCat("messages.messages[", i, "]");
        if (m[i].role().empty() || m[i].role().size() > kMaxRoleBytes) {
          return bad(f + ".role", absl::StrCat(m[i].role().size(),
                                               " bytes; expected 1 .. ",
                                               kMaxRoleBytes));
        }
        if (m[i].content().size() > kMaxTextBytes) {
          return bad(f + ".content", absl::StrCat(m[i].content().size(),
                                                  " bytes exceed ",
                                                  kMaxTextBytes));
        }
        for (const auto& [field, size, limit] :
             {std::tuple<const char*, size_t, size_t>{".name", m[i].name().size(), kMaxNameBytes},
              {".tool_call_id", m[i].tool_call_id().size(), kMaxNameBytes},
              {".tool_calls_json", m[i].tool_calls_json().size(), kMaxTextBytes}}) {
          if (size > limit) return bad(f + field, absl::StrCat(size, " bytes exceed ", limit));
        }
        if (absl::Status st = check_json_depth(f + ".tool_calls_json", m[i].tool_calls_json());
            !st.ok()) {
          return st;
        }
      }
      // The JSON fields are parsed and checked with the messages
      // (chat_template::chat_request_from_wire).
      for (const auto& [field, text] :
           {std::pair<const char*, const std::string*>{"tools_json", &r.tools_json()},
            {"tool_choice", &r.tool_choice()},
            {"chat_template_kwargs_json", &r.chat_template_kwargs_json()}}) {
        if (text->size() > kMaxTextBytes) {
          return bad(field, absl::StrCat(text->size(), " bytes exceed ", kMaxTextBytes));
        }
        if (absl::Status st = check_json_depth(field, *text); !st.ok()) return st;
      }
      break;
    }
    case v1::GenerateRequest::kInfill: {
      const v1::FillInMiddle& fim = r.infill();
      for (const auto& [field, size] :
           {std::pair<const char*, size_t>{"infill.prefix", fim.prefix().size()},
            {"infill.suffix", fim.suffix().size()},
            {"infill.prompt", fim.prompt().size()}}) {
        if (size > kMaxTextBytes) return bad(field, absl::StrCat(size, " bytes exceed ", kMaxTextBytes));
      }
      if (fim.extra_size() > kMaxFimFiles) {
        return bad("infill.extra", absl::StrCat(fim.extra_size(), " files; at most ", kMaxFimFiles));
      }
      for (int i = 0; i < fim.extra_size(); ++i) {
        const std::string f = absl::StrCat("infill.extra[", i, "]");
        if (fim.extra(i).filename().size() > kMaxNameBytes) {
          return bad(f + ".filename", absl::StrCat(fim.extra(i).filename().size(),
                                                   " bytes exceed ", kMaxNameBytes));
        }
        if (fim.extra(i).text().size() > kMaxTextBytes) {
          return bad(f + ".text",
                     absl::StrCat(fim.extra(i).text().size(), " bytes exceed ", kMaxTextBytes));
        }
      }
      break;
    }
    case v1::GenerateRequest::INPUT_NOT_SET:
      return bad("input", "give one of prompt, prompt_ids, messages, infill");
  }
  if (r.has_max_tokens() &&
      (r.max_tokens() < 1 || r.max_tokens() > kMaxTokens)) {
    return r.max_tokens() < 1
               ? bad("max_tokens", absl::StrCat(r.max_tokens(),
                                                " is less than 1"))
               : bad("max_tokens", absl::StrCat(r.max_tokens(), " exceeds ",
                                                kMaxTokens));
  }
  if (absl::Status st =
          worker::sampling_from_proto(r.sampling(), n_vocab, "sampling",
                                      sampling != nullptr ? sampling : &scratch);
      !st.ok()) {
    return st;
  }
  if (r.stop_size() > kMaxStops) {
    return bad("stop", absl::StrCat(r.stop_size(), " strings; at most ",
                                    kMaxStops));
  }
  for (int i = 0; i < r.stop_size(); ++i) {
    if (r.stop(i).size() > kMaxStopBytes) {
      return bad(absl::StrCat("stop[", i, "]"),
                 absl::StrCat(r.stop(i).size(), " bytes exceed ",
                              kMaxStopBytes));
    }
  }
  if (r.top_logprobs() < 0 || r.top_logprobs() > kMaxTopLogprobs) {
    return range("top_logprobs", r.top_logprobs(),
                 absl::StrCat("[0, ", kMaxTopLogprobs, "]"));
  }
  if (r.has_prompt_logprobs() &&
      (r.prompt_logprobs() < 0 || r.prompt_logprobs() > kMaxTopLogprobs)) {
    return range("prompt_logprobs", r.prompt_logprobs(),
                 absl::StrCat("[0, ", kMaxTopLogprobs, "]"));
  }
  if (r.user().size() > kMaxUserBytes) {
    return bad("user", absl::StrCat(r.user().size(), " bytes exceed ",
                                    kMaxUserBytes));
  }
  if (r.cache_salt().size() > kMaxCacheSaltBytes) {
    return bad("cache_salt", absl::StrCat(r.cache_salt().size(), " bytes exceed ",
                                          kMaxCacheSaltBytes));
  }
  // Fields the server cannot honour yet: refused, never silently ignored
  // (output that ignores a schema or the tools would look like success).
  // tools and chat_template_kwargs are rendered by the chat template; the
  // tools and kwargs only with messages.
  if (r.input_case() != v1::GenerateRequest::kMessages) {
    if (!r.tools_json().empty()) return bad("tools_json", "only with messages");
    if (!r.chat_template_kwargs_json().empty()) {
      return bad("chat_template_kwargs_json", "only with messages");
    }
  }
  if (!r.tool_choice().empty() && r.tool_choice() != "auto" && r.tool_choice() != "none" &&
      r.input_case() != v1::GenerateRequest::kMessages) {
    return bad("tool_choice", "only with messages");
  }
  // grammar / json_schema / json_object: at most one, and it must compile
  // (the GBNF is made once more in prepare_prompt; the check is cheap).
  if (absl::Status st = check_json_depth("json_schema", r.json_schema()); !st.ok()) return st;
  return structured_output_grammar(r).status();
}


absl::StatusOr<SequenceRequest> prepare_prompt(const ServedModel& model,
                                               const v1::GenerateRequest& request,
                                               const PromptOptions& options,
                                               ChatOutputSpec* chat_output) {
  if (absl::Status st = check_model_name(model.info, request.model()); !st.ok()) {
    return st;
  }
  if (absl::Status st = check_request_size(request, model.n_ctx); !st.ok()) return st;
  const tokenizer::Tokenizer& tok = *model.tokenizer;
  worker::SamplingParams sampling;
  if (absl::Status st = check_generate_request(request, tok.n_tokens(), &sampling);
      !st.ok()) {
    return st;
  }
  ChatOutputSpec spec;
  std::string tool_grammar;
  absl::StatusOr<std::vector<int32_t>> prompt =
      tokenize_input(model, request, &spec, &tool_grammar);
  if (!prompt.ok()) return prompt.status();
  if (prompt->empty()) return bad("prompt", "no tokens");
  const int64_t n_prompt = static_cast<int64_t>(prompt->size());
  if (n_prompt > model.n_ctx) {  // as Scheduler::submit says it
    return absl::OutOfRangeError(absl::StrCat(
        "prompt: ", n_prompt, " tokens exceed the context of ", model.n_ctx));
  }

  if (!request.sampling().has_seed()) {
    sampling.seed = static_cast<uint64_t>(std::random_device{}()) << 32 |
                    std::random_device{}();
  }
  SequenceRequest sr;
  sr.prompt = *std::move(prompt);
  if (request.has_max_tokens()) {
    sr.params.max_tokens = request.max_tokens();
  } else if (options.default_max_tokens > 0) {
    sr.params.max_tokens = options.default_max_tokens;
  } else {
    sr.params.max_tokens = static_cast<int>(std::max<int64_t>(1, model.n_ctx - n_prompt));
  }
  sr.params.sampling = sampling;
  sr.params.stop.assign(request.stop().begin(), request.stop().end());
  sr.params.ignore_eos = request.ignore_eos();
  sr.logprobs = request.logprobs();
  sr.top_logprobs = request.top_logprobs();
  sr.prompt_logprobs = request.has_prompt_logprobs() ? request.prompt_logprobs() : -1;
  sr.cache_salt = request.cache_salt();
  absl::StatusOr<std::string> grammar = structured_output_grammar(request);
  if (!grammar.ok()) return grammar.status();
  sr.grammar = *std::move(grammar);
  if (!tool_grammar.empty()) {
    if (!sr.grammar.empty()) {
      return bad("tool_choice", "a forced tool call cannot be combined with "
                                "response_format or grammar");
    }
    sr.grammar = std::move(tool_grammar);
  }
  sr.render_special = spec.parse_tool_calls;
  if (chat_output != nullptr) *chat_output = std::move(spec);
  return sr;
}

}  // namespace strata::coordinator
