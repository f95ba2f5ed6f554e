// `strata generate --server` against the real single-node server
// (`strata serve MODEL.gguf --listen HOST:PORT`) gives the ids `strata run`
// gives for the same prompt, on one and two stages. Skips, saying why, when
// the model or the serve verb is absent or `strata run` refuses the model.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "model/gguf_reader.h"
#include "strata/client.h"
#include "tests/client/cli_test_util.h"
#include "tests/test_paths.h"

extern char** environ;

namespace strata::testing {
namespace {

// A port nothing listens on now (the kernel's choice; a race with other
// processes is possible but unlikely).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// `strata serve` in a child process, ended (SIGTERM, then SIGKILL) when
// the guard goes.
class ServeProcess {
 public:
  // Runs `strata serve ARGS...`, its stdout and stderr into `log`.
  ServeProcess(std::vector<std::string> args, const std::filesystem::path& log) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    args.insert(args.begin(), {STRATA_BINARY, "serve"});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) !=
        0) {
      pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&actions);
  }
  ~ServeProcess() {
    if (pid_ <= 0 || exited()) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 100 && !exited(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!exited()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  bool started() const { return pid_ > 0; }
  bool exited() {
    if (done_) return true;
    done_ = ::waitpid(pid_, nullptr, WNOHANG) == pid_;
    return done_;
  }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
};

const char* const kPrompts[] = {"Once upon a time", "The little dog"};

std::string generate_args(const char* prompt) {
  return std::string(" -p ") + quote(prompt) + " -n 24 --json";
}

// A folder of this test's own: ctest runs this file's tests as processes
// at once, and files named the same in TempDir() ("out", "err") were
// overwritten by another test's (a test once read the other's stderr).
std::filesystem::path private_dir() {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    ("strata_" + std::string(t->name()) + "_" +
                                     std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// Starts `strata serve MODEL` with `workers` stages and compares, for a few
// prompts, `strata generate --server --json` with `strata run --json`.
void expect_serve_matches_run(const std::filesystem::path& model, int workers) {
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " absent";
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      ("strata_serve_cli_" + std::to_string(::getpid()) + "_" +
       std::to_string(workers));
  std::filesystem::create_directories(dir);
  if (run_strata(dir, "serve --help").status != 0) {
    GTEST_SKIP() << "this strata has no `serve` verb yet";
  }
  // The single-process answers first: when `strata run` itself refuses the
  // model there is nothing to compare with (its own tests say why).
  std::vector<nlohmann::json> expected;
  for (const char* prompt : kPrompts) {
    const CommandResult local = run_strata(
        dir, "run -m " + quote(model.string()) + " -t 1" + generate_args(prompt));
    if (local.status != 0) {
      GTEST_SKIP() << "strata run fails on " << model << ": " << local.err;
    }
    expected.push_back(nlohmann::json::parse(local.out));
  }
  const int port = free_port();
  ASSERT_GT(port, 0);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  ServeProcess serve({model.string(), "--listen", address, "--workers",
                      std::to_string(workers), "-t", "1", "-c", "1024"},
                     dir / "serve.log");
  ASSERT_TRUE(serve.started());

  // Ready when Health says SERVING.
  auto client = Client::connect(address);
  ASSERT_TRUE(client.ok()) << client.status();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool ready = false;
  while (!ready && std::chrono::steady_clock::now() < until) {
    ASSERT_FALSE(serve.exited()) << "strata serve exited:\n"
                                 << slurp(dir / "serve.log");
    auto health = (*client)->health();
    ready = health.ok() && health->state == ServingState::kServing;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(ready) << "no SERVING within 60 s:\n" << slurp(dir / "serve.log");

  for (size_t i = 0; i < std::size(kPrompts); ++i) {
    SCOPED_TRACE(kPrompts[i]);
    const CommandResult remote = run_strata(
        dir, "generate --server " + address + generate_args(kPrompts[i]));
    ASSERT_EQ(remote.status, 0) << remote.err;
    const nlohmann::json r = nlohmann::json::parse(remote.out);
    const nlohmann::json& l = expected[i];
    EXPECT_EQ(r["prompt_ids"], l["prompt_ids"]);
    EXPECT_EQ(r["ids"], l["ids"]);
    EXPECT_EQ(r["text"], l["text"]);
    EXPECT_EQ(r["finish_reason"], l["finish_reason"]);
  }
  // Pieces over the server print as the local tokenizer prints them, byte
  // tokens (partial UTF-8) included: the proto carries them as bytes.
  const std::string text = quote("Hi there \xC3\xBC \xE2\x82\xAC!");
  const CommandResult local_pieces =
      run_strata(dir, "tokenize -m " + quote(model.string()) + " --pieces " + text);
  const CommandResult remote_pieces =
      run_strata(dir, "tokenize --server " + address + " --pieces " + text);
  ASSERT_EQ(local_pieces.status, 0) << local_pieces.err;
  ASSERT_EQ(remote_pieces.status, 0) << remote_pieces.err;
  EXPECT_EQ(remote_pieces.out, local_pieces.out);
  // Detokenizing over the server prints what -m prints, with and without
  // the control tokens' text (the BOS here).
  for (const char* flags : {"", " --render-special"}) {
    const std::string ids = std::string(flags) + " 1 403 407";
    const CommandResult local_text =
        run_strata(dir, "detokenize -m " + quote(model.string()) + ids);
    const CommandResult remote_text = run_strata(dir, "detokenize --server " + address + ids);
    ASSERT_EQ(local_text.status, 0) << local_text.err;
    EXPECT_EQ(remote_text.status, 0) << remote_text.err;
    EXPECT_EQ(remote_text.out, local_text.out) << flags;
  }
  // Embeddings: `strata embed` (text) gives what Client::embed_ids gives
  // for the text's ids (the server's tokenizer), bit for bit, raw and
  // normalized; the normalized vector is the raw one over its norm.
  {
    const CommandResult raw_cli =
        run_strata(dir, "embed --server " + address + " --pooling mean --no-normalize 'Hi there'");
    const CommandResult unit_cli = run_strata(dir, "embed --server " + address + " 'Hi there'");
    ASSERT_EQ(raw_cli.status, 0) << raw_cli.err;
    ASSERT_EQ(unit_cli.status, 0) << unit_cli.err;
    const nlohmann::json raw_json = nlohmann::json::parse(raw_cli.out);
    const nlohmann::json unit_json = nlohmann::json::parse(unit_cli.out);
    EXPECT_EQ(raw_json["pooling"], "mean");
    EXPECT_EQ(unit_json["pooling"], "last");  // neither test model names one
    TokenizeOptions as_served;  // as the server tokenizes an embedding input
    as_served.add_special = true;
    as_served.parse_special = true;
    auto ids = (*client)->tokenize("Hi there", as_served);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EmbedOptions mean;
    mean.pooling = Pooling::kMean;
    mean.normalize = false;
    auto raw = (*client)->embed_ids({ids->ids}, mean);
    ASSERT_TRUE(raw.ok()) << raw.status();
    ASSERT_EQ(raw->embeddings.size(), 1u);
    EXPECT_EQ(raw_json["prompt_tokens"][0], static_cast<int>(ids->ids.size()));
    ASSERT_EQ(raw_json["embeddings"][0].size(), raw->embeddings[0].size());
    for (size_t k = 0; k < raw->embeddings[0].size(); ++k) {
      EXPECT_EQ(raw_json["embeddings"][0][k].get<float>(), raw->embeddings[0][k]) << k;
    }
    EmbedOptions last;
    last.pooling = Pooling::kLast;
    last.normalize = false;
    auto last_raw = (*client)->embed({"Hi there"}, last);
    ASSERT_TRUE(last_raw.ok()) << last_raw.status();
    double norm = 0;
    for (float x : last_raw->embeddings[0]) norm += double{x} * x;
    norm = std::sqrt(norm);
    ASSERT_GT(norm, 0);
    ASSERT_EQ(unit_json["embeddings"][0].size(), last_raw->embeddings[0].size());
    for (size_t k = 0; k < last_raw->embeddings[0].size(); ++k) {
      EXPECT_NEAR(unit_json["embeddings"][0][k].get<float>(), last_raw->embeddings[0][k] / norm,
                  1e-6)
          << k;
    }
  }
  // Messages: served when `run --chat` takes them (SmolLM2's template);
  // for a model without a chat template (stories260K) the served model
  // cannot take them, FAILED_PRECONDITION naming why (not NOT_FOUND).
  const CommandResult local_chat =
      run_strata(dir, "run -m " + quote(model.string()) + " -t 1 --chat -p hi -n 2");
  const CommandResult remote_chat =
      run_strata(dir, "generate --server " + address + " --chat -p hi -n 2");
  if (local_chat.err.find("no tokenizer.chat_template") != std::string::npos) {
    EXPECT_EQ(remote_chat.status, 1) << remote_chat.err;
    EXPECT_NE(remote_chat.err.find(
                  "FAILED_PRECONDITION: messages: the model has no tokenizer.chat_template"),
              std::string::npos)
        << remote_chat.err;
  } else {
    EXPECT_EQ(local_chat.status, 0) << local_chat.err;
    EXPECT_EQ(remote_chat.status, 0) << remote_chat.err;
    // `strata chat`: a line the server refuses as a message (it spells a
    // control token) is skipped, saying so, and the chat goes on: three
    // lines, two replies.
    const CommandResult chat = run_strata(dir, "chat --server " + address + " -n 2 --temp 0",
                                          "hello\nx<|im_end|>y\nsay hi\n");
    EXPECT_EQ(chat.status, 0) << chat.err;
    EXPECT_NE(chat.err.find("strata chat: line skipped: messages[2].content: contains the "
                            "text of control token '<|im_end|>'"),
              std::string::npos)
        << chat.err;
    EXPECT_EQ(std::count(chat.out.begin(), chat.out.end(), '\n'), 2) << chat.out;
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

std::filesystem::path stories260k() {
  return shared_dir() / "models/stories260K.gguf";
}

TEST(ServeCli, GenerateOverServeGivesTheIdsOfRun) {
  expect_serve_matches_run(stories260k(), 1);
}

TEST(ServeCli, GenerateOverTwoStagesGivesTheIdsOfRun) {
  expect_serve_matches_run(stories260k(), 2);
}

// A real model (scripts/fetch-models.sh), split in two stages.
TEST(ServeCli, SmolLM2OverTwoStagesGivesTheIdsOfRun) {
  expect_serve_matches_run(models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf", 2);
}

// Out-of-range values are refused at parse time (exit 2), each naming its
// flag, before the model is opened or a port bound; so is a trace path that
// cannot be written (exit 1, before listening).
TEST(ServeCli, BadFlagsAreRefusedNamingTheFlag) {
  const std::filesystem::path dir = private_dir();
  const std::string model = stories260k().string();
  for (const auto& [args, flag] :
       std::vector<std::pair<std::string, std::string>>{{"--workers 0", "--workers"},
                                                        {"--max-sequences 2000", "--max-sequences"},
                                                        {"-c -5", "--ctx-size"},
                                                        {"-t -1", "--threads"},
                                                        {"--prefill-chunk-beside-decode half",
                                                         "--prefill-chunk-beside-decode"},
                                                        {"--prefill-chunk-beside-decode -1",
                                                         "--prefill-chunk-beside-decode"},
                                                        {"--prefill-chunk-beside-decode 4097",
                                                         "--prefill-chunk-beside-decode"}}) {
    const CommandResult r = run_strata(dir, "serve " + quote(model) + " " + args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find(flag), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(r.out.find("listening"), std::string::npos) << args;
  }
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " absent (trace case)";
  const CommandResult trace =
      run_strata(dir, "serve " + quote(model) + " --trace /nonexistent-dir/t.jsonl");
  EXPECT_EQ(trace.status, 1) << trace.err;
  EXPECT_NE(trace.err.find("trace: cannot write /nonexistent-dir/t.jsonl"), std::string::npos)
      << trace.err;
  EXPECT_EQ(trace.out.find("listening"), std::string::npos);
}

// A file whose metadata passes but whose weights fail the shard's checks
// (blk.0.attn_q.weight's second extent halved in its header): serve exits 1
// naming the tensor, before listening. It used to wait (10 minutes) for a
// pipeline that could never load, silent and not listening.
TEST(ServeCli, WeightsThatCannotLoadExitOneAtOnce) {
  const std::filesystem::path src = stories260k();
  if (!std::filesystem::exists(src)) GTEST_SKIP() << src << " absent";
  std::string bytes = slurp(src);
  const std::string name = "blk.0.attn_q.weight";
  const size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  const size_t extent1 = at + name.size() + 4 + 8;  // past n_dims (u32) and extent 0 (u64)
  uint64_t rows = 0;
  std::memcpy(&rows, bytes.data() + extent1, 8);
  ASSERT_EQ(rows, 64u);
  rows = 32;
  std::memcpy(bytes.data() + extent1, &rows, 8);
  const std::filesystem::path dir = private_dir();
  const std::filesystem::path bad = dir / "attn_q_halved.gguf";
  std::ofstream(bad, std::ios::binary) << bytes;

  // timeout: a regression fails (status 124) instead of hanging the suite.
  const std::string cmd = "timeout 120 " + quote(STRATA_BINARY) + " serve " +
                          quote(bad.string()) + " > " + quote((dir / "out").string()) +
                          " 2> " + quote((dir / "err").string());
  const int raw = std::system(cmd.c_str());
  const int status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  const std::string err = slurp(dir / "err");
  EXPECT_EQ(status, 1) << err;
  EXPECT_NE(err.find("blk.0.attn_q.weight: shape [64, 32], expected [64, 64]"), std::string::npos)
      << err;
  EXPECT_EQ(slurp(dir / "out").find("listening"), std::string::npos);
}

// A model whose tokenizer cannot load: `strata run` exits 1 with one line
// naming the file and the missing key (it used to say only "tokenizer").
TEST(ServeCli, RunNamesTheModelWhoseTokenizerIsMissing) {
  const std::filesystem::path src = stories260k();
  if (!std::filesystem::exists(src)) GTEST_SKIP() << src << " absent";
  std::string bytes = slurp(src);
  const std::string key = "tokenizer.ggml.model";
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  bytes[at + key.size() - 1] = 'X';  // "tokenizer.ggml.modeX": the key is gone
  const std::filesystem::path dir = private_dir();
  const std::filesystem::path bad = dir / "no_tokenizer_model.gguf";
  std::ofstream(bad, std::ios::binary) << bytes;

  const std::string cmd = "timeout 120 " + quote(STRATA_BINARY) + " run -m " +
                          quote(bad.string()) + " -p hi -n 1 > " +
                          quote((dir / "out").string()) + " 2> " + quote((dir / "err").string());
  const int raw = std::system(cmd.c_str());
  const int status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  const std::string err = slurp(dir / "err");
  EXPECT_EQ(status, 1) << err;
  EXPECT_NE(err.find(bad.string() + ": tokenizer.ggml.model: missing"), std::string::npos)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

// Model files the local verbs are given: usage errors exit 2 before any
// work, and names from a file never reach the terminal raw.
TEST(ServeCli, LocalVerbsRefuseWhatCannotWork) {
  const std::filesystem::path src = stories260k();
  if (!std::filesystem::exists(src)) GTEST_SKIP() << src << " absent";
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "strata_local_verbs";
  std::filesystem::create_directories(dir);
  const std::string model = quote(src.string());
  // --chat wraps -p; with ids it would be silently ignored.
  const CommandResult chat_ids = run_strata(dir, "run -m " + model + " --prompt-ids '1 403' --chat");
  EXPECT_EQ(chat_ids.status, 2) << chat_ids.err;
  EXPECT_NE(chat_ids.err.find("--chat needs -p, not ids"), std::string::npos) << chat_ids.err;
  // A context past the model's is refused, as serve refuses it.
  const CommandResult long_ctx = run_strata(dir, "run -m " + model + " -p hi -n 1 -c 4096");
  EXPECT_EQ(long_ctx.status, 1) << long_ctx.err;
  EXPECT_NE(long_ctx.err.find("-c 4096 exceeds the model's context_length 2048"),
            std::string::npos)
      << long_ctx.err;
  // An empty --listen is refused, not read as "the default address".
  const CommandResult no_listen = run_strata(dir, "serve " + model + " --listen ''");
  EXPECT_EQ(no_listen.status, 2) << no_listen.err;
  EXPECT_NE(no_listen.err.find("--listen: empty"), std::string::npos) << no_listen.err;
  // Q8_1 is an activation type, IQ4_NL a weight type quantize does not
  // write: both refused, saying which types it writes.
  for (const char* type : {"Q8_1", "IQ4_NL"}) {
    const CommandResult r =
        run_strata(dir, "quantize " + model + " " + quote((dir / "t.gguf").string()) + " " + type);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find(std::string("cannot quantize to ") + type + " (quantize writes only"),
              std::string::npos)
        << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "t.gguf"));
  }
  // A directory as the output is refused before any work.
  const CommandResult to_dir = run_strata(dir, "quantize " + model + " " + quote(dir.string()) + " Q8_0");
  EXPECT_EQ(to_dir.status, 2) << to_dir.err;
  EXPECT_NE(to_dir.err.find("is a directory"), std::string::npos) << to_dir.err;
  // One file named as part 1 of 2 would send every reader after part 2.
  const std::string part = (dir / "x-00001-of-00002.gguf").string();
  const CommandResult split = run_strata(dir, "quantize " + model + " " + quote(part) + " Q8_0");
  EXPECT_EQ(split.status, 2) << split.err;
  EXPECT_NE(split.err.find("named as one part of a split model"), std::string::npos) << split.err;
  EXPECT_FALSE(std::filesystem::exists(part));
  // ... while a one-part name is an ordinary file.
  const std::string one = (dir / "y-00001-of-00001.gguf").string();
  const CommandResult single = run_strata(dir, "quantize " + model + " " + quote(one) + " Q8_0");
  EXPECT_EQ(single.status, 0) << single.err;
  EXPECT_EQ(run_strata(dir, "inspect " + quote(one)).status, 0);

  // A key name with a newline and an escape sequence: inspect prints it
  // escaped, as it prints values.
  std::string bytes = slurp(src);
  const std::string key = "tokenizer.ggml.bos_token_id";
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 9] = '\n';   // tokenizer\nggml...
  bytes[at + 14] = '\x1b';  // ...ggml\x1bbos_token_id
  const std::filesystem::path odd = dir / "odd_key.gguf";
  std::ofstream(odd, std::ios::binary) << bytes;
  const CommandResult shown = run_strata(dir, "inspect " + quote(odd.string()));
  EXPECT_EQ(shown.status, 0) << shown.err;
  EXPECT_NE(shown.out.find("tokenizer\\x0aggml\\x1bbos_token_id"), std::string::npos) << shown.out;
  EXPECT_EQ(shown.out.find('\x1b'), std::string::npos);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

// A NaN weight: run fails (exit 1), naming the blocks whose output went
// non-finite, instead of sampling from NaN logits (ids 0, 0, ...) with
// exit 0. Each stage of a split checks its own output the same way.
// stories260K with element `index` of F32 tensor `tensor` set to `value`,
// written under `dir`.
std::filesystem::path model_with_value(const std::filesystem::path& dir, const std::string& tensor,
                                       int index, float value) {
  auto opened = gguf::GgufModel::open(stories260k().string());
  EXPECT_TRUE(opened.ok()) << opened.status();
  if (!opened.ok()) return {};
  const gguf::TensorInfo* t = nullptr;
  for (const gguf::TensorInfo& info : (*opened)->tensors()) {
    if (info.name == tensor) t = &info;
  }
  EXPECT_NE(t, nullptr) << tensor;
  if (t == nullptr) return {};
  EXPECT_EQ(t->type, GgmlType::kF32);
  const uint64_t at = (*opened)->first().data_offset() + t->offset + 4 * uint64_t(index);
  std::string bytes = slurp(stories260k());
  std::memcpy(bytes.data() + at, &value, 4);
  const std::filesystem::path out = dir / (tensor + ".gguf");
  std::ofstream(out, std::ios::binary) << bytes;
  return out;
}

TEST(ServeCli, NanWeightFailsRunNamingTheBlocks) {
  if (!std::filesystem::exists(stories260k())) GTEST_SKIP() << stories260k() << " absent";
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "strata_nan_weight";
  std::filesystem::create_directories(dir);
  const std::filesystem::path bad =
      model_with_value(dir, "blk.1.attn_q.weight", 70, std::numeric_limits<float>::quiet_NaN());
  ASSERT_FALSE(bad.empty());
  const CommandResult run = run_strata(dir, "run -m " + quote(bad.string()) + " -p 'Once upon' -n 4");
  EXPECT_EQ(run.status, 1) << run.out << run.err;
  EXPECT_NE(run.err.find("blocks [0, 5): hidden row 0 column"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("is not finite (nan)"), std::string::npos) << run.err;
  // After the blocks: an Inf in the output norm makes the logits Inf or NaN; the
  // head's check refuses them (greedy sampling drew token 0 from them).
  const std::filesystem::path norm =
      model_with_value(dir, "output_norm.weight", 3, std::numeric_limits<float>::infinity());
  ASSERT_FALSE(norm.empty());
  const CommandResult head = run_strata(dir, "run -m " + quote(norm.string()) + " -p 'Once upon' -n 4");
  // quantize refuses a NaN weight instead of quantizing it to zeros.
  const std::filesystem::path q4 = dir / "q4.gguf";
  const CommandResult quantize =
      run_strata(dir, "quantize " + quote(bad.string()) + " " + quote(q4.string()) + " Q4_0");
  EXPECT_EQ(quantize.status, 1) << quantize.err;
  EXPECT_NE(quantize.err.find("blk.1.attn_q.weight: row 1 element 6 is not finite (nan)"),
            std::string::npos)
      << quantize.err;
  EXPECT_FALSE(std::filesystem::exists(q4));
  EXPECT_EQ(head.status, 1) << head.out << head.err;
  EXPECT_NE(head.err.find("output head: logit row 0 token "), std::string::npos) << head.err;
  EXPECT_NE(head.err.find(" is not finite ("), std::string::npos) << head.err;
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace
}  // namespace strata::testing
