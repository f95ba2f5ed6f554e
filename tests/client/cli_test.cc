// The gRPC verbs of the `strata` command line (generate, chat, status,
// tokenize/detokenize --server), run as a user runs them, against the
// in-process fake server (fake_inference.h): output, the --json shape
// `strata run` prints, the requests they send, and one-line errors with
// exit status 1.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"
#include "tests/client/cli_test_util.h"
#include "tests/client/fake_inference.h"
#include "tests/test_paths.h"

namespace strata::testing {
namespace {

class RemoteCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok()) << "the fake server did not start";
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("strata_client_cli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  CommandResult strata(const std::string& args, const std::string& input = "") {
    return run_strata(dir_, args, input);
  }
  std::string server_flag() const { return "--server " + server_.address(); }

  FakeServer server_;
  std::filesystem::path dir_;
};

std::set<std::string> keys(const nlohmann::json& j) {
  std::set<std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) out.insert(it.key());
  return out;
}

TEST_F(RemoteCliTest, GenerateStreamsTheTextThenTheSummary) {
  const CommandResult r = strata("generate " + server_flag() + " -p ok");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "Once upon a time\n");
  EXPECT_EQ(r.err.rfind("[length] prefill: 3 tokens in 0.010 s, 300.0 tok/s | "
                        "decode: 3 tokens in 0.030 s, 100.0 tok/s | TTFT 12.0 ms",
                        0),
            0u)
      << r.err;
}

