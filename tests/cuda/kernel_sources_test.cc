// The kernel sources of worker/cuda/kernels compile with NVRTC for sm_80
// and sm_90 (NVRTC needs no GPU: these run here) and their PTX holds every
// entry point the backend launches. What the kernels compute is
// tests/cuda/kernels_test.cc.
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/ggml_type.h"
#include "worker/cuda/kernels/flash_attention_source.h"
#include "worker/cuda/kernels/matvec_source.h"
#include "worker/cuda/kernels/mma_source.h"
#include "worker/cuda/kernels/rms_norm_source.h"
#include "worker/cuda/kernels/sources.h"
#include "worker/cuda/kernels/wgmma_source.h"
#include "worker/cuda/step_kernels.h"
#include "worker/cuda/nvrtc_compiler.h"

namespace strata::worker {
namespace {

const GgmlType kTypes[] = {GgmlType::kF32,  GgmlType::kF16,   GgmlType::kQ4_0, GgmlType::kQ4_1,
                           GgmlType::kQ5_0, GgmlType::kQ5_1,  GgmlType::kQ8_0, GgmlType::kMXFP4,
                           GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

// sm_90 PTX: in every entry, no global load before the wait for the kernel
// before (grid.cuh): the compiler moved none above it.
void expect_loads_after_the_wait(const std::string& ptx) {
  int entries = 0;
  for (size_t at = ptx.find(".entry "); at != std::string::npos;
       at = ptx.find(".entry ", at + 1)) {
    const size_t next = ptx.find(".entry ", at + 1);
    const size_t end = next == std::string::npos ? ptx.size() : next;
    const std::string name = ptx.substr(at + 7, ptx.find('(', at) - at - 7);
    const size_t wait = ptx.find("griddepcontrol.wait", at);
    const size_t load = ptx.find("ld.global", at);
    EXPECT_LT(wait, end) << name << " has no wait";
    if (load < end) {
      EXPECT_LT(wait, load) << name << " loads before its wait";
    }
    ++entries;
  }
  EXPECT_GT(entries, 0);
}

// 8 columns with split-K (4 warps a row: the shared-memory sum of warps).
std::vector<std::string> options(int columns) {
  return {"-DTHREADS=" + std::to_string(cuda_kernels::kMatvecThreads),
          "-DNCOLS=" + std::to_string(columns), columns == 8 ? "-DROW_WARPS=4" : "-DROW_WARPS=1",
          "--std=c++17", "--fmad=false"};
}

TEST(CudaMatvecSource, CompilesForSm80AndSm90AtEveryColumnCount) {
  NvrtcCompiler compiler({.cache_dir = "-"});
  for (const int cc : {80, 90}) {
    for (const int columns : {1, 8, cuda_kernels::kMatvecMaxColumns}) {
      SCOPED_TRACE("compute_" + std::to_string(cc) + ", NCOLS " + std::to_string(columns));
      const NvrtcTarget target{.device_name = "any", .cc_major = cc / 10, .cc_minor = cc % 10};
      auto out = compiler.compile(target, "matvec.cu", cuda_kernels::kMatvecSource,
                                  options(columns));
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_NE(out->ptx.find(".target sm_" + std::to_string(cc)), std::string::npos);
      for (const GgmlType type : kTypes) {
        const std::string entry(cuda_kernels::matvec_entry(type));
        ASSERT_FALSE(entry.empty()) << ggml_type_info(type).name;
        EXPECT_NE(out->ptx.find(".entry " + entry + "("), std::string::npos) << entry;
        const std::string rows = cuda_kernels::get_rows_entry(type);
        EXPECT_NE(out->ptx.find(".entry " + rows + "("), std::string::npos) << rows;
      }
    }
  }
  // Types without a kernel have no entry.
  EXPECT_TRUE(cuda_kernels::matvec_entry(GgmlType::kQ3_K).empty());
  EXPECT_TRUE(cuda_kernels::get_rows_entry(GgmlType::kBF16).empty());
}

// The step kernels' sources (worker/cuda/kernels/sources.h) compile for
// sm_80 and sm_90 and hold their entry points.
TEST(CudaKernelSources, StepKernelsCompileForSm80AndSm90) {
  NvrtcCompiler compiler({.cache_dir = "-"});
  struct Source {
    const char* name;
    const char* text;
    std::vector<const char*> entries;
  };
  const Source sources[] = {
      {"elementwise.cu", cuda_kernels::kElementwiseSource,
       {cuda_kernels::kRopeRotateEntry, cuda_kernels::kRopeRotateQkEntry, cuda_kernels::kSwigluEntry, cuda_kernels::kAddEntry,
        cuda_kernels::kAddBiasEntry, cuda_kernels::kAddBiasIdsEntry, cuda_kernels::kStoreKvEntry,
        cuda_kernels::kStoreKvBatchEntry, cuda_kernels::kRopeStoreKvBatchEntry,
        cuda_kernels::kScaleEntry,
        cuda_kernels::kSoftCapEntry, cuda_kernels::kGegluEntry, cuda_kernels::kSwigluOaiEntry,
        cuda_kernels::kGatherRowsEntry,
        cuda_kernels::kScatterRowsEntry, cuda_kernels::kMoeSumEntry,
        cuda_kernels::kAddSharedExpertEntry, cuda_kernels::kRoundRowsEntry,
        cuda_kernels::kQuantizeRowsEntry, cuda_kernels::kSwigluQuantizeEntry}},
      {"attention.cu", cuda_kernels::kAttentionSource,
       {cuda_kernels::kAttentionDecodeEntry, cuda_kernels::kAttentionRowsEntry,
        cuda_kernels::kAttentionBatchEntry, cuda_kernels::kAttentionBatchQuantizeEntry,
        cuda_kernels::kAttentionSplitScoresEntry, cuda_kernels::kAttentionSplitWeighEntry}},
      {"rms_norm.cu", cuda_kernels::kRmsNormSource,
       {cuda_kernels::kRmsNormEntry, cuda_kernels::kAddRmsNormEntry,
        cuda_kernels::kRmsNormQuantizeEntry, cuda_kernels::kAddRmsNormQuantizeEntry}},
      {"sample.cu", cuda_kernels::kSampleSource,
       {cuda_kernels::kArgmaxEntry, cuda_kernels::kArgmaxRowsEntry,
        cuda_kernels::kTopKRowsEntry, cuda_kernels::kMoeRouteEntry}},
  };
  for (const int cc : {80, 90}) {
    for (const Source& s : sources) {
      SCOPED_TRACE(std::string(s.name) + " for compute_" + std::to_string(cc));
      const NvrtcTarget target{.device_name = "any", .cc_major = cc / 10, .cc_minor = cc % 10};
      const std::vector<std::string> opts = {"--std=c++17"};
      auto out = compiler.compile(target, s.name, s.text, opts);
      ASSERT_TRUE(out.ok()) << out.status();
      for (const char* entry : s.entries) {
        EXPECT_NE(out->ptx.find(".entry " + std::string(entry) + "("), std::string::npos)
            << entry;
      }
      // Programmatic dependent launch (grid.cuh): sm_90 only.
      EXPECT_EQ(out->ptx.find("griddepcontrol.wait") != std::string::npos, cc >= 90);
      if (cc >= 90) expect_loads_after_the_wait(out->ptx);
    }
  }
}

// Every kernel entry of every program waits for the kernel before it first
// (grid.cuh's strata_grid_dependency: the backend launches kernels before
// the one before ends on sm_90): the first statement of each STRATA_KERNEL
// body, macros' included. A kernel without it could read what the kernel
// before has not yet written.
TEST(CudaKernelSources, EveryKernelWaitsForTheKernelBeforeFirst) {
  const std::pair<const char*, const char*> programs[] = {
      {"matvec", cuda_kernels::matvec_program()},
      {"mma", cuda_kernels::mma_program()},
      {"wgmma", cuda_kernels::wgmma_program()},
      {"flash_attention", cuda_kernels::flash_attention_program()},
      {"rms_norm", cuda_kernels::kRmsNormSource},
      {"elementwise", cuda_kernels::kElementwiseSource},
      {"attention", cuda_kernels::kAttentionSource},
      {"sample", cuda_kernels::kSampleSource},
  };
  int kernels = 0;
  for (const auto& [name, text] : programs) {
    const std::string s(text);
    EXPECT_NE(s.find("void strata_grid_dependency()"), std::string::npos) << name;
    // Only weights are __restrict__ (grid.cuh: an invariant load of an
    // activation could move above the wait).
    for (size_t at = s.find("__restrict__ "); at != std::string::npos;
         at = s.find("__restrict__ ", at + 1)) {
      size_t end = at + 13;
      while (end < s.size() && (std::isalnum(static_cast<unsigned char>(s[end])) || s[end] == '_')) {
        ++end;
      }
      const std::string param = s.substr(at + 13, end - at - 13);
      EXPECT_TRUE(param == "w" || param == "table" || param == "weight" || param == "sinks")
          << name << ": __restrict__ " << param;
    }
    for (size_t at = s.find("STRATA_KERNEL strata_"); at != std::string::npos;
         at = s.find("STRATA_KERNEL strata_", at + 1)) {
      // The parameter list's closing parenthesis, then the body's brace.
      size_t i = s.find('(', at);
      ASSERT_NE(i, std::string::npos);
      for (int depth = 0; i < s.size(); ++i) {
        if (s[i] == '(') ++depth;
        if (s[i] == ')' && --depth == 0) break;
      }
      i = s.find('{', i);
      ASSERT_NE(i, std::string::npos);
      ++i;
      while (i < s.size() && (std::isspace(static_cast<unsigned char>(s[i])) || s[i] == '\\')) {
        ++i;
      }
      const size_t eol = s.find('\n', at);
      EXPECT_EQ(s.compare(i, 25, "strata_grid_dependency();"), 0)
          << name << ": " << s.substr(at, eol - at);
      ++kernels;
    }
  }
  EXPECT_GE(kernels, 35);
}

// The backend's one-type builds (worker/cuda/step_kernels.h): each holds its
// type's entries (the int8 types' tensor-core form too) and no other type's.
TEST(CudaKernelSources, StepMatvecBuildsHoldOnlyTheirType) {
  NvrtcCompiler compiler({.cache_dir = "-"});
  const cuda_kernels::StepSources& s = cuda_kernels::step_sources();
  const NvrtcTarget target{.device_name = "any", .cc_major = 9, .cc_minor = 0};
  for (const GgmlType type : {GgmlType::kF32, GgmlType::kQ4_K, GgmlType::kMXFP4}) {
    const size_t t = cuda_kernels::step_matvec_type_index(type);
    ASSERT_LT(t, cuda_kernels::kStepMatvecTypes.size());
    const KernelSource& src = s.matvec[t][2][4];  // 4 warps a row, 16 columns
    SCOPED_TRACE(std::string(ggml_type_info(type).name));
    auto out = compiler.compile(target, src.name, src.text, src.options);
    ASSERT_TRUE(out.ok()) << out.status();
    expect_loads_after_the_wait(out->ptx);
    for (const GgmlType other : cuda_kernels::kStepMatvecTypes) {
      const std::string entry(cuda_kernels::matvec_entry(other));
      EXPECT_EQ(out->ptx.find(".entry " + entry + "(") != std::string::npos, other == type)
          << entry;
      const std::string rows = cuda_kernels::get_rows_entry(other);
      EXPECT_EQ(out->ptx.find(".entry " + rows + "(") != std::string::npos, other == type)
          << rows;
      // The int8 types' tensor-core form (matvec_mma.cuh), with mma.sync.
      const std::string mma = cuda_kernels::matvec3_mma_entry(other);
      if (mma.empty()) continue;
      EXPECT_EQ(out->ptx.find(".entry " + mma + "(") != std::string::npos, other == type) << mma;
    }
    // (Q6_K's halves on m16n8k16.)
    const char* instruction = type == GgmlType::kQ6_K
                                  ? "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32"
                                  : "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32";
    EXPECT_EQ(out->ptx.find(instruction) != std::string::npos,
              !cuda_kernels::matvec3_mma_entry(type).empty());
  }
  EXPECT_TRUE(cuda_kernels::matvec3_mma_entry(GgmlType::kF32).empty());
  EXPECT_EQ(cuda_kernels::step_matvec_type_index(GgmlType::kQ3_K),
            cuda_kernels::kStepMatvecTypes.size());
}

// The tensor-core kernel's one-type builds (step_sources().mma) compile for
// sm_80 and sm_90 with the mma.sync instruction in their PTX, each holding
// only its type's entry and no matvec entry; F32 and F16 have none.
TEST(CudaKernelSources, StepMmaBuildsCompileForSm80AndSm90) {
  NvrtcCompiler compiler({.cache_dir = "-"});
  const cuda_kernels::StepSources& s = cuda_kernels::step_sources();
  EXPECT_TRUE(cuda_kernels::mma3_entry(GgmlType::kF32).empty());
  EXPECT_TRUE(cuda_kernels::mma3_entry(GgmlType::kF16).empty());
  EXPECT_TRUE(cuda_kernels::mma3_entry(GgmlType::kQ3_K).empty());
  for (const int cc : {80, 90}) {
    for (const GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ8_0}) {
      SCOPED_TRACE(std::string(ggml_type_info(type).name) + " for compute_" + std::to_string(cc));
      const KernelSource& src = s.mma[cuda_kernels::step_matvec_type_index(type)];
      const NvrtcTarget target{.device_name = "any", .cc_major = cc / 10, .cc_minor = cc % 10};
      auto out = compiler.compile(target, src.name, src.text, src.options);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_NE(out->ptx.find("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
                std::string::npos);
      // Each has an int8 form (Q6_K's: a scale each 16 values, its halves
      // on m16n8k16).
      EXPECT_NE(out->ptx.find(type == GgmlType::kQ6_K
                                  ? "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32"
                                  : "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"),
                std::string::npos);
      if (cc >= 90) expect_loads_after_the_wait(out->ptx);
      for (const GgmlType other : cuda_kernels::kStepMatvecTypes) {
        for (const std::string& entry :
             {cuda_kernels::mma3_entry(other), cuda_kernels::mma3_i8_entry(other)}) {
          if (entry.empty()) continue;
          EXPECT_EQ(out->ptx.find(".entry " + entry + "(") != std::string::npos, other == type)
              << entry;
        }
        const std::string matvec(cuda_kernels::matvec_entry(other));
        EXPECT_EQ(out->ptx.find(".entry " + matvec + "("), std::string::npos) << matvec;
      }
    }
  }
}

// The warpgroup builds (step_sources().wgmma) compile for compute 9.0
// (compute_90a) with the async instructions, the proxy fence and the
// waits in their PTX, each holding only its type's entry; for compute 8.0
// the program refuses to compile, saying why (wgmma is sm_90's).
TEST(CudaKernelSources, StepWgmmaBuildsCompileForSm90Only) {
  NvrtcCompiler compiler({.cache_dir = "-"});
  const cuda_kernels::StepSources& s = cuda_kernels::step_sources();
  EXPECT_TRUE(cuda_kernels::wgmma3_entry(GgmlType::kF32).empty());
  EXPECT_TRUE(cuda_kernels::wgmma3_entry(GgmlType::kF16).empty());
  EXPECT_EQ(cuda_kernels::wgmma3_entry(GgmlType::kQ4_K), "strata_wgmma3_q4_k");
  for (const GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ8_0}) {
    SCOPED_TRACE(ggml_type_info(type).name);
    const KernelSource& src = s.wgmma[cuda_kernels::step_matvec_type_index(type)];
    const NvrtcTarget h200{.device_name = "any", .cc_major = 9, .cc_minor = 0};
    auto out = compiler.compile(h200, src.name, src.text, src.options);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_NE(out->ptx.find(".target sm_90a"), std::string::npos);
    EXPECT_NE(out->ptx.find("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"),
              std::string::npos);
    EXPECT_NE(out->ptx.find("fence.proxy.async.shared::cta"), std::string::npos);
    EXPECT_NE(out->ptx.find("wgmma.commit_group.sync.aligned"), std::string::npos);
    EXPECT_NE(out->ptx.find("wgmma.wait_group.sync.aligned 0"), std::string::npos);
    expect_loads_after_the_wait(out->ptx);
    for (const GgmlType other : cuda_kernels::kStepMatvecTypes) {
      const std::string entry = cuda_kernels::wgmma3_entry(other);
      if (entry.empty()) continue;
      EXPECT_EQ(out->ptx.find(".entry " + entry + "(") != std::string::npos, other == type)
          << entry;
    }
    const NvrtcTarget a100{.device_name = "any", .cc_major = 8, .cc_minor = 0};
    auto refused = compiler.compile(a100, src.name, src.text, src.options);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("needs sm_90a"), std::string::npos)
        << refused.status();
  }
}

// The flash-attention builds (step_sources().flash, one a head size)
// compile for sm_80 and sm_90 with mma.sync in their PTX.
TEST(CudaKernelSources, StepFlashAttentionBuildsCompileForSm80AndSm90) {
  NvrtcCompiler compiler({.cache_dir = "-"});
  const cuda_kernels::StepSources& s = cuda_kernels::step_sources();
  for (const int cc : {80, 90}) {
    for (size_t i = 0; i < cuda_kernels::kStepFlashHeadDims.size(); ++i) {
      SCOPED_TRACE("HEAD_DIM " + std::to_string(cuda_kernels::kStepFlashHeadDims[i]) +
                   " for compute_" + std::to_string(cc));
      const KernelSource& src = s.flash[i];
      const NvrtcTarget target{.device_name = "any", .cc_major = cc / 10, .cc_minor = cc % 10};
      auto out = compiler.compile(target, src.name, src.text, src.options);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_NE(out->ptx.find(".entry " + std::string(cuda_kernels::kFlashAttentionEntry) + "("),
                std::string::npos);
      EXPECT_NE(out->ptx.find("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
                std::string::npos);
      if (cc >= 90) expect_loads_after_the_wait(out->ptx);
    }
  }
  EXPECT_EQ(cuda_kernels::step_flash_index(48), cuda_kernels::kStepFlashHeadDims.size());
}

}  // namespace
}  // namespace strata::worker
