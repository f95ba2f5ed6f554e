// HugePageArena: blocks are aligned, zeroed, do not overlap, and a chunk is
// given back once everything in it is released.
#include "kernels/cpu/jit/huge_page_arena.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace strata::kernels::jit {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(HugePageArena, BlocksAreAlignedZeroedAndDisjoint) {
  HugePageArena& arena = HugePageArena::global();
  const size_t before = arena.reserved_bytes();
  std::mt19937 rng(7);
  std::vector<std::pair<uint8_t*, size_t>> blocks;
  // Sizes from empty to larger than a chunk, so shared and own chunks mix.
  const size_t sizes[] = {0, 1, 63, 64, 65, 4095, 300000, 3 * kMiB, 20 * kMiB, 40 * kMiB};
  for (int round = 0; round < 3; ++round) {
    for (size_t n : sizes) {
      auto* p = static_cast<uint8_t*>(arena.allocate(n));
      ASSERT_NE(p, nullptr) << n;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n;
      for (size_t i = 0; i < n; i += 4093) ASSERT_EQ(p[i], 0) << n << " @" << i;
      if (n > 0) {
        ASSERT_EQ(p[n - 1], 0) << n;
      }
      std::memset(p, 0xA5, n);  // dirty it: a reused block must come back zeroed
      blocks.emplace_back(p, n);
    }
  }
  std::vector<std::pair<uint8_t*, size_t>> sorted = blocks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i) {
    EXPECT_LE(sorted[i - 1].first + sorted[i - 1].second, sorted[i].first);
  }
  EXPECT_GT(arena.reserved_bytes(), before);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (auto& [p, n] : blocks) arena.release(p);
  // What stays is at most the chunk still being filled (32 MiB).
  EXPECT_LE(arena.reserved_bytes(), before + 32 * kMiB);

  // The space comes back zeroed.
  auto* again = static_cast<uint8_t*>(arena.allocate(5 * kMiB));
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(std::all_of(again, again + 5 * kMiB, [](uint8_t b) { return b == 0; }));
  arena.release(again);
  arena.release(nullptr);  // ignored
}

TEST(HugePageArena, RefusesImpossibleSizes) {
  EXPECT_EQ(HugePageArena::global().allocate(SIZE_MAX), nullptr);
  EXPECT_EQ(HugePageArena::global().allocate(SIZE_MAX - 10), nullptr);
}

}  // namespace
}  // namespace strata::kernels::jit
