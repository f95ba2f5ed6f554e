// KernelTuner (worker/cuda/kernel_tuner.h): the fastest split-K and block
// choice and tensor-core form per matrix shape, kept in a file under the
// device's key; what cannot be used is left out, never fatal.
#include "worker/cuda/kernel_tuner.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/model/gguf_test_util.h"

namespace strata::worker {
namespace {

const MatvecShape kQ4K{GgmlType::kQ4_K, 4096, 14336};
const MatvecShape kF16{GgmlType::kF16, 64, 512};

// The candidates: each split with each block that holds whole rows of it
// (4 warps a row need 128 threads or more).
TEST(KernelTuner, CandidatesAreEverySplitWithEveryBlockThatHoldsItsRows) {
  const std::vector<MatvecChoice> want = {{1, 64}, {1, 128}, {1, 256}, {2, 64},
                                          {2, 128}, {2, 256}, {4, 128}, {4, 256}};
  EXPECT_EQ(matvec_candidates(), want);
  EXPECT_EQ(matvec_choice_text({4, 256}), "w4 t256");
}

// Times in matvec_candidates() order; the fastest wins, the first of equals.
TEST(KernelTuner, RecordsTheFastestChoiceTheFirstOfEquals) {
  KernelTuner t("", "dev");
  EXPECT_FALSE(t.find(kQ4K).has_value());
  EXPECT_EQ(t.record(kQ4K, {3.0, 2.5, 2.0, 4.0, 1.5, 2.0, 1.6, 9.0}), (MatvecChoice{2, 128}));
  EXPECT_EQ(t.record(kF16, {1.0, 1.0, 4.0, 1.0, 2.0, 2.0, 2.0, 2.0}), (MatvecChoice{1, 64}));
  EXPECT_EQ(*t.find(kQ4K), (MatvecChoice{2, 128}));
  EXPECT_EQ(*t.find(kF16), (MatvecChoice{1, 64}));
  EXPECT_EQ(t.measured(), 2);
  EXPECT_EQ(matvec_shape_text(kQ4K), "Q4_K 4096x14336");
  // The int8 form of the kernel is another shape: its own measurement.
  const MatvecShape q4k_i8{GgmlType::kQ4_K, 4096, 14336, /*int8=*/true};
  EXPECT_EQ(matvec_shape_text(q4k_i8), "Q4_K 4096x14336 i8");
  EXPECT_FALSE(t.find(q4k_i8).has_value());
  EXPECT_EQ(t.record(q4k_i8, {1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0}), (MatvecChoice{1, 64}));
  EXPECT_EQ(*t.find(kQ4K), (MatvecChoice{2, 128}));
}

TEST(KernelTuner, AFileOfTheSameKeyIsReadAndOneOfAnotherIsNot) {
  gguf::testing::TempDir dir;
  const std::string path = dir.file("t.json");
  KernelTuner a(path, "dev A");
  a.record(kQ4K, {3.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 1.0});
  ASSERT_TRUE(a.save().ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  KernelTuner same(path, "dev A");
  same.load();
  EXPECT_EQ(same.find(kQ4K), (MatvecChoice{4, 256}));
  EXPECT_EQ(same.measured(), 0);
  KernelTuner other(path, "dev B");
  other.load();
  EXPECT_FALSE(other.find(kQ4K).has_value());
  // The key names the kernel sources too.
  EXPECT_NE(tuning_key("dev").find("matvec.cuh "), std::string::npos);
  EXPECT_NE(tuning_key("dev").find("mma.cuh "), std::string::npos);
}

// The tensor-core forms: record_prefill keeps each form's time beside the
// shape's others and gives the fastest of its candidates; find_prefill the
// fastest of the candidates asked for, only when each has a time (a form
// never timed, as wgmma on a device of 8.0, is measured first); the int8
// flag is no part of the shape, the chunk's rows are; the times survive a
// save and a load, and a
// form's time that is not a number is left out.
TEST(KernelTuner, PrefillFormsAreTheFastestOfTheFormsAsked) {
  using F = PrefillForm;
  gguf::testing::TempDir dir;
  const std::string path = dir.file("t.json");
  KernelTuner t(path, "dev");
  EXPECT_FALSE(t.find_prefill(kQ4K, 512, {F::kInt8, F::kF16}).has_value());
  EXPECT_EQ(t.record_prefill(kQ4K, 512, {F::kInt8, F::kF16}, {2.0, 3.0}), F::kInt8);
  EXPECT_EQ(t.find_prefill(kQ4K, 512, {F::kInt8, F::kF16}), F::kInt8);
  EXPECT_EQ(t.find_prefill(kQ4K, 512, {F::kF16}), F::kF16);
  EXPECT_FALSE(t.find_prefill(kQ4K, 512, {F::kInt8, F::kWgmma, F::kF16}).has_value());
  EXPECT_EQ(t.record_prefill(kQ4K, 512, {F::kWgmma}, {1.0}), F::kWgmma);
  EXPECT_EQ(t.find_prefill(kQ4K, 512, {F::kInt8, F::kWgmma, F::kF16}), F::kWgmma);
  EXPECT_EQ(t.find_prefill(kQ4K, 512, {F::kInt8, F::kF16}), F::kInt8);
  const MatvecShape q4k_i8{GgmlType::kQ4_K, 4096, 14336, /*int8=*/true};
  EXPECT_EQ(t.find_prefill(q4k_i8, 512, {F::kInt8, F::kWgmma, F::kF16}), F::kWgmma);
  // Equal times: the first candidate.
  EXPECT_EQ(t.record_prefill(kF16, 512, {F::kInt8, F::kF16}, {1.0, 1.0}), F::kInt8);
  EXPECT_EQ(t.measured(), 3);
  ASSERT_TRUE(t.save().ok());
  KernelTuner again(path, "dev");
  again.load();
  EXPECT_EQ(again.find_prefill(kQ4K, 512, {F::kInt8, F::kWgmma, F::kF16}), F::kWgmma);
  EXPECT_EQ(again.find_prefill(kF16, 512, {F::kF16, F::kInt8}), F::kF16);
  EXPECT_EQ(again.measured(), 0);
  EXPECT_EQ(prefill_form_text(F::kWgmma), "wgmma");
  // Another chunk's rows: another entry.
  EXPECT_FALSE(again.find_prefill(kQ4K, 256, {F::kF16}).has_value());
  std::ofstream(path) << R"({"key": "dev", "matvec": {}, "prefill": {"Q4_K 4096x14336 @512":
      {"i8": "fast", "f16": 2.0}, "F16 64x512 @512": 7}})";
  KernelTuner odd(path, "dev");
  odd.load();
  EXPECT_FALSE(odd.find_prefill(kQ4K, 512, {F::kInt8, F::kF16}).has_value());
  EXPECT_EQ(odd.find_prefill(kQ4K, 512, {F::kF16}), F::kF16);
  EXPECT_FALSE(odd.find_prefill(kF16, 512, {F::kF16}).has_value());
}

