// The quantized matrix x few-columns kernels (worker/cuda/kernels/
// matvec_source.h). Here, without a GPU: NVRTC compiles the source for
// sm_80 and sm_90 at every column count, and the PTX holds every type's
// entry. On a device: each type's kernel against the CPU reference
// (kernels/cpu/reference: the row quantized by quantize_row, dequantized by
// dequantize_row, the dot products summed in double), on ragged row counts
// and 1, 3 and 8 columns. Bound: |gpu - cpu| <= 1e-5 * sum |w x| + 1e-6
// (float rounding of the products and sums).
#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/quantize.h"
#include "model/ggml_type.h"
#include "tests/cuda/cuda_test_util.h"
#include "worker/cuda/kernels/matvec_source.h"
#include "worker/cuda/kernels/sources.h"
#include "worker/cuda/nvrtc_compiler.h"

namespace strata::worker {
namespace {

const GgmlType kTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kQ4_0, GgmlType::kQ4_1,
                           GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K};

std::vector<std::string> options(int columns) {
  return {"-DTHREADS=" + std::to_string(cuda_kernels::kMatvecThreads),
          "-DNCOLS=" + std::to_string(columns), "--std=c++17"};
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
  EXPECT_TRUE(cuda_kernels::matvec_entry(GgmlType::kQ5_K).empty());
  EXPECT_TRUE(cuda_kernels::get_rows_entry(GgmlType::kQ5_K).empty());
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
       {cuda_kernels::kRopeRotateEntry, cuda_kernels::kSwigluEntry, cuda_kernels::kAddEntry,
        cuda_kernels::kStoreKvEntry}},
      {"attention.cu", cuda_kernels::kAttentionSource, {cuda_kernels::kAttentionDecodeEntry}},
      {"sample.cu", cuda_kernels::kSampleSource, {cuda_kernels::kArgmaxEntry}},
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
    }
  }
}

#define CUDA_OK(expr)                                                      \
  do {                                                                     \
    const cudaError_t e_ = (expr);                                         \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

// The row bytes of `type` for `values`, by the reference quantizer.
std::vector<uint8_t> encode(GgmlType type, const std::vector<float>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<uint8_t> out(static_cast<size_t>(*ggml_row_bytes(type, n)));
  EXPECT_TRUE(reference::quantize_row(type, values.data(), n, out.data()).ok());
  return out;
}

TEST(CudaKernel, MatvecMatchesCpuReferenceForEveryType) {
  STRATA_REQUIRE_CUDA_DEVICE(device);
  CUDA_OK(cudaSetDevice(device.ordinal));
  NvrtcCompiler compiler({.cache_dir = "-"});
  const NvrtcTarget target{.device_name = device.name,
                           .cc_major = device.cc_major,
                           .cc_minor = device.cc_minor,
                           .driver_version = cuda_driver_version()};
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int columns : {1, 3, 8}) {
    auto ptx = compiler.compile(target, "matvec.cu", cuda_kernels::kMatvecSource,
                                options(columns));
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    cudaLibrary_t library = nullptr;
    CUDA_OK(cudaLibraryLoadData(&library, ptx->ptx.data(), nullptr, nullptr, 0, nullptr,
                                nullptr, 0));
    for (const GgmlType type : kTypes) {
      const bool k_quant = type == GgmlType::kQ4_K || type == GgmlType::kQ6_K;
      cudaKernel_t kernel = nullptr;
      const std::string entry(cuda_kernels::matvec_entry(type));
      CUDA_OK(cudaLibraryGetKernel(&kernel, library, entry.c_str()));
      for (const int n_cols : {256, 768, 2048}) {
        if (!k_quant && n_cols == 2048) continue;
        for (const int n_rows : {1, 5, 37}) {
          SCOPED_TRACE(entry + " NCOLS " + std::to_string(columns) + ", " +
                       std::to_string(n_rows) + " x " + std::to_string(n_cols));
          const int64_t row_bytes = *ggml_row_bytes(type, n_cols);
          std::vector<uint8_t> w;
          std::vector<float> dequant(static_cast<size_t>(n_rows) * n_cols);
          for (int r = 0; r < n_rows; ++r) {
            std::vector<float> row(static_cast<size_t>(n_cols));
            for (float& v : row) v = normal(rng);
            const std::vector<uint8_t> bytes = encode(type, row);
            ASSERT_TRUE(reference::dequantize_row(type, bytes.data(), n_cols,
                                                  dequant.data() + static_cast<size_t>(r) * n_cols)
                            .ok());
            w.insert(w.end(), bytes.begin(), bytes.end());
          }
          std::vector<float> x(static_cast<size_t>(columns) * n_cols);
          for (float& v : x) v = normal(rng);

          uint8_t* dw = nullptr;
          float *dx = nullptr, *dy = nullptr;
          CUDA_OK(cudaMalloc(&dw, w.size()));
          CUDA_OK(cudaMalloc(&dx, x.size() * sizeof(float)));
          CUDA_OK(cudaMalloc(&dy, static_cast<size_t>(columns) * n_rows * sizeof(float)));
          CUDA_OK(cudaMemcpy(dw, w.data(), w.size(), cudaMemcpyHostToDevice));
          CUDA_OK(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
          int rows_arg = n_rows, cols_arg = n_cols;
          long long rb_arg = row_bytes;
          void* args[] = {&dw, &dx, &dy, &rows_arg, &cols_arg, &rb_arg};
          const int per_block = cuda_kernels::kMatvecThreads / 32;
          CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void*>(kernel),
                                   dim3((n_rows + per_block - 1) / per_block),
                                   dim3(cuda_kernels::kMatvecThreads), args, 0, nullptr));
          CUDA_OK(cudaGetLastError());
          std::vector<float> got(static_cast<size_t>(columns) * n_rows);
          CUDA_OK(cudaMemcpy(got.data(), dy, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
          CUDA_OK(cudaFree(dw));
          CUDA_OK(cudaFree(dx));
          CUDA_OK(cudaFree(dy));
          for (int c = 0; c < columns; ++c) {
            for (int r = 0; r < n_rows; ++r) {
              double want = 0.0, magnitude = 0.0;
              for (int i = 0; i < n_cols; ++i) {
                const double p = static_cast<double>(dequant[static_cast<size_t>(r) * n_cols + i]) *
                                 x[static_cast<size_t>(c) * n_cols + i];
                want += p;
                magnitude += std::fabs(p);
              }
              ASSERT_NEAR(got[static_cast<size_t>(c) * n_rows + r], want, 1e-5 * magnitude + 1e-6)
                  << "column " << c << ", row " << r;
            }
          }
        }
      }
    }
    CUDA_OK(cudaLibraryUnload(library));
  }
}

}  // namespace
}  // namespace strata::worker
