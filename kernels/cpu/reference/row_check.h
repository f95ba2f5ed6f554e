// Argument checks shared by dequantize_row and quantize_row (internal).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "model/ggml_type.h"

namespace strata::reference {

// `type` must be a known type (callers check support first).
// OK when n is a non-negative multiple of the type's block size and, for
// n > 0, both pointers are set. `op` names the caller in the message.
inline absl::Status check_row(const char* op, GgmlType type, int64_t n,
                              const void* src, const void* dst) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (n < 0 || n % info.block_size != 0) {
    return absl::InvalidArgumentError(
        std::string(op) + ": " + std::string(info.name) + " row of " +
        std::to_string(n) +
        " elements; expected a non-negative multiple of the block size " +
        std::to_string(info.block_size));
  }
  if (n > 0 && (src == nullptr || dst == nullptr)) {
    return absl::InvalidArgumentError(std::string(op) + ": null buffer for a " +
                                      std::string(info.name) + " row of " +
                                      std::to_string(n) + " elements");
  }
  return absl::OkStatus();
}

// UnimplementedError for a type without a reference implementation; also
// safe for ids that are no ggml type at all.
inline absl::Status unsupported(const char* op, GgmlType type) {
  const auto id = static_cast<uint32_t>(type);
  const GgmlTypeInfo* info = ggml_type_info(id);
  return absl::UnimplementedError(
      std::string(op) + ": no reference implementation for ggml type " +
      std::string(info != nullptr ? info->name : "<unknown>") + " (id " +
      std::to_string(id) + ")");
}

}  // namespace strata::reference
