// Requantizing a whole model (what `strata quantize` does). Policy, per tensor
// (docs/quantize.md):
//   - 1-D tensors (norms, biases, rope_freqs) are copied as the source has them;
//   - tensors whose source type has no reference dequantizer are copied;
//   - every other tensor becomes the target type when its row length (ne0) is
//     a multiple of the target's block size, else the first type of the
//     fallback chain that fits (Q4_K -> Q5_0, Q5_K -> Q5_1, Q2_K/Q3_K -> Q4_0,
//     then Q8_0, then F16), as llama-quantize does for such rows;
//   - tied weights stay tied: no tensor is added or removed;
//   - metadata is copied, general.file_type set to the llama_ftype of the
//     target (llama.h, enum llama_ftype), split.* keys dropped (one output file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/ggml_type.h"
#include "model/gguf_reader.h"

namespace strata::cli {

// What became of one tensor.
enum class TensorAction { kQuantize, kFallback, kKeep };

struct TensorPlan {
  TensorAction action = TensorAction::kKeep;
  GgmlType type = GgmlType::kF32;  // the output type
};

// The output type of `tensor` when the model is quantized to `target`.
TensorPlan plan_tensor(const gguf::TensorInfo& tensor, GgmlType target);

// True for the types a model may be quantized to: those models store
// weights in and the engine multiplies (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0
// Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K MXFP4). False for Q8_1, which ggml
// uses only for activations, and for every other type.
bool is_quantize_target(GgmlType type);

// Their names, for help and error texts.
inline constexpr const char* kQuantizeTargetNames =
    "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K MXFP4";

// llama_ftype value for a model whose matrices are `target` (llama.h).
uint32_t llama_file_type(GgmlType target);

struct RequantizeReport {
  size_t quantized = 0;  // tensors written as the target type
  size_t fallback = 0;   // tensors written as a fallback type
  size_t kept = 0;       // tensors copied as they were
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
};

// Writes `model` to `output_path` with its matrices requantized to `target`
// using `threads` threads. Holds one tensor at a time in memory. Errors:
// InvalidArgument when `target` cannot be quantized to, I/O errors from the
// writer; a partial output file is removed.
absl::StatusOr<RequantizeReport> requantize_model(const gguf::GgufModel& model,
                                                  GgmlType target,
                                                  const std::string& output_path,
                                                  int threads);

}  // namespace strata::cli