TEST_F(RemoteCliTest, GenerateJsonHasTheShapeOfRunJson) {
  const CommandResult r = strata("generate " + server_flag() + " -p ok --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], nlohmann::json({1, 9, 9}));
  EXPECT_EQ(j["ids"], nlohmann::json({1, 2, 3, 4}));
  EXPECT_EQ(j["text"], "Once upon a time");
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_EQ(j["seed"], 42);
  EXPECT_EQ(j["timings"]["generated_tokens"], 4);
  EXPECT_DOUBLE_EQ(j["timings"]["prefill_s"].get<double>(), 0.010);
  EXPECT_DOUBLE_EQ(j["timings"]["ttft_s"].get<double>(), 0.012);

  // The same keys as `strata run --json` (which adds its thread count, and
  // has no server-side ttft/queue times).
  // The first model `strata run` accepts: stories260K, else SmolLM2.
  CommandResult local;
  std::string why;
  for (const std::filesystem::path& model :
       {shared_dir() / "models/stories260K.gguf",
        models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf"}) {
    if (!std::filesystem::exists(model)) {
      why += model.string() + " absent; ";
      continue;
    }
    local = strata("run -m " + quote(model.string()) +
                   " -p 'Once' -n 2 -t 1 --json");
    if (local.status == 0) break;
    why += "strata run fails on " + model.string() + ": " + local.err;
  }
  if (local.status != 0) {
    GTEST_SKIP() << "the keys of `strata run --json` not compared: " << why;
  }
  const nlohmann::json l = nlohmann::json::parse(local.out);
  EXPECT_EQ(keys(l), keys(j));
  std::set<std::string> run_timings = keys(l["timings"]);
  run_timings.erase("threads");
  std::set<std::string> remote_timings = keys(j["timings"]);
  remote_timings.erase("ttft_s");
  remote_timings.erase("queue_s");
  EXPECT_EQ(run_timings, remote_timings);
}

TEST_F(RemoteCliTest, GenerateSendsTheFlagsAsTheRequest) {
  const CommandResult r = strata(
      "generate " + server_flag() +
      " -p hello --chat -n 9 --temp 0.7 --top-k 5 --top-p 0.9 --seed 77 "
      "--stop END --stop '\n' --ignore-eos --logit-bias 15043+1.5 --logit-bias 7-100 "
      "--logit-bias 15043-2 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto req = server_.service().last_request();
  ASSERT_TRUE(req.has_messages());
  ASSERT_EQ(req.messages().messages_size(), 1);
  EXPECT_EQ(req.messages().messages(0).role(), "user");
  EXPECT_EQ(req.messages().messages(0).content(), "hello");
  EXPECT_EQ(req.max_tokens(), 9);
  EXPECT_FLOAT_EQ(req.sampling().temperature(), 0.7f);
  EXPECT_EQ(req.sampling().top_k(), 5);
  EXPECT_FLOAT_EQ(req.sampling().top_p(), 0.9f);
  EXPECT_EQ(req.sampling().seed(), 77u);
  EXPECT_FALSE(req.sampling().has_repeat_penalty());
  EXPECT_EQ(req.stop_size(), 2);
  EXPECT_TRUE(req.ignore_eos());
  // llama.cpp's TOKEN_ID(+|-)BIAS; a later one for the same id wins.
  ASSERT_EQ(req.sampling().logit_bias_ids_size(), 2);
  ASSERT_EQ(req.sampling().logit_bias_values_size(), 2);
  EXPECT_EQ(req.sampling().logit_bias_ids(0), 7);  // the client's map: by id
  EXPECT_FLOAT_EQ(req.sampling().logit_bias_values(0), -100.0f);
  EXPECT_EQ(req.sampling().logit_bias_ids(1), 15043);
  EXPECT_FLOAT_EQ(req.sampling().logit_bias_values(1), -2.0f);

  const CommandResult ids =
      strata("generate " + server_flag() + " --prompt-ids '1 2 3' --json");
  ASSERT_EQ(ids.status, 0) << ids.err;
  EXPECT_EQ(server_.service().last_request().prompt_ids().ids_size(), 3);
  EXPECT_FALSE(server_.service().last_request().has_max_tokens());
}

TEST_F(RemoteCliTest, ServerErrorsAreOneLineAndExitOne) {
  const CommandResult r =
      strata("generate " + server_flag() + " -p error:UNAVAILABLE --json");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "strata: " + server_.address() +
                       ": UNAVAILABLE: worker w1 (127.0.0.1:50062) died\n");
  EXPECT_EQ(r.out, "");

  const CommandResult broken = strata("generate " + server_flag() + " -p two-done");
  EXPECT_EQ(broken.status, 1);
  EXPECT_EQ(broken.err.rfind("strata: " + server_.address() + ": INTERNAL: ", 0),
            0u)
      << broken.err;

  const CommandResult refused =
      strata("tokenize " + server_flag() + " refuse");
  EXPECT_EQ(refused.status, 1);
  EXPECT_EQ(refused.err, "strata: " + server_.address() +
                             ": INVALID_ARGUMENT: text: refused by the test\n");
}

TEST_F(RemoteCliTest, UnreachableServerIsOneLineAndExitOne) {
  for (const char* verb : {"generate -p hi", "status", "tokenize hi"}) {
    SCOPED_TRACE(verb);
    const CommandResult r =
        strata(std::string(verb) + " --server 127.0.0.1:1 --deadline-ms 5000");
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err.rfind("strata: 127.0.0.1:1: UNAVAILABLE: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// --timeout bounds every call (a server that accepts and never answers
// does not hang the CLI); --api-key, else $STRATA_API_KEY, is sent as a
// bearer token.
TEST_F(RemoteCliTest, TimeoutAndApiKey) {
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(silent, reinterpret_cast<sockaddr*>(&a), len), 0);
  ASSERT_EQ(::listen(silent, 16), 0);
  ASSERT_EQ(::getsockname(silent, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string address = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  for (const char* verb : {"status", "generate -p hi"}) {
    SCOPED_TRACE(verb);
    const auto t0 = std::chrono::steady_clock::now();
    const CommandResult r = strata(std::string(verb) + " --server " + address + " --timeout 0.5");
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err.rfind("strata: " + address + ": DEADLINE_EXCEEDED: ", 0), 0u) << r.err;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  }
  ::close(silent);

  EXPECT_EQ(strata("generate " + server_flag() + " -p ok --api-key k1").status, 0);
  EXPECT_EQ(server_.service().last_authorization(), "Bearer k1");
  ::setenv("STRATA_API_KEY", "k2", 1);
  EXPECT_EQ(strata("generate " + server_flag() + " -p ok").status, 0);
  ::unsetenv("STRATA_API_KEY");
  EXPECT_EQ(server_.service().last_authorization(), "Bearer k2");
  EXPECT_EQ(strata("generate " + server_flag() + " -p ok").status, 0);
  EXPECT_EQ(server_.service().last_authorization(), "");
}

TEST_F(RemoteCliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(strata("generate -p hi").status, 2);  // no --server
  EXPECT_EQ(strata("generate " + server_flag()).status, 2);  // no prompt
  EXPECT_EQ(strata("generate " + server_flag() + " -p a --prompt-ids 1").status, 2);
  // A seed outside 0 .. 2^64 - 1 is refused, not wrapped to 2^64 - 1.
  for (const char* seed : {"-1", "18446744073709551616", "1x"}) {
    const CommandResult r = strata("generate " + server_flag() + " -p hi --seed " + seed);
    EXPECT_EQ(r.status, 2) << seed;
    EXPECT_NE(r.err.find("--seed: not an integer from 0 to 18446744073709551615"),
              std::string::npos)
        << seed << ": " << r.err;
  }
  // A prompt that is not UTF-8 is refused before the call, naming the byte
  // (the server's proto3 string cannot carry it).
  const CommandResult bad_utf8 =
      strata("generate " + server_flag() + " -p \"$(printf 'ab\\377')\"");
  EXPECT_EQ(bad_utf8.status, 2);
  EXPECT_NE(bad_utf8.err.find("-p: not valid UTF-8 at byte 2"), std::string::npos)
      << bad_utf8.err;
  // Ids outside [0, 2^31 - 1] are refused, never wrapped into range (2^32 +
  // 403 once ran as 403), as are words that are not whole integers.
  for (const char* ids : {"'1 4294967699'", "'1 -4294967295'", "'99999999999'", "'-1'",
                          "'1 2x'", "'1.5'", "'99999999999999999999999'"}) {
    const CommandResult r = strata("generate " + server_flag() + " --prompt-ids " + ids);
    EXPECT_EQ(r.status, 2) << ids;
    EXPECT_NE(r.err.find("not a list of token ids"), std::string::npos) << ids << ": " << r.err;
  }
  const CommandResult version = strata("--version");
  EXPECT_EQ(version.status, 0) << version.err;
  EXPECT_EQ(version.out.rfind("strata 0.", 0), 0u) << version.out;
  // A first word that names no command says so, listing the commands.
  const CommandResult unknown = strata("frobnicate -p hi");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_EQ(unknown.err.rfind("strata: unknown command 'frobnicate' (commands: ", 0), 0u)
      << unknown.err;
  EXPECT_NE(unknown.err.find("generate"), std::string::npos) << unknown.err;
  // Sampling values outside inference.proto's bounds are refused at parse
  // time naming the flag, as `strata run` (the same flags) refuses them.
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"--top-p 2", "--top-p: 2 is out of range (0, 1]"},
           {"--temp nan", "--temp: nan is out of range (-inf, 100]"},
           {"--temp 150", "--temp: 150 is out of range (-inf, 100]"},
           {"--repeat-penalty 0", "--repeat-penalty: 0 is out of range (0, 100]"},
           {"--presence-penalty 1e30", "--presence-penalty: 1e30 is out of range [-100, 100]"},
           {"--min-p x", "--min-p: not a number: x"},
           {"--top-k -5", "--top-k"},
           {"--repeat-last-n 5000", "--repeat-last-n"},
           {"--logit-bias 5", "--logit-bias: not TOKEN_ID(+|-)BIAS"},
           {"--logit-bias 5+101", "--logit-bias: not TOKEN_ID(+|-)BIAS"},
           {"--logit-bias -5+1", "--logit-bias: not TOKEN_ID(+|-)BIAS"},
           {"--logit-bias 5+1x", "--logit-bias: not TOKEN_ID(+|-)BIAS"},
           {"--logit-bias 5+nan", "--logit-bias: not TOKEN_ID(+|-)BIAS"},
           {"--logit-bias 99999999999+1", "--logit-bias: not TOKEN_ID(+|-)BIAS"}}) {
    const CommandResult r = strata("generate " + server_flag() + " -p hi " + args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
  }
  // --server must be HOST:PORT, --deadline-ms a count of ms (exit 2).
  for (const char* args : {"status --server http://127.0.0.1:50051",
                           "status --server 127.0.0.1:99999", "status --server ''",
                           "status --server 127.0.0.1:1 --deadline-ms -1"}) {
    const CommandResult r = strata(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 2) << args << ": " << r.err;
  }
  // Text the server cannot take is refused before the call (-m tokenizes
  // any bytes).
  const CommandResult bad_text = strata("tokenize " + server_flag() + " \"$(printf 'ab\\377')\"");
  EXPECT_EQ(bad_text.status, 2);
  EXPECT_NE(bad_text.err.find("text: not valid UTF-8 at byte 2"), std::string::npos)
      << bad_text.err;
  // --stop and --model go into proto3 strings too; -n is the request's
  // max_tokens, 1 .. 2^20.
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"--stop \"$(printf 'x\\377')\"", "--stop: not valid UTF-8 at byte 1"},
           {"--model \"$(printf '\\377')\"", "--model: not valid UTF-8 at byte 0"},
           {"-n 0", "--n-predict"},
           {"-n 1048577", "--n-predict"}}) {
    for (const char* verb : {"generate -p hi ", "chat "}) {
      const CommandResult r = strata(std::string(verb) + server_flag() + " " + args, "hi\n");
      EXPECT_EQ(r.status, 2) << verb << args << ": " << r.err;
      EXPECT_NE(r.err.find(message), std::string::npos) << verb << args << ": " << r.err;
    }
  }
  EXPECT_EQ(strata("tokenize -m x.gguf " + server_flag() + " hi").status, 2);
  EXPECT_EQ(strata("tokenize hi").status, 2);
  EXPECT_EQ(server_.service().generate_calls(), 0);
}

