// `strata synth --shape NAME --type TYPE -o FILE.gguf [--blocks N]
// [--seed S] [--tokenizer-from GGUF]`: a random-weight GGUF of a named model
// shape (model/synthetic_model.h; docs/synth.md), for tests and benchmarks
// that need a big model's bytes and layout, not its answers.
//
// `strata synth --sparse --shape PUBLISHED -o FILE.gguf`: the header-only
// GGUF of a published model (model/published_models.h: the real tensor
// table and per-tensor types of e.g. Llama 3.3 70B Q4_K_M), its data a hole
// taking no disk: for `strata plan` and the deployment checks.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "client/cli/commands.h"
#include "model/gguf_reader.h"
#include "model/published_models.h"
#include "model/synthetic_model.h"

namespace strata::cli {
namespace {

struct SynthCommandOptions {
  std::string shape;
  std::string type = "Q4_0";
  std::string output;
  int blocks = 0;
  uint64_t seed = 1;
  std::string tokenizer_from;
  bool sparse = false;
  bool random_options_given =
      false;  // --type, --blocks, --seed, --tokenizer-from
};

int run_sparse(const SynthCommandOptions& options) {
  absl::StatusOr<synth::PublishedModel> model =
      synth::published_model(options.shape);
  if (!model.ok()) {
    std::fprintf(stderr, "strata synth: --shape: %s\n",
                 std::string(model.status().message()).c_str());
    return 2;
  }
  if (options.random_options_given) {
    std::fprintf(stderr,
                 "strata synth: --sparse writes the published tensor types "
                 "and every block: --type, --blocks, --seed and "
                 "--tokenizer-from do not apply\n");
    return 2;
  }
  absl::StatusOr<uint64_t> bytes =
      synth::write_header_only(*model, options.output);
  if (!bytes.ok()) {
    std::fprintf(stderr, "strata synth: %s\n",
                 std::string(bytes.status().message()).c_str());
    return 1;
  }
  std::printf(
      "%s: %s, %zu tensors, %.2f GB of tensor data (a hole: "
      "header only)\n",
      options.output.c_str(), model->name.c_str(), model->tensors.size(),
      static_cast<double>(*bytes) / 1e9);
  return 0;
}

int run_synth(const SynthCommandOptions& options) {
  if (gguf::is_split_part_name(options.output)) {
    std::fprintf(stderr,
                 "strata synth: -o %s is named as one part of a split model "
                 "(NAME-0000i-of-0000N.gguf), but synth writes one file\n",
                 options.output.c_str());
    return 2;
  }
  std::error_code ec;
  if (std::filesystem::is_directory(options.output, ec)) {
    std::fprintf(stderr,
                 "strata synth: -o %s is a directory; give a file name\n",
                 options.output.c_str());
    return 2;
  }
  if (options.sparse) return run_sparse(options);
  if (synth::published_model(options.shape).ok()) {
    std::fprintf(stderr,
                 "strata synth: --shape %s is a published model's layout "
                 "(mixed tensor types): it is written header-only, with "
                 "--sparse\n",
                 options.shape.c_str());
    return 2;
  }
  // Q4_K_M: llama.cpp's per-tensor mix of Q4_K with Q6_K, Q5_K and Q8_0
  // (SynthOptions::mix).
  // (Any case, as the single types' names.)
  const bool q4_k_m = absl::EqualsIgnoreCase(options.type, "Q4_K_M");
  std::optional<GgmlType> type =
      q4_k_m ? GgmlType::kQ4_K : ggml_type_from_name(options.type);
  if (!type) {
    std::fprintf(stderr, "strata synth: --type: unknown type '%s'\n",
                 options.type.c_str());
    return 2;
  }
  synth::SynthOptions o;
  o.shape = options.shape;
  o.type = *type;
  if (q4_k_m) o.mix = synth::SynthOptions::Mix::kQ4_K_M;
  o.blocks = options.blocks;
  o.seed = options.seed;
  o.tokenizer_from = options.tokenizer_from;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<synth::SynthReport> report =
      synth::write_synthetic_model(o, options.output);
  if (!report.ok()) {
    std::fprintf(stderr, "strata synth: %s\n",
                 std::string(report.status().message()).c_str());
    return report.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const double mib = static_cast<double>(report->tensor_bytes) / 1048576.0;
  const std::string fallback =
      report->fallback_tensors == 0
          ? std::string()
          : " (" + std::to_string(report->fallback_tensors) +
                " written Q8_0: rows not a multiple of the type's block)";
  std::printf(
      "%s: %s %s, %d blocks, %d tokens, %zu tensors%s, %.2f MiB in %.2f s "
      "(%.0f MiB/s)\n",
      options.output.c_str(), options.shape.c_str(), options.type.c_str(),
      report->n_layer, report->n_vocab, report->n_tensors, fallback.c_str(),
      mib, seconds, seconds > 0 ? mib / seconds : 0.0);
  return 0;
}

}  // namespace

void add_synth_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<SynthCommandOptions>();
  std::string shapes;
  for (const synth::Shape& s : synth::shapes()) {
    shapes += (shapes.empty() ? "" : ", ") + std::string(s.name);
  }
  std::string published;
  for (const std::string& name : synth::published_model_names()) {
    published += (published.empty() ? "" : ", ") + name;
  }
  CLI::App* cmd = app.add_subcommand(
      "synth",
      "Write a random-weight GGUF of a named model shape (tests, benchmarks)");
  cmd->add_option("--shape", options->shape,
                  "model shape: " + shapes + "; with --sparse: " + published)
      ->required();
  cmd->add_flag("--sparse", options->sparse,
                "header-only GGUF of a published model (its data a hole): "
                "for strata plan");
  CLI::Option* type_option =
      cmd->add_option("--type", options->type,
                      "ggml type of the matrices: F32, F16, Q4_0, Q4_1, Q5_0, "
                      "Q8_0, Q4_K, Q5_K, Q6_K; or Q4_K_M (llama.cpp's mix of "
                      "Q4_K and Q6_K, Q5_K, Q8_0)")
          ->capture_default_str();
  cmd->add_option("-o,--output", options->output, "GGUF to write")->required();
  CLI::Option* blocks_option =
      cmd->add_option("--blocks", options->blocks,
                      "write only the first N blocks (block_count N); 0: all")
          ->capture_default_str();
  CLI::Option* seed_option =
      cmd->add_option("--seed", options->seed,
                      "random seed (same seed, same bytes)")
          ->capture_default_str();
  CLI::Option* tokenizer_option = cmd->add_option(
      "--tokenizer-from", options->tokenizer_from,
      "copy the tokenizer.* keys of this GGUF (default: a built-in "
      "byte-level vocabulary padded to the shape's size)");
  cmd->callback([=, &exit_code] {
    options->random_options_given =
        type_option->count() + blocks_option->count() + seed_option->count() +
            tokenizer_option->count() >
        0;
    exit_code = run_synth(*options);
  });
}

}  // namespace strata::cli
