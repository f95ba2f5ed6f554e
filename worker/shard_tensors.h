// The checked tensors of a shard, for every backend's loader (worker/cpu,
// worker/cuda): a weight matrix of an expected shape and a vector converted
// to f32, looked up by name in a GgufModel. Shapes are GGUF's, ne0 first: a
// matrix of n_out rows of n_in elements is [n_in, n_out].
//
// Errors name the tensor: "blk.3.attn_q.weight: missing" (or, in a split
// model, NotFound naming the absent parts: GgufModel::missing_tensor),
// "blk.0.ffn_up.weight: shape [576, 1000], expected [576, 1536]", a type
// the conversion or the matrix does not take (make_weight_matrix's and
// dequantize_row's messages after the name), and Internal for a tensor of
// a split part the shard's filter left unmapped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cpu/base/op_types.h"
#include "model/gguf_reader.h"

namespace strata::worker {

// "[576, 1536]".
std::string shape_text(const std::vector<int64_t>& shape);

// Internal when `t` lies in a split part this process did not map.
absl::Status check_mapped(const gguf::TensorInfo& t);

// The view of matrix `name` [n_in, n_out] (reference::ops::make_weight_matrix's
// checks of its type and bytes). `optional`: an absent tensor gives an empty
// view (data nullptr). `one_row_as_vector`: a matrix of one row stored as a
// vector [n_in] is taken too.
absl::StatusOr<kernels::WeightMatrix> shard_matrix(const gguf::GgufModel& model,
                                                   const std::string& name, int64_t n_in,
                                                   int64_t n_out, bool optional = false,
                                                   bool one_row_as_vector = false);

// The n_expert matrices [n_in, n_out] of the 3-D expert tensor `name`
// (ne = [n_in, n_out, n_expert]): expert e's is the view of slice e. The
// slices are contiguous: expert e's data is the first's plus e slices.
absl::StatusOr<std::vector<kernels::WeightMatrix>> shard_experts(const gguf::GgufModel& model,
                                                                 const std::string& name,
                                                                 int64_t n_in, int64_t n_out,
                                                                 int64_t n_expert);

// Table `name` [n0, n1] (n1 rows of n0) as f32: per-expert biases.
absl::StatusOr<std::vector<float>> shard_table(const gguf::GgufModel& model,
                                               const std::string& name, int64_t n0, int64_t n1);

// Vector `name` of n elements as f32 (dequantized from its type). Empty
// when `optional` and absent.
absl::StatusOr<std::vector<float>> shard_vector(const gguf::GgufModel& model,
                                                const std::string& name, int64_t n,
                                                bool optional = false);

}  // namespace strata::worker
