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

absl::StatusOr<std::vector<kernels::WeightMatrix>> shard_experts(const gguf::GgufModel& model,
                                                                 const std::string& name,
                                                                 int64_t n_in, int64_t n_out,
                                                                 int64_t n_expert) {
  const gguf::TensorInfo* t = model.find_tensor(name);
  if (t == nullptr) return model.missing_tensor(name);
  if (absl::Status st = check_mapped(*t); !st.ok()) return st;
  if (t->shape.size() != 3 || t->shape[0] != n_in || t->shape[1] != n_out ||
      t->shape[2] != n_expert) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": shape ", shape_text(t->shape),
                                                   ", expected [", n_in, ", ", n_out, ", ",
                                                   n_expert, "] (n_in, n_out, n_expert)"));
  }
  // The reader checked n_bytes against the shape and type; each slice is an
  // equal share of whole rows.
  const uint64_t slice = t->n_bytes / static_cast<uint64_t>(n_expert);
  std::vector<kernels::WeightMatrix> out;
  out.reserve(static_cast<size_t>(n_expert));
  for (int64_t e = 0; e < n_expert; ++e) {
    const std::string expert = absl::StrCat(name, " expert ", e);
    absl::StatusOr<kernels::WeightMatrix> m = reference::ops::make_weight_matrix(
        expert.c_str(), t->type, t->data + e * slice, n_in, n_out, slice);
    if (!m.ok()) return m.status();
    out.push_back(*m);
  }
  return out;
}

absl::StatusOr<std::vector<float>> shard_table(const gguf::GgufModel& model,
                                               const std::string& name, int64_t n0, int64_t n1) {
  const gguf::TensorInfo* t = model.find_tensor(name);
  if (t == nullptr) return model.missing_tensor(name);
  if (absl::Status st = check_mapped(*t); !st.ok()) return st;
  if (t->shape.size() != 2 || t->shape[0] != n0 || t->shape[1] != n1) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": shape ", shape_text(t->shape),
                                                   ", expected [", n0, ", ", n1, "]"));
  }
  std::vector<float> v(static_cast<size_t>(n0 * n1));
  absl::Status st = reference::dequantize_row(t->type, t->data, n0 * n1, v.data());
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", st.message()));
  return v;
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
