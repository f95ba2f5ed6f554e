#include "tests/model/big_shapes.h"

#include "absl/strings/str_format.h"
#include "model/gguf_writer.h"

namespace strata::testing {

absl::StatusOr<std::string> write_sparse_split(
    const std::string& prefix, const synth::PublishedModel& model, int parts) {
  const size_t n = model.tensors.size();
  std::string first;
  for (int p = 0; p < parts; ++p) {
    gguf::GgufWriter writer;
    if (p == 0) {
      for (const gguf::KeyValue& k : model.metadata) {
        if (absl::Status s = writer.set_metadata(k.key, k.value); !s.ok())
          return s;
      }
    }
    for (auto [key, value] :
         {std::pair{"split.no", gguf::value_u16(static_cast<uint16_t>(p))},
          std::pair{"split.count",
                    gguf::value_u16(static_cast<uint16_t>(parts))},
          std::pair{"split.tensors.count",
                    gguf::value_i32(static_cast<int32_t>(n))}}) {
      if (absl::Status s = writer.set_metadata(key, value); !s.ok()) return s;
    }
    for (size_t i = n * p / parts; i < n * (p + 1) / parts; ++i) {
      const synth::TensorSpec& t = model.tensors[i];
      if (absl::Status s = writer.add_tensor(t.name, t.type, t.shape); !s.ok())
        return s;
    }
    const std::string path =
        absl::StrFormat("%s-%05d-of-%05d.gguf", prefix, p + 1, parts);
    if (absl::Status s = writer.write_sparse(path); !s.ok()) return s;
    if (p == 0) first = path;
  }
  return first;
}

}  // namespace strata::testing
