// MatvecTuner (worker/cuda/kernel_tuner.h): the fastest split-K choice per
// matrix shape, kept in a file under the device's key; what cannot be used
// is left out, never fatal.
#include "worker/cuda/kernel_tuner.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/model/gguf_test_util.h"

namespace strata::worker {
namespace {

const MatvecShape kQ4K{GgmlType::kQ4_K, 4096, 14336};
const MatvecShape kF16{GgmlType::kF16, 64, 512};

TEST(MatvecTuner, RecordsTheFastestChoiceTheFirstOfEquals) {
  MatvecTuner t("", "dev");
  EXPECT_FALSE(t.find(kQ4K).has_value());
  EXPECT_EQ(t.record(kQ4K, {3.0, 1.5, 2.0}), 2);
  EXPECT_EQ(t.record(kF16, {1.0, 1.0, 4.0}), 1);
  EXPECT_EQ(*t.find(kQ4K), 2);
  EXPECT_EQ(*t.find(kF16), 1);
  EXPECT_EQ(t.measured(), 2);
  EXPECT_EQ(matvec_shape_text(kQ4K), "Q4_K 4096x14336");
}

TEST(MatvecTuner, AFileOfTheSameKeyIsReadAndOneOfAnotherIsNot) {
  gguf::testing::TempDir dir;
  const std::string path = dir.file("t.json");
  MatvecTuner a(path, "dev A");
  a.record(kQ4K, {3.0, 2.0, 1.0});
  ASSERT_TRUE(a.save().ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  MatvecTuner same(path, "dev A");
  same.load();
  EXPECT_EQ(same.find(kQ4K), 4);
  EXPECT_EQ(same.measured(), 0);
  MatvecTuner other(path, "dev B");
  other.load();
  EXPECT_FALSE(other.find(kQ4K).has_value());
  // The key names the kernel source too.
  EXPECT_NE(tuning_key("dev").find("matvec.cuh "), std::string::npos);
}

TEST(MatvecTuner, MalformedFilesAndEntriesAreLeftOut) {
  gguf::testing::TempDir dir;
  const std::string path = dir.file("t.json");
  for (const std::string& text :
       {std::string("{not json"), std::string("[]"), std::string("{\"key\": 5}"),
        std::string("{\"key\": \"k\", \"matvec\": []}")}) {
    std::ofstream(path) << text;
    MatvecTuner t(path, "k");
    t.load();
    EXPECT_EQ(t.size(), 0) << text;
  }
  // Entries: a choice that is not one of the builds, a non-integer, a good one.
  std::ofstream(path) << R"({"key": "k", "matvec": {"Q4_K 4096x14336": {"row_warps": 3},
      "F16 64x512": {"row_warps": "2"}, "Q6_K 4096x4096": {"row_warps": 2, "ms": [1, "x"]}}})";
  MatvecTuner t(path, "k");
  t.load();
  EXPECT_EQ(t.size(), 1);
  EXPECT_EQ(t.find(MatvecShape{GgmlType::kQ6_K, 4096, 4096}), 2);
}

TEST(MatvecTuner, ASaveThatCannotBeWrittenFailsAndLeavesNoTemporary) {
  gguf::testing::TempDir dir;
  // A directory where the file should be: the rename fails.
  const std::string path = dir.file("t.json");
  std::filesystem::create_directories(path + "/inside");
  MatvecTuner t(path, "k");
  t.record(kQ4K, {1.0, 2.0, 3.0});
  EXPECT_FALSE(t.save().ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

}  // namespace
}  // namespace strata::worker
