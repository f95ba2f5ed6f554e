// NvrtcCompiler (worker/cuda/nvrtc_compiler.h): NVRTC needs no GPU, so these
// run on any machine with the toolkit's libnvrtc.
#include "worker/cuda/nvrtc_compiler.h"

#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/kernels/rms_norm_source.h"

namespace strata::worker {
namespace {

namespace fs = std::filesystem;

class NvrtcCompilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::path(::testing::TempDir()) /
        ("nvrtc_cache_" +
         std::string(
             ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  NvrtcTarget h200_{.device_name = "NVIDIA H200",
                    .cc_major = 9,
                    .cc_minor = 0,
                    .driver_version = 13000};
};

TEST_F(NvrtcCompilerTest, CompilesRmsNormToPtxForCompute90AndCachesIt) {
  NvrtcCompiler compiler({.cache_dir = dir_.string()});
  const std::vector<std::string> options = {"-DTHREADS=256", "--std=c++17"};
  auto first = compiler.compile(h200_, "rms_norm.cu",
                                cuda_kernels::kRmsNormSource, options);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->from_cache);
  EXPECT_NE(first->ptx.find(".entry strata_rms_norm"), std::string::npos);
  EXPECT_NE(first->ptx.find(".target sm_90a"), std::string::npos);  // arch-specific (wgmma)
  EXPECT_EQ(first->ptx.back(), '\0');
  ASSERT_FALSE(first->cache_path.empty());
  EXPECT_TRUE(fs::exists(first->cache_path)) << first->cache_path;
  EXPECT_EQ(fs::path(first->cache_path).parent_path(), dir_);

  // A second compiler over the same directory: a hit, the same bytes.
  NvrtcCompiler again({.cache_dir = dir_.string()});
  auto second = again.compile(h200_, "rms_norm.cu",
                              cuda_kernels::kRmsNormSource, options);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->ptx, first->ptx);
  EXPECT_EQ(second->cache_path, first->cache_path);
}

TEST_F(NvrtcCompilerTest, KeyDependsOnDeviceDriverArchSourceAndOptions) {
  const std::vector<std::string> a = {"-DTHREADS=256"};
  const std::vector<std::string> b = {"-DTHREADS=128"};
  const std::string src = cuda_kernels::kRmsNormSource;
  const std::string base = NvrtcCompiler::cache_key(h200_, "k", src, a);
  EXPECT_EQ(base.size(), 16u);
  EXPECT_EQ(base, NvrtcCompiler::cache_key(h200_, "k", src, a));
  EXPECT_NE(base, NvrtcCompiler::cache_key(h200_, "k", src, b));
  EXPECT_NE(base, NvrtcCompiler::cache_key(h200_, "k", src + " ", a));
  NvrtcTarget other = h200_;
  other.cc_major = 8;
  EXPECT_NE(base, NvrtcCompiler::cache_key(other, "k", src, a));
  other = h200_;
  other.driver_version = 13010;
  EXPECT_NE(base, NvrtcCompiler::cache_key(other, "k", src, a));
  other = h200_;
  other.device_name = "NVIDIA A100-SXM4-80GB";
  EXPECT_NE(base, NvrtcCompiler::cache_key(other, "k", src, a));
}

TEST_F(NvrtcCompilerTest, Compute80TargetsSm80) {
  NvrtcCompiler compiler({.cache_dir = "-"});
  NvrtcTarget a100{.device_name = "NVIDIA A100",
                   .cc_major = 8,
                   .cc_minor = 0,
                   .driver_version = 13000};
  auto out =
      compiler.compile(a100, "rms_norm.cu", cuda_kernels::kRmsNormSource, {});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NE(out->ptx.find(".target sm_80"), std::string::npos);
  EXPECT_TRUE(out->cache_path.empty());
  EXPECT_FALSE(fs::exists(dir_));
}

TEST_F(NvrtcCompilerTest, SyntaxErrorIsInvalidArgumentWithNvrtcLog) {
  NvrtcCompiler compiler({.cache_dir = dir_.string()});
  const char* bad =
      "extern \"C\" __global__ void broken(float* y) { y[0] = undeclared_name; "
      "}\n";
  auto out = compiler.compile(h200_, "broken.cu", bad, {});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(out.status().message());
  EXPECT_EQ(msg.rfind("broken.cu: NVRTC compile failed for compute_90a:", 0), 0u)
      << msg;
  EXPECT_NE(msg.find("undeclared_name"), std::string::npos) << msg;  // the log
  EXPECT_NE(msg.find("error"), std::string::npos) << msg;
  // Nothing cached for a failed compile.
  EXPECT_TRUE(!fs::exists(dir_) || fs::is_empty(dir_));
}

TEST_F(NvrtcCompilerTest, UnknownOptionIsAnError) {
  NvrtcCompiler compiler({.cache_dir = "-"});
  auto out =
      compiler.compile(h200_, "rms_norm.cu", cuda_kernels::kRmsNormSource,
                       std::vector<std::string>{"--no-such-option"});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("rms_norm.cu"), std::string::npos)
      << out.status();
}

}  // namespace
}  // namespace strata::worker
