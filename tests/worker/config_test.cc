// WorkerConfig: YAML keys, sizes, errors that name the key.
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "model/placement.h"
#include "worker/worker_config.h"
#include "absl/strings/str_cat.h"
#include "worker/cuda/cuda_backend.h"

namespace strata::worker {
namespace {

using placement::parse_byte_size;

TEST(WorkerConfig, ReadsEveryKey) {
  auto c = parse_worker_config(R"(
listen: 127.0.0.1:50061
backend: cpu
threads: 2
memory_budget: 4GiB
model_dirs: [/models, ~/more]
name: w0
max_message_bytes: 128MiB
answer_timeout_ms: 3000
)",
                               "w.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen, "127.0.0.1:50061");
  EXPECT_EQ(c->threads, 2);
  EXPECT_EQ(c->memory_budget_bytes, uint64_t{4} << 30);
  ASSERT_EQ(c->model_dirs.size(), 2u);
  EXPECT_EQ(c->model_dirs[0], "/models");
  const char* home = std::getenv("HOME");
  if (home != nullptr) {
    EXPECT_EQ(c->model_dirs[1], std::string(home) + "/more");
  }
  EXPECT_EQ(c->name, "w0");
  EXPECT_EQ(c->max_message_bytes, int64_t{128} << 20);
  EXPECT_EQ(c->answer_timeout_ms, 3000);
  EXPECT_TRUE(validate(*c).ok());
}

TEST(WorkerConfig, ErrorsNameTheKeyAndLine) {
  auto bad = [](const char* yaml) {
    auto c = parse_worker_config(yaml, "w.yaml");
    EXPECT_FALSE(c.ok()) << yaml;
    return c.ok() ? std::string() : std::string(c.status().message());
  };
  EXPECT_EQ(bad("threads: -2\n"),
            "w.yaml:1: threads: -2 is out of range [1, 1024]");
  EXPECT_NE(
      bad("listen: a\nthraeds: 2\n").find("w.yaml:2: thraeds: unknown key"),
      std::string::npos);
  EXPECT_NE(bad("memory_budget: 4 gigs\n")
                .find("memory_budget: \"4 gigs\" is not a size"),
            std::string::npos);
  EXPECT_NE(bad("threads: [1, 2]\n").find("threads: expected a single value"),
            std::string::npos);
  EXPECT_NE(bad("threads: two\n").find("threads: \"two\" is not a thread count"),
            std::string::npos);
  EXPECT_NE(bad("listen: [\n").find("w.yaml:"), std::string::npos);
  EXPECT_NE(bad("- a\n- b\n").find("expected a map"), std::string::npos);
  // A repeated key is refused, not silently overridden by the last.
  EXPECT_EQ(bad("threads: 1\nlisten: a\nthreads: 2\n"), "w.yaml:3: threads: given twice");
  // A value holding itself through an alias (yaml-cpp shares the anchor's
  // node): an error of the value, not endless expansion.
  EXPECT_NE(bad("name: &w {k: *w, l: [*w, *w]}\n").find("name: expected a single value"),
            std::string::npos);
  // A directory is not a config (it read as an empty file: all defaults).
  auto dir = load_worker_config(::testing::TempDir());
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(std::string(dir.status().message()).find("a directory, not a config file"),
            std::string::npos)
      << dir.status();
}

TEST(WorkerConfig, ValidateNamesTheKey) {
  WorkerConfig c;
  EXPECT_NE(validate(c).message().find("model_dirs: none given"),
            std::string::npos);
  c.model_dirs = {"/m"};
  EXPECT_TRUE(validate(c).ok());
  c.listen = "nohost";
  EXPECT_NE(validate(c).message().find("listen: \"nohost\""),
            std::string::npos);
  c.listen = "127.0.0.1:0";
  c.backend = "cuda:x";
  EXPECT_NE(validate(c).message().find("backend: \"cuda:x\""),
            std::string::npos);
  c.backend = "fake";
  EXPECT_TRUE(validate(c).ok());
}

// backend: cpu, cuda (= cuda:0), cuda:N; other forms are refused naming the
// key. Whether cuda can run is the backend's to say (below).
TEST(WorkerConfig, BackendTakesCpuCudaAndCudaN) {
  for (const char* ok : {"cpu", "cuda", "cuda:0", "cuda:7", "fake"}) {
    auto c = parse_worker_config(absl::StrCat("model_dirs: [/m]\nbackend: ", ok, "\n"),
                                 "w.yaml");
    ASSERT_TRUE(c.ok()) << ok << ": " << c.status();
    EXPECT_EQ(c->backend, ok);
    EXPECT_TRUE(validate(*c).ok()) << ok << ": " << validate(*c);
  }
  for (const char* bad : {"cuda:x", "cuda:-1", "cuda:", "cuda:+1", "cuda:99999", "gpu", "CUDA"}) {
    WorkerConfig c;
    c.model_dirs = {"/m"};
    c.backend = bad;
    const absl::Status st = validate(c);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(st.message().rfind(absl::StrCat("backend: \"", bad, "\" is not supported"), 0), 0u)
        << st;
  }
  auto cuda = parse_backend_choice("cuda");
  ASSERT_TRUE(cuda.ok());
  EXPECT_EQ(cuda->kind, BackendChoice::Kind::kCuda);
  EXPECT_EQ(cuda->device, 0);
  EXPECT_EQ(parse_backend_choice("cuda:3")->device, 3);
  EXPECT_EQ(parse_backend_choice("cpu")->kind, BackendChoice::Kind::kCpu);
}

// Choosing cuda on a machine or build that cannot run it: the one error that
// applies (here, without a model: past the device check, the missing model).
TEST(WorkerConfig, CudaBackendSaysWhyItCannotRun) {
  CudaBackendOptions options;
  options.device = 0;
  auto backend = make_cuda_backend(nullptr, arch::Hyperparameters{}, BlockRange{0, 1}, options);
  ASSERT_FALSE(backend.ok());
  const std::string msg(backend.status().message());
#if defined(STRATA_HAVE_CUDA)
  const bool no_device = backend.status().code() == absl::StatusCode::kFailedPrecondition &&
                         msg.rfind("cuda:0: no CUDA device: ", 0) == 0;
  // With a device: past its check, the backend needs a model.
  const bool no_model = backend.status().code() == absl::StatusCode::kInvalidArgument &&
                        msg == "make_device_backend: no model";
  EXPECT_TRUE(no_device || no_model) << backend.status();
#else
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(msg, "strata was built without CUDA (STRATA_CUDA=OFF or no nvcc found)");
#endif
}

// threads: an integer, a Kubernetes CPU quantity (its whole CPUs), auto
// (0, resolved to cpu::usable_threads() at start); absent is auto.
TEST(WorkerConfig, ThreadsTakeCpuQuantitiesAndAuto) {
  EXPECT_EQ(*parse_thread_count("4"), 4);
  EXPECT_EQ(*parse_thread_count("auto"), 0);
  EXPECT_EQ(*parse_thread_count("3500m"), 3);
  EXPECT_EQ(*parse_thread_count("500m"), 1);
  EXPECT_EQ(*parse_thread_count("1.5"), 1);
  EXPECT_EQ(*parse_thread_count("16000m"), 16);
  EXPECT_FALSE(parse_thread_count("0").ok());
  EXPECT_FALSE(parse_thread_count("-1").ok());
  EXPECT_FALSE(parse_thread_count("2000").ok());
  EXPECT_FALSE(parse_thread_count("2000000m").ok());
  EXPECT_FALSE(parse_thread_count("0m").ok());
  EXPECT_FALSE(parse_thread_count("m").ok());
  EXPECT_FALSE(parse_thread_count("2Gi").ok());
  auto c = parse_worker_config("listen: 127.0.0.1:1\n", "w.yaml");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->threads, 0);
  c = parse_worker_config("threads: 2500m\n", "w.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->threads, 2);
}

// ${VAR} in values, from the given environment: one file for every pod of
// a LeaderWorkerSet group.
TEST(WorkerConfig, ExpandsEnvironmentVariablesInValues) {
  const config::EnvLookup env =
      [](std::string_view name) -> std::optional<std::string> {
    if (name == "LWS_WORKER_INDEX") return "2";
    if (name == "CERTS") return "/etc/strata/certs";
    if (name == "EMPTY") return "";
    return std::nullopt;
  };
  auto c = parse_worker_config(R"(
listen: 0.0.0.0:50061
name: w${LWS_WORKER_INDEX}
memory_budget: ${BUDGET:-28Gi}
threads: ${THREADS:-3500m}
model_dirs: ["/models/$${LWS_WORKER_INDEX}", "${EMPTY:-/spare}"]
tls:
  ca: ${CERTS}/ca.pem
  cert: ${CERTS}/w${LWS_WORKER_INDEX}.pem
  key: ${CERTS}/w${LWS_WORKER_INDEX}.key
  peers: [coordinator, "w${LWS_WORKER_INDEX}"]
)",
                               "w.yaml", env);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "w2");
  EXPECT_EQ(c->memory_budget_bytes, uint64_t{28} << 30);
  EXPECT_EQ(c->threads, 3);
  ASSERT_EQ(c->model_dirs.size(), 2u);
  EXPECT_EQ(c->model_dirs[0], "/models/${LWS_WORKER_INDEX}");  // $$ is one $
  EXPECT_EQ(c->model_dirs[1], "/spare");  // empty: the default
  EXPECT_EQ(c->tls.cert, "/etc/strata/certs/w2.pem");
  ASSERT_EQ(c->tls.peers.size(), 2u);
  EXPECT_EQ(c->tls.peers[1], "w2");

