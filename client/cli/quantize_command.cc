// `strata quantize IN.gguf OUT.gguf TYPE`: requantizes every weight matrix of
// a model to TYPE so the same real weights can be tested in every format.
// The per-tensor policy (docs/quantize.md) is in requantize.h.
#include <cstdio>
#include <filesystem>
#include <string>

#include "client/cli/commands.h"
#include "client/cli/kernel_flags.h"
#include "client/cli/requantize.h"

namespace strata::cli {
namespace {

struct QuantizeOptions {
  std::string input;
  std::string output;
  std::string type;
  int threads = 0;
};

int run_quantize(const QuantizeOptions& options) {
  std::optional<GgmlType> type = ggml_type_from_name(options.type);
  if (!type) {
    std::fprintf(stderr, "strata quantize: unknown type '%s'\n",
                 options.type.c_str());
    return 2;
  }
  if (!is_quantize_target(*type)) {
    std::fprintf(stderr,
                 "strata quantize: cannot quantize to %s (quantize writes "
                 "only these types: %s)\n",
                 std::string(ggml_type_info(*type).name).c_str(), kQuantizeTargetNames);
    return 2;
  }
  // One file is written: a name such as x-00001-of-00002.gguf would make
  // every reader (ours and llama.cpp's) look for a second part.
  if (gguf::is_split_part_name(options.output)) {
    std::fprintf(stderr,
                 "strata quantize: output %s is named as one part of a split "
                 "model (NAME-0000i-of-0000N.gguf), but quantize writes one "
                 "file; choose another name\n",
                 options.output.c_str());
    return 2;
  }
  std::error_code dir_ec;
  if (std::filesystem::is_directory(options.output, dir_ec)) {
    std::fprintf(stderr, "strata quantize: output %s is a directory; give a file name\n",
                 options.output.c_str());
    return 2;
  }
  // The output replaces its path only after the write; writing over the
  // input (or a link to it) would still destroy the source being read.
  std::error_code ec;
  if (std::filesystem::equivalent(options.input, options.output, ec)) {
    std::fprintf(stderr,
                 "strata quantize: output %s is the input file; choose another "
                 "path\n",
                 options.output.c_str());
    return 2;
  }
  auto model = gguf::GgufModel::open(options.input);
  if (!model.ok()) return report_failure("quantize", options.input, model.status());
  const int threads = resolve_threads(options.threads);
  absl::StatusOr<RequantizeReport> report =
      requantize_model(**model, *type, options.output, threads);
  if (!report.ok()) {
    std::fprintf(stderr, "strata quantize: %s\n",
                 std::string(report.status().message()).c_str());
    return 1;
  }
  std::printf("%s -> %s (%s): %zu tensors quantized, %zu kept, %zu fallback; "
              "%.2f MiB -> %.2f MiB\n",
              options.input.c_str(), options.output.c_str(),
              options.type.c_str(), report->quantized, report->kept,
              report->fallback, static_cast<double>(report->bytes_in) / 1048576.0,
              static_cast<double>(report->bytes_out) / 1048576.0);
  return 0;
}

}  // namespace

void add_quantize_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<QuantizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Requantize a GGUF model's weight matrices to another type");
  cmd->add_option("input", options->input, "source GGUF")->required();
  cmd->add_option("output", options->output, "GGUF to write")->required();
  cmd->add_option("type", options->type,
                  std::string("ggml type: ") + kQuantizeTargetNames)
      ->required();
  add_threads_flag(cmd, &options->threads, "threads");
  cmd->callback([options, &exit_code] { exit_code = run_quantize(*options); });
}

}  // namespace strata::cli
