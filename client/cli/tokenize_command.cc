// `strata tokenize` and `strata detokenize`: the model's own tokenizer
// (built from the GGUF's tokenizer.* keys) on the command line.
//
//   strata tokenize -m MODEL [--no-bos] [--parse-special] [--pieces]
//                   [--strict-utf8] (TEXT | --stdin)
//     prints the ids on one line, space-separated; BOS/EOS are added as the
//     model's metadata says unless --no-bos. --stdin reads the raw bytes to
//     end of input (nothing stripped, not even a final newline). --pieces
//     prints one token per line instead: the id, a tab, the piece (C-style
//     escapes for control characters and for bytes that are not UTF-8).
//   strata detokenize -m MODEL [--render-special] ID...
//     prints the text (invalid UTF-8 replaced by U+FFFD); a newline follows
//     only when standard output is a terminal.
//   strata tokenize --server HOST:PORT [--no-bos] [--parse-special]
//                   [--pieces] (TEXT | --stdin)
//   strata detokenize --server HOST:PORT ID...
//     the same with the tokenizer of the model a strata server serves
//     (pieces as -m prints them: the server sends each token's bytes).
//
// Exit status: 0 done; 1 the model (a message names the bad key) or an id
// was refused, or the server failed (one line naming it and the gRPC
// status); 2 usage.
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "client/cli/commands.h"
#include "client/cli/text_input.h"
#include "client/cli/remote.h"
#include "model/gguf_reader.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"

namespace strata::cli {
namespace {

using tokenizer::TokenId;
using tokenizer::Tokenizer;

struct TokenizeOptions {
  std::string model;
  ServerFlags server;  // set: ask the server instead of loading a model
  std::string text;
  bool has_text = false;
  bool from_stdin = false;
  bool no_bos = false;
  bool parse_special = false;
  bool pieces = false;
  bool strict_utf8 = false;
};

struct DetokenizeOptions {
  std::string model;
  ServerFlags server;
  std::vector<std::string> ids;
  bool render_special = false;
};

std::unique_ptr<Tokenizer> load(const char* command, const std::string& path) {
  auto model = gguf::GgufModel::open(path);
  if (!model.ok()) {  // the reader's message names the file
    std::fprintf(stderr, "strata %s: %s\n", command,
                 std::string(model.status().message()).c_str());
    return nullptr;
  }
  auto tok = Tokenizer::from_gguf((*model)->first());
  if (!tok.ok()) {
    std::fprintf(stderr, "strata %s: %s: %s\n", command, path.c_str(),
                 std::string(tok.status().message()).c_str());
    return nullptr;
  }
  return *std::move(tok);
}

// A piece for display: valid UTF-8 as is, except backslash and control
// characters (C escapes); stray bytes as \xNN.
std::string escape_piece(std::string_view piece) {
  std::string out;
  while (!piece.empty()) {
    const size_t bad = tokenizer::unicode::find_invalid_utf8(piece);
    const std::string_view good = piece.substr(0, bad);
    for (char c : good) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c == '\r') {
        out += "\\r";
      } else if (u < 0x20 || u == 0x7F) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02X", u);
        out += buf;
      } else {
        out.push_back(c);
      }
    }
    if (bad == std::string_view::npos) break;
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02X",
                  static_cast<unsigned char>(piece[bad]));
    out += buf;
    piece.remove_prefix(bad + 1);
  }
  return out;
}

// Exactly one of -m and --server; else prints why and returns false.
bool check_source(const char* command, const std::string& model,
                  const ServerFlags& server) {
  if (model.empty() == server.server.empty()) {
    std::fprintf(stderr, "strata %s: give -m MODEL or --server HOST:PORT "
                         "(exactly one)\n", command);
    return false;
  }
  return true;
}

