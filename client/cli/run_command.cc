// `strata run -m MODEL -p PROMPT [-n N] [sampling flags] [--json]`: loads a
// GGUF whole on the CPU, generates from a prompt, streams the text and
// prints prefill and decode tok/s at the end (stderr). --json prints one
// object instead: {"prompt_ids":[...],"ids":[...],"text":"...",
// "finish_reason":"stop"|"length","timings":{...}}.
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "client/cli/chat_prompt.h"
#include "model/chat_template/model_chat.h"
#include "client/cli/commands.h"
#include "client/cli/prompt_ids.h"
#include "client/cli/generation_report.h"
#include "client/cli/kernel_flags.h"
#include "client/cli/sampling_flags.h"
#include "coordinator/generation.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "model/progress.h"
#include "model/tokenizer/tokenizer.h"
#include "worker/backend.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/make_backend.h"
#include "worker/kv_cache.h"

namespace strata::cli {
namespace {

struct RunOptions {
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  SamplingFlags sampling;
  bool chat = false;
  std::string chat_template;  // file; empty: the model's own
  bool json = false;
  int threads = 0;
  int ctx = 0;
  std::string kv_type = "f16";
  std::string isa;       // empty: STRATA_ISA, else CPUID
  bool no_tune = false;
  std::string backend = "cpu";  // cpu, cuda, cuda:N (worker::parse_backend_choice)
};

int fail(const std::string& what, const absl::Status& status) {
  return report_failure("run", what, status);
}

int run(const RunOptions& o) {
  if (o.ctx < 0) {
    std::fprintf(stderr, "strata run: -c must not be negative (0: the "
                         "model's context)\n");
    return 2;
  }
  if (o.prompt.empty() == o.prompt_ids.empty()) {
    std::fprintf(stderr, "strata run: give exactly one of -p and --prompt-ids, "
                         "and not an empty one\n");
    return 2;
  }
  if (o.chat && !o.prompt_ids.empty()) {  // as strata generate refuses it
    std::fprintf(stderr, "strata run: --chat needs -p, not ids\n");
    return 2;
  }
  if (int rc = check_engine_isa("run", o.isa); rc != 0) return rc;
  absl::StatusOr<worker::BackendChoice> choice = worker::parse_backend_choice(o.backend);
  if (!choice.ok()) {
    std::fprintf(stderr, "strata run: --backend: %s\n",
                 std::string(choice.status().message()).c_str());
    return 2;
  }
  auto opened = gguf::GgufModel::open(o.model);
  if (!opened.ok()) return fail(o.model, opened.status());
  std::shared_ptr<const gguf::GgufModel> model(std::move(*opened));
  auto hp = arch::read_hyperparameters(model->first());
  if (!hp.ok()) return fail(o.model, hp.status());
  // As serve and the workers refuse it: positions past the trained context
  // have no meaning the model learned.
  if (o.ctx > hp->n_ctx_train) {
    std::fprintf(stderr, "strata run: -c %d exceeds the model's context_length %d\n", o.ctx,
                 hp->n_ctx_train);
    return 1;
  }

  auto tok = tokenizer::Tokenizer::from_gguf(model->first());
  if (!tok.ok()) return fail(o.model, tok.status());
  std::vector<int32_t> prompt;
  if (!o.prompt_ids.empty()) {
    std::optional<std::vector<int32_t>> ids = parse_prompt_ids(o.prompt_ids);
    if (!ids) {
      std::fprintf(stderr, "strata run: --prompt-ids: not a list of token ids "
                           "(integers from 0 to 2147483647)\n");
      return 2;
    }
    prompt = std::move(*ids);
  } else if (o.chat) {
    // One user turn through the model's template; its turn markers are
    // control tokens, so they are parsed as such in the rendered text (the
    // user's own text may spell none: check_message_text).
    const chat_template::Message turn{"user", o.prompt};
    if (absl::Status st = chat_template::check_message_text(**tok, {&turn, 1}); !st.ok()) {
      return fail("--chat", st);
    }
    auto chat = render_chat_prompt(model->first(), **tok, {&turn, 1},
                                   o.chat_template, true);
    if (!chat.ok()) return fail("--chat", chat.status());
    tokenizer::EncodeOptions encode;
    encode.add_special = !chat->starts_with_bos;
    encode.parse_special = true;
    auto ids = (*tok)->encode(chat->text, encode);
    if (!ids.ok()) return fail("tokenize", ids.status());
    prompt = std::move(*ids);
  } else {
    auto ids = (*tok)->encode(o.prompt);
    if (!ids.ok()) return fail("tokenize", ids.status());
    prompt = std::move(*ids);
  }

  worker::CpuBackendOptions options;
  options.isa = o.isa;
  options.no_tune = o.no_tune;
  options.n_threads = resolve_threads(o.threads);
  options.kv_type = worker::parse_kv_type(o.kv_type).value_or(GgmlType::kF16);  // checked
  // The weight repack (and the tuner's first run): in place on a
  // terminal, else a line at its start and end (model/progress.h).
  StderrProgress progress_output;
  Progress progress(progress_output);
  options.progress = &progress;
  auto backend = worker::make_backend(*choice, model, *hp, {0, hp->n_layer}, options);
  if (!backend.ok()) {
    const bool cuda = choice->kind == worker::BackendChoice::Kind::kCuda;
    return fail(cuda ? "--backend " + o.backend : o.model, backend.status());
  }
  const int n_ctx = o.ctx > 0 ? o.ctx : hp->n_ctx_train;
  if (absl::Status st = (*backend)->add_sequence(0, n_ctx); !st.ok()) {
    return fail("context of " + std::to_string(n_ctx) + " positions", st);
  }

  const SamplingFlags& f = o.sampling;
  coordinator::GenerationParams params;
  params.max_tokens = f.n_predict;
  params.stop = f.stop;
  params.ignore_eos = f.ignore_eos;
  worker::SamplingParams& s = params.sampling;
  s.temperature = f.temperature;
  s.top_k = f.top_k;
  s.top_p = f.top_p;
  s.min_p = f.min_p;
  s.repeat_penalty = f.repeat_penalty;
  s.presence_penalty = f.presence_penalty;
  s.frequency_penalty = f.frequency_penalty;
  s.penalty_last_n = f.repeat_last_n;
  s.logit_bias = worker::LogitBias({f.logit_bias.begin(), f.logit_bias.end()});  // by id
  s.seed = f.seed == SamplingFlags::kRandomSeed ? std::random_device{}() : f.seed;

  auto detok = coordinator::make_detokenizer(**tok);
  coordinator::TextCallback stream;
  if (!o.json) {
    stream = [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
  }
  auto result = coordinator::generate(**backend, 0, prompt, params, *detok,
                                      stream);
  if (!result.ok()) return fail("generate", result.status());
  const coordinator::Timings& t = result->timings;
  GenerationReport report;
  report.prompt_ids = prompt;
  report.ids = result->ids;
  report.text = result->text;
  report.finish_reason = coordinator::finish_reason_name(result->finish);
  report.seed = s.seed;
  report.prompt_tokens = t.prompt_tokens;
  report.generated_tokens = t.generated_tokens;
  report.decode_steps = t.decode_steps;
  report.prefill_s = t.prefill_s;
  report.prefill_tok_s = t.prefill_tok_s();
  report.decode_s = t.decode_s;
  report.decode_tok_s = t.decode_tok_s();
  report.threads = options.n_threads;
  if (o.json) {
    std::cout << generation_json(report);
  } else {
    std::printf("\n");
    std::fflush(stdout);  // the text before the timings, even when piped
    std::fputs(generation_summary(report).c_str(), stderr);
  }
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Generate text from a prompt with a GGUF model (on the CPU; --backend)");
  cmd->add_option("-m,--model", o->model, "GGUF model")->required();
  cmd->add_option("-p,--prompt", o->prompt, "prompt text");
  cmd->add_option("--prompt-ids", o->prompt_ids,
                  "prompt as token ids, e.g. \"1 403 407\" (instead of -p)");
  add_sampling_flags(cmd, &o->sampling);
  CLI::Option* chat = cmd->add_flag("--chat", o->chat,
                                    "wrap -p as one user turn with the model's chat template");
  cmd->add_option("--chat-template", o->chat_template,
                  "template file to use with --chat instead of the model's")
      ->needs(chat);
  cmd->add_flag("--json", o->json, "print one JSON object at the end");
  add_threads_flag(cmd, &o->threads, "threads");
  cmd->add_option("-c,--ctx-size", o->ctx, "context length; 0: the model's (0)")
      ->check(CLI::Range(0, 1 << 24));  // as serve's
  add_kv_type_flag(cmd, &o->kv_type);
  add_kernel_flags(cmd, &o->isa, &o->no_tune);
  cmd->add_option("--backend", o->backend,
                  "where the model runs: cpu, cuda (device 0) or cuda:N (cpu)");
  cmd->callback([o, &exit_code] { exit_code = run(*o); });
}

}  // namespace strata::cli
