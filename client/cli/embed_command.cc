// `strata embed`: embeddings from a strata server (Client::embed).
//
//   strata embed --server HOST:PORT [--pooling mean|last] [--no-normalize]
//                [--model NAME] TEXT...
//     prints one JSON object: {"pooling", "prompt_tokens": [n, ...],
//     "embeddings": [[...], ...]} (one vector per TEXT, in order; each
//     float in its shortest form that reads back the same).
//
// Exit status: 0 done; 1 the server failed (one line naming it and the
// gRPC status); 2 usage.
#include <charconv>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "client/cli/commands.h"
#include "client/cli/remote.h"

namespace strata::cli {
namespace {

struct EmbedFlags {
  ServerFlags server;
  std::string model;
  std::string pooling;  // "", "mean" or "last"
  bool no_normalize = false;
  std::vector<std::string> texts;
};

int run_embed(const EmbedFlags& flags) {
  for (const std::string& t : flags.texts) {
    if (!utf8_or_report("embed", "TEXT", t)) return 2;
  }
  std::unique_ptr<Client> client = connect_or_report(flags.server);
  if (client == nullptr) return 1;
  EmbedOptions options;
  options.model = flags.model;
  options.pooling = flags.pooling == "mean"   ? Pooling::kMean
                    : flags.pooling == "last" ? Pooling::kLast
                                              : Pooling::kDefault;
  options.normalize = !flags.no_normalize;
  absl::StatusOr<EmbedResult> result = client->embed(flags.texts, options);
  if (!result.ok()) return report_error(flags.server.server, result.status());
  std::string out = "{\"pooling\":\"" + result->pooling + "\",\"prompt_tokens\":[";
  for (size_t i = 0; i < result->prompt_tokens.size(); ++i) {
    out += (i > 0 ? "," : "") + std::to_string(result->prompt_tokens[i]);
  }
  out += "],\"embeddings\":[";
  char buf[32];
  for (size_t i = 0; i < result->embeddings.size(); ++i) {
    out += i > 0 ? ",[" : "[";
    const std::vector<float>& v = result->embeddings[i];
    for (size_t k = 0; k < v.size(); ++k) {
      if (k > 0) out += ',';
      const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v[k]);
      out.append(buf, ec == std::errc() ? end : buf);
    }
    out += ']';
  }
  out += "]}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

void add_embed_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<EmbedFlags>();
  CLI::App* cmd = app.add_subcommand(
      "embed", "Print the embeddings a strata server gives for texts (JSON)");
  add_server_flags(cmd, flags->server);
  cmd->add_option("--model", flags->model, "served model name (default: the served one)");
  cmd->add_option("--pooling", flags->pooling, "mean or last (default: the model's, else last)")
      ->check(CLI::IsMember({"mean", "last"}));
  cmd->add_flag("--no-normalize", flags->no_normalize,
                "the pooled vectors as they are (default: L2-normalized)");
  cmd->add_option("texts", flags->texts, "texts to embed, one vector each")->required();
  cmd->callback([flags, &exit_code] { exit_code = run_embed(*flags); });
}

}  // namespace strata::cli
