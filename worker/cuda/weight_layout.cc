// The device's weight row layout (weight_layout.h).
#include "worker/cuda/weight_layout.h"

#include <cstring>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"

namespace strata::worker::cuda_kernels {
namespace {

// A field group: bytes [offset, offset + bytes) of a GGUF block.
struct Group {
  int offset;
  int bytes;
};

// `type`'s groups in section order (weight_layout.h's table); empty for a
// type whose device rows are its GGUF rows. Offsets: block_layouts.h.
std::span<const Group> groups(GgmlType type) {
  static constexpr Group kQ4_0[] = {{2, 16}, {0, 2}};
  static constexpr Group kQ4_1[] = {{4, 16}, {0, 4}};
  static constexpr Group kQ5_0[] = {{6, 16}, {2, 4}, {0, 2}};
  static constexpr Group kQ5_1[] = {{8, 16}, {4, 4}, {0, 4}};
  static constexpr Group kQ8_0[] = {{2, 32}, {0, 2}};
  static constexpr Group kMXFP4[] = {{1, 16}, {0, 1}};
  static constexpr Group kQ6_K[] = {{0, 208}, {208, 2}};
  switch (type) {
    case GgmlType::kQ4_0: return kQ4_0;
    case GgmlType::kQ4_1: return kQ4_1;
    case GgmlType::kQ5_0: return kQ5_0;
    case GgmlType::kQ5_1: return kQ5_1;
    case GgmlType::kQ8_0: return kQ8_0;
    case GgmlType::kMXFP4: return kMXFP4;
    case GgmlType::kQ6_K: return kQ6_K;
    default: return {};
  }
}

}  // namespace

bool regrouped(GgmlType type) { return !groups(type).empty(); }

absl::StatusOr<int64_t> device_row_bytes(GgmlType type, int64_t n_cols) {
  const std::optional<int64_t> gguf = ggml_row_bytes(type, n_cols);
  if (!gguf.has_value() || n_cols <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(ggml_type_info(type).name), ": ", n_cols,
                                                   " values are not whole blocks"));
  }
  if (!regrouped(type)) return *gguf;
  return (*gguf + 15) / 16 * 16;
}

absl::StatusOr<std::vector<uint8_t>> device_rows(GgmlType type, int64_t n_cols, int64_t n_rows,
                                                 const uint8_t* src) {
  absl::StatusOr<int64_t> out_row = device_row_bytes(type, n_cols);
  if (!out_row.ok()) return out_row.status();
  const int64_t in_row = *ggml_row_bytes(type, n_cols);
  std::vector<uint8_t> out(static_cast<size_t>(n_rows * *out_row), 0);
  const std::span<const Group> gs = groups(type);
  if (gs.empty()) {
    if (n_rows > 0) std::memcpy(out.data(), src, out.size());
    return out;
  }
  const int64_t block = ggml_type_info(type).type_size;
  const int64_t n_blocks = in_row / block;
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* in = src + r * in_row;
    uint8_t* section = out.data() + r * *out_row;
    for (const Group& g : gs) {
      for (int64_t b = 0; b < n_blocks; ++b) {
        std::memcpy(section + b * g.bytes, in + b * block + g.offset, static_cast<size_t>(g.bytes));
      }
      section += n_blocks * g.bytes;
    }
  }
  return out;
}

}  // namespace strata::worker::cuda_kernels