  auto unset = parse_worker_config("name: w${NOPE}\n", "w.yaml", env);
  ASSERT_FALSE(unset.ok());
  EXPECT_EQ(unset.status().message(), "w.yaml: name: ${NOPE} is not set");
  auto nested = parse_worker_config("tls:\n  cert: ${CERTS\n", "w.yaml", env);
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("tls.cert: \"${CERTS\" has an unclosed ${"),
            std::string::npos)
      << nested.status();
}

TEST(WorkerConfig, ByteSizes) {
  EXPECT_EQ(*parse_byte_size("1000"), 1000u);
  EXPECT_EQ(*parse_byte_size("2GiB"), uint64_t{2} << 30);
  EXPECT_EQ(*parse_byte_size("512 MiB"), uint64_t{512} << 20);
  EXPECT_EQ(*parse_byte_size("1.5GiB"), uint64_t{3} << 29);
  EXPECT_EQ(*parse_byte_size("2GB"), 2000000000u);
  EXPECT_EQ(*parse_byte_size("2G"), 2000000000u);  // a Kubernetes quantity
  EXPECT_EQ(*parse_byte_size("4Gi"), uint64_t{4} << 30);
  EXPECT_FALSE(parse_byte_size("-1").ok());
  EXPECT_FALSE(parse_byte_size("99999999999TiB").ok());
  EXPECT_FALSE(parse_byte_size("").ok());
}

}  // namespace
}  // namespace strata::worker
