#include "client/cli/requantize.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/quantize.h"
#include "model/gguf_writer.h"

namespace strata::cli {
namespace {

bool row_fits(GgmlType type, int64_t ne0) {
  return ne0 % ggml_type_info(type).block_size == 0;
}

// Converts `n_rows` rows of `ne0` elements from `src_type` to `dst_type`,
// rows split over `threads` threads; each thread owns one f32 row buffer.
absl::Status convert_rows(GgmlType src_type, const uint8_t* src,
                          GgmlType dst_type, uint8_t* dst, int64_t ne0,
                          int64_t n_rows, int threads) {
  const int64_t src_row = *ggml_row_bytes(src_type, ne0);
  const int64_t dst_row = *ggml_row_bytes(dst_type, ne0);
  std::atomic<int64_t> next{0};
  std::vector<absl::Status> errors(static_cast<size_t>(threads));
  auto work = [&](int t) {
    std::vector<float> row(static_cast<size_t>(ne0));
    constexpr int64_t kChunk = 16;  // rows claimed at a time
    for (int64_t begin; (begin = next.fetch_add(kChunk)) < n_rows;) {
      const int64_t end = std::min(begin + kChunk, n_rows);
      for (int64_t r = begin; r < end; ++r) {
        absl::Status s = reference::dequantize_row(src_type, src + r * src_row,
                                                   ne0, row.data());
        // A NaN or Inf would be quantized away (to a zero block) and the
        // broken model would run: refuse it, as llama.cpp's row validation
        // refuses such data.
        for (int64_t i = 0; s.ok() && i < ne0; ++i) {
          if (!std::isfinite(row[static_cast<size_t>(i)])) {
            s = absl::InvalidArgumentError(absl::StrCat(
                "row ", r, " element ", i, " is not finite (", row[static_cast<size_t>(i)],
                "): a NaN or Inf cannot be quantized"));
          }
        }
        if (s.ok()) {
          s = reference::quantize_row(dst_type, row.data(), ne0,
                                      dst + r * dst_row);
        }
        if (!s.ok()) {
          errors[static_cast<size_t>(t)] = s;
          next.store(n_rows);
          return;
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& th : pool) th.join();
  for (const absl::Status& s : errors) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

TensorPlan plan_tensor(const gguf::TensorInfo& tensor, GgmlType target) {
  const bool is_vector =
      tensor.shape.size() == 1 ||
      static_cast<uint64_t>(tensor.shape[0]) == tensor.n_elements;
  if (is_vector || !reference::can_dequantize(tensor.type)) {
    return {TensorAction::kKeep, tensor.type};
  }
  const int64_t ne0 = tensor.shape[0];
  if (row_fits(target, ne0)) return {TensorAction::kQuantize, target};
  // llama-quantize's choice for a row that does not fit a K-quant (src/
  // llama-quant.cpp, b10587): a 32-block type of at least the same bits; then
  // Q8_0, then F16, which fits any row.
  GgmlType first = GgmlType::kQ8_0;
  switch (target) {
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K: first = GgmlType::kQ4_0; break;
    case GgmlType::kQ4_K: first = GgmlType::kQ5_0; break;
    case GgmlType::kQ5_K: first = GgmlType::kQ5_1; break;
    default: break;
  }
  for (GgmlType fallback : {first, GgmlType::kQ8_0, GgmlType::kF16}) {
    if (row_fits(fallback, ne0)) return {TensorAction::kFallback, fallback};
  }
  return {TensorAction::kKeep, tensor.type};  // not reached: F16 fits all
}

bool is_quantize_target(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16:
    case GgmlType::kQ8_0: case GgmlType::kQ4_0: case GgmlType::kQ4_1:
    case GgmlType::kQ5_0: case GgmlType::kQ5_1: case GgmlType::kQ2_K:
    case GgmlType::kQ3_K: case GgmlType::kQ4_K: case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: case GgmlType::kQ8_K: case GgmlType::kMXFP4:
      return true;
    default:
      return false;
  }
}

uint32_t llama_file_type(GgmlType target) {
  // llama.h, enum llama_ftype (b10587). K-quants: the _S ("small", unmixed)
  // value, since every matrix gets the one type.
  switch (target) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ4_0: return 2;
    case GgmlType::kQ4_1: return 3;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kQ5_0: return 8;
    case GgmlType::kQ5_1: return 9;
    case GgmlType::kQ2_K: return 10;
    case GgmlType::kQ3_K: return 11;
    case GgmlType::kQ4_K: return 14;
    case GgmlType::kQ5_K: return 16;
    case GgmlType::kQ6_K: return 18;
    case GgmlType::kBF16: return 32;
    case GgmlType::kMXFP4: return 38;
    default: return 1024;  // LLAMA_FTYPE_GUESSED: no ftype names Q8_K
  }
}

absl::StatusOr<RequantizeReport> requantize_model(const gguf::GgufModel& model,
                                                  GgmlType target,
                                                  const std::string& output_path,
                                                  int threads) {
  if (!is_quantize_target(target)) {
    return absl::InvalidArgumentError(
        "cannot quantize to " + std::string(ggml_type_info(target).name) +
        ": not one of the types quantize writes");
  }
  if (!reference::can_quantize(target)) {
    return absl::InvalidArgumentError(
        "cannot quantize to " + std::string(ggml_type_info(target).name) +
        ": no reference quantizer for it");
  }
  gguf::GgufWriter writer;
  for (const gguf::KeyValue& kv : model.first().metadata()) {
    if (kv.key.rfind("split.", 0) == 0) continue;
    if (absl::Status s = writer.set_metadata(kv.key, kv.value); !s.ok()) return s;
  }
  if (absl::Status s = writer.set_metadata(
          "general.file_type", gguf::value_u32(llama_file_type(target)));
      !s.ok()) {
    return s;
  }

  RequantizeReport report;
  std::vector<TensorPlan> plans;
  for (const gguf::TensorInfo& t : model.tensors()) {
    TensorPlan plan = plan_tensor(t, target);
    plans.push_back(plan);
    if (absl::Status s = writer.add_tensor(t.name, plan.type, t.shape); !s.ok()) {
      return s;
    }
    report.bytes_in += t.n_bytes;
    switch (plan.action) {
      case TensorAction::kQuantize: ++report.quantized; break;
      case TensorAction::kFallback: ++report.fallback; break;
      case TensorAction::kKeep: ++report.kept; break;
    }
  }
  for (const gguf::TensorInfo& t : writer.tensors()) report.bytes_out += t.n_bytes;

  absl::Status status = writer.write(
      output_path, [&](size_t index, const gguf::TensorInfo& info,
                       std::span<uint8_t> out) -> absl::Status {
        const gguf::TensorInfo& src = model.tensors()[index];
        if (plans[index].action == TensorAction::kKeep) {
          std::copy(src.data, src.data + src.n_bytes, out.begin());
          return absl::OkStatus();
        }
        const int64_t ne0 = src.shape[0];
        const int64_t n_rows = static_cast<int64_t>(src.n_elements) / ne0;
        absl::Status s = convert_rows(src.type, src.data, info.type, out.data(), ne0,
                                      n_rows, threads);
        if (!s.ok()) return absl::Status(s.code(), absl::StrCat(src.name, ": ", s.message()));
        return s;
      });
  if (!status.ok()) return status;
  return report;
}

}  // namespace strata::cli