TEST_F(RemoteCliTest, ChatKeepsTheHistory) {
  const CommandResult r = strata("chat " + server_flag() + " --system 'be kind'",
                                 "hello\n\nagain\n/exit\nnot sent\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "reply to 2 messages\nreply to 4 messages\n");
  EXPECT_EQ(server_.service().generate_calls(), 2);
  const auto req = server_.service().last_request();
  ASSERT_EQ(req.messages().messages_size(), 4);
  const auto& m = req.messages().messages();
  EXPECT_EQ(m[0].role(), "system");
  EXPECT_EQ(m[0].content(), "be kind");
  EXPECT_EQ(m[1].content(), "hello");
  EXPECT_EQ(m[2].role(), "assistant");
  EXPECT_EQ(m[2].content(), "reply to 2 messages");
  EXPECT_EQ(m[3].role(), "user");
  EXPECT_EQ(m[3].content(), "again");

  // A line that is not UTF-8 is skipped, saying so; the chat goes on.
  const CommandResult skipped =
      strata("chat " + server_flag(), std::string("hi\n") + "ab\xff\n" + "there\n");
  ASSERT_EQ(skipped.status, 0) << skipped.err;
  EXPECT_EQ(skipped.out, "reply to 1 messages\nreply to 3 messages\n");
  EXPECT_NE(skipped.err.find("line skipped: not valid UTF-8 at byte 2"), std::string::npos)
      << skipped.err;

  // End of input ends it too.
  const CommandResult eof = strata("chat " + server_flag(), "one turn\n");
  ASSERT_EQ(eof.status, 0) << eof.err;
  EXPECT_EQ(eof.out, "reply to 1 messages\n");
}

TEST_F(RemoteCliTest, StatusPrintsTheWorkers) {
  // The fake answers DEGRADED: printed all the same, exit 3 (not serving).
  const CommandResult r = strata("status " + server_flag());
  ASSERT_EQ(r.status, 3) << r.err;
  EXPECT_EQ(r.err, "strata status: not serving: state degraded\n");
  EXPECT_NE(r.out.find("state: degraded"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  0  w0 127.0.0.1:50061  serving  blocks [0, 3) +embedding"),
            std::string::npos)
      << r.out;
  // The second has no name: its address alone.
  EXPECT_NE(r.out.find("  1  127.0.0.1:50062  unreachable"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sequences: 2 active of 16, 3 requests queued; 7 requests served"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("last error: connection refused"), std::string::npos);
  // A budget of 0 (the second worker's) is none, not "budget 0.0 MiB".
  EXPECT_NE(r.out.find("budget 1024.0 MiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KV 0.0 MiB  no budget"), std::string::npos) << r.out;

  const CommandResult j = strata("status " + server_flag() + " --json");
  ASSERT_EQ(j.status, 3) << j.err;
  const nlohmann::json s = nlohmann::json::parse(j.out);
  EXPECT_EQ(s["state"], "degraded");
  EXPECT_EQ(s["model"]["name"], "stories260K");
  ASSERT_EQ(s["workers"].size(), 2u);
  EXPECT_EQ(s["workers"][1]["state"], "unreachable");
  EXPECT_EQ(s["workers"][1]["first_block"], 3);
  EXPECT_EQ(s["workers"][1]["head"], true);
  EXPECT_EQ(s["requests_served"], 7);
  EXPECT_EQ(s["queued_requests"], 3);
  EXPECT_EQ(s["workers"][0]["name"], "w0");
}

TEST_F(RemoteCliTest, TokenizeAndDetokenizeOverTheServer) {
  CommandResult r = strata("tokenize " + server_flag() + " hi");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "1 104 105\n");
  r = strata("tokenize " + server_flag() + " --no-bos --stdin", "a\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "97 10\n");
  r = strata("tokenize " + server_flag() + " --pieces --stdin", "a\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "1\t<s>\n97\ta\n10\t\\n\n");
  r = strata("detokenize " + server_flag() + " 111 107");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "ok");
}

}  // namespace
}  // namespace strata::testing