TEST(KernelTuner, MalformedFilesAndEntriesAreLeftOut) {
  gguf::testing::TempDir dir;
  const std::string path = dir.file("t.json");
  for (const std::string& text :
       {std::string("{not json"), std::string("[]"), std::string("{\"key\": 5}"),
        std::string("{\"key\": \"k\", \"matvec\": []}")}) {
    std::ofstream(path) << text;
    KernelTuner t(path, "k");
    t.load();
    EXPECT_EQ(t.size(), 0) << text;
  }
  // Entries: a split that is not a build, a block that is not a choice, 4
  // warps a row in a block of 2 warps, no block, a non-integer, a good one
  // (its times' odd entry left out).
  std::ofstream(path) << R"({"key": "k", "matvec": {
      "Q4_K 4096x14336": {"row_warps": 3, "threads": 128},
      "Q4_K 4096x4096": {"row_warps": 1, "threads": 96},
      "Q5_K 4096x4096": {"row_warps": 4, "threads": 64},
      "Q8_0 4096x4096": {"row_warps": 1},
      "F16 64x512": {"row_warps": "2", "threads": 128},
      "Q6_K 4096x4096": {"row_warps": 2, "threads": 256, "ms": {"w2 t256": 1, "w1 t64": "x"}}}})";
  KernelTuner t(path, "k");
  t.load();
  EXPECT_EQ(t.size(), 1);
  EXPECT_EQ(t.find(MatvecShape{GgmlType::kQ6_K, 4096, 4096}), (MatvecChoice{2, 256}));
}

TEST(KernelTuner, ASaveThatCannotBeWrittenFailsAndLeavesNoTemporary) {
  gguf::testing::TempDir dir;
  // A directory where the file should be: the rename fails.
  const std::string path = dir.file("t.json");
  std::filesystem::create_directories(path + "/inside");
  KernelTuner t(path, "k");
  t.record(kQ4K, {1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0});
  EXPECT_FALSE(t.save().ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

}  // namespace
}  // namespace strata::worker