int run_remote_tokenize(const TokenizeOptions& options,
                        const std::string& text) {
  if (options.strict_utf8) {
    std::fprintf(stderr,
                 "strata tokenize: --strict-utf8 needs -m (a local model)\n");
    return 2;
  }
  std::unique_ptr<Client> client = connect_or_report(options.server);
  if (client == nullptr) return 1;
  strata::TokenizeOptions request;
  request.add_special = !options.no_bos;
  request.parse_special = options.parse_special;
  auto result = client->tokenize(text, request);
  if (!result.ok()) {
    return report_error(options.server.server, result.status());
  }
  std::string out;
  for (size_t i = 0; i < result->ids.size(); ++i) {
    if (options.pieces) {
      out += std::to_string(result->ids[i]);
      out += '\t';
      if (i < result->pieces.size()) out += escape_piece(result->pieces[i]);
      out += '\n';
    } else {
      if (i > 0) out += ' ';
      out += std::to_string(result->ids[i]);
    }
  }
  if (!options.pieces) out += '\n';
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int run_tokenize(const TokenizeOptions& options) {
  if (options.has_text == options.from_stdin) {
    std::fprintf(stderr,
                 "strata tokenize: give the text as an argument or --stdin "
                 "(exactly one)\n");
    return 2;
  }
  if (!check_source("tokenize", options.model, options.server)) return 2;
  std::string text = options.text;
  if (options.from_stdin) {
    absl::StatusOr<std::string> in = read_stream(stdin, "stdin");
    if (!in.ok()) {
      std::fprintf(stderr, "strata tokenize: %s\n", std::string(in.status().message()).c_str());
      return 1;
    }
    text = std::move(*in);
  }
  if (!options.server.server.empty()) {
    // -m tokenizes any bytes; the server, UTF-8 text.
    if (!utf8_or_report("tokenize", "text", text)) return 2;
    return run_remote_tokenize(options, text);
  }
  std::unique_ptr<Tokenizer> tok = load("tokenize", options.model);
  if (tok == nullptr) return 1;
  tokenizer::EncodeOptions encode;
  encode.add_special = !options.no_bos;
  encode.parse_special = options.parse_special;
  encode.strict_utf8 = options.strict_utf8;
  auto ids = tok->encode(text, encode);
  if (!ids.ok()) {
    std::fprintf(stderr, "strata tokenize: %s\n",
                 std::string(ids.status().message()).c_str());
    return 1;
  }
  std::string out;
  for (size_t i = 0; i < ids->size(); ++i) {
    const TokenId id = (*ids)[i];
    if (options.pieces) {
      out += std::to_string(id);
      out += '\t';
      out += escape_piece(tok->piece(id, /*render_special=*/true));
      out += '\n';
    } else {
      if (i > 0) out += ' ';
      out += std::to_string(id);
    }
  }
  if (!options.pieces) out += '\n';
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int run_detokenize(const DetokenizeOptions& options) {
  std::vector<TokenId> ids;
  for (const std::string& arg : options.ids) {
    TokenId id = 0;
    const auto [end, ec] =
        std::from_chars(arg.data(), arg.data() + arg.size(), id);
    if (ec != std::errc() || end != arg.data() + arg.size()) {
      std::fprintf(stderr, "strata detokenize: '%s' is not a token id\n",
                   arg.c_str());
      return 2;
    }
    ids.push_back(id);
  }
  if (!check_source("detokenize", options.model, options.server)) return 2;
  if (!options.server.server.empty()) {
    std::unique_ptr<Client> client = connect_or_report(options.server);
    if (client == nullptr) return 1;
    auto text = client->detokenize(ids, "", options.render_special);
    if (!text.ok()) return report_error(options.server.server, text.status());
    std::fwrite(text->data(), 1, text->size(), stdout);
    if (isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
    return 0;
  }
  std::unique_ptr<Tokenizer> tok = load("detokenize", options.model);
  if (tok == nullptr) return 1;
  tokenizer::DecodeOptions decode;
  decode.render_special = options.render_special;
  auto text = tok->decode(ids, decode);
  if (!text.ok()) {
    std::fprintf(stderr, "strata detokenize: %s\n",
                 std::string(text.status().message()).c_str());
    return 1;
  }
  std::fwrite(text->data(), 1, text->size(), stdout);
  if (isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
  return 0;
}

}  // namespace

void add_tokenize_commands(CLI::App& app, int& exit_code) {
  auto tok = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Print the token ids of a text, with the model's tokenizer");
  cmd->add_option("-m,--model", tok->model, "GGUF file (first part if split)");
  add_server_flags(cmd, tok->server, /*required=*/false);
  cmd->add_option("text", tok->text, "Text to tokenize (or --stdin)");
  cmd->add_flag("--stdin", tok->from_stdin,
                "Read the text from standard input, raw, to end of input");
  cmd->add_flag("--no-bos", tok->no_bos,
                "Do not add the BOS/EOS tokens the model's metadata asks for");
  cmd->add_flag("--parse-special", tok->parse_special,
                "Match control tokens' text (e.g. <|im_start|>) in the input");
  cmd->add_flag("--pieces", tok->pieces,
                "One token per line: id, tab, the piece it stands for");
  cmd->add_flag("--strict-utf8", tok->strict_utf8,
                "Refuse input that is not valid UTF-8 (default: tokenize it "
                "as llama.cpp does)");
  cmd->callback([tok, cmd, &exit_code] {
    tok->has_text = cmd->count("text") > 0;
    exit_code = run_tokenize(*tok);
  });

  auto detok = std::make_shared<DetokenizeOptions>();
  CLI::App* dcmd = app.add_subcommand(
      "detokenize", "Print the text of token ids, with the model's tokenizer");
  dcmd->add_option("-m,--model", detok->model,
                   "GGUF file (first part if split)");
  add_server_flags(dcmd, detok->server, /*required=*/false);
  dcmd->add_option("ids", detok->ids, "Token ids")->required();
  dcmd->add_flag("--render-special", detok->render_special,
                 "Print control tokens' text (otherwise they print nothing)");
  dcmd->callback([detok, &exit_code] { exit_code = run_detokenize(*detok); });
}

}  // namespace strata::cli
