#include "worker/shard_tensors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/ops/matmul.h"

namespace strata::worker {

std::string shape_text(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status check_mapped(const gguf::TensorInfo& t) {
  if (t.data != nullptr) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      t.name, ": split part ", t.split_index + 1,
      " was not mapped (the shard's tensor filter did not ask for it)"));
}

absl::StatusOr<kernels::WeightMatrix> shard_matrix(const gguf::GgufModel& model,
                                                   const std::string& name, int64_t n_in,
                                                   int64_t n_out, bool optional,
                                                   bool one_row_as_vector) {
  const gguf::TensorInfo* t = model.find_tensor(name);
  if (t == nullptr) {
    if (optional) return kernels::WeightMatrix{};
    return model.missing_tensor(name);
  }
  if (absl::Status st = check_mapped(*t); !st.ok()) return st;
  const bool as_vector =
      one_row_as_vector && n_out == 1 && t->shape.size() == 1 && t->shape[0] == n_in;
  if (!as_vector && (t->shape.size() != 2 || t->shape[0] != n_in || t->shape[1] != n_out)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": shape ", shape_text(t->shape),
                                                   ", expected [", n_in, ", ", n_out, "]"));
  }
  return reference::ops::make_weight_matrix(name.c_str(), t->type, t->data, n_in, n_out,
                                            t->n_bytes);
}

absl::StatusOr<std::vector<float>> shard_vector(const gguf::GgufModel& model,
                                                const std::string& name, int64_t n,
                                                bool optional) {
  const gguf::TensorInfo* t = model.find_tensor(name);
  if (t == nullptr) {
    if (optional) return std::vector<float>{};
    return model.missing_tensor(name);
  }
  if (absl::Status st = check_mapped(*t); !st.ok()) return st;
  if (t->n_elements != static_cast<uint64_t>(n) || t->shape[0] != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": shape ", shape_text(t->shape), ", expected [", n, "]"));
  }
  std::vector<float> v(static_cast<size_t>(n));
  absl::Status st = reference::dequantize_row(t->type, t->data, n, v.data());
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", st.message()));
  return v;
}

}  // namespace strata::worker
