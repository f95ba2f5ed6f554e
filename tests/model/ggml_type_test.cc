// ggml type names as users write them: ggml's spelling in any case (as
// llama-quantize takes "q4_k" and "Q4_K"), nothing else.
#include <gtest/gtest.h>

#include "model/ggml_type.h"

namespace strata {
namespace {

TEST(GgmlTypeName, AnyCaseOfGgmlsSpelling) {
  EXPECT_EQ(ggml_type_from_name("Q4_K"), GgmlType::kQ4_K);
  EXPECT_EQ(ggml_type_from_name("q4_k"), GgmlType::kQ4_K);
  EXPECT_EQ(ggml_type_from_name("q8_0"), GgmlType::kQ8_0);
  EXPECT_EQ(ggml_type_from_name("Mxfp4"), GgmlType::kMXFP4);
  EXPECT_EQ(ggml_type_from_name("bf16"), GgmlType::kBF16);
  // Every known name maps back to its own type.
  for (uint32_t id = 0; id < 64; ++id) {
    const GgmlTypeInfo* info = ggml_type_info(id);
    if (info == nullptr) continue;
    EXPECT_EQ(ggml_type_from_name(info->name), info->type) << info->name;
  }
}

TEST(GgmlTypeName, OtherSpellingsAreUnknown) {
  for (const char* name : {"", "Q4", "Q4_K ", " Q4_K", "Q4-K", "Q4_KM", "Q4_K_M", "q4_x"}) {
    EXPECT_FALSE(ggml_type_from_name(name).has_value()) << "'" << name << "'";
  }
}

}  // namespace
}  // namespace strata
