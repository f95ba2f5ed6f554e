// worker::first_not_finite against std::isfinite, element by element: every
// kind of non-finite value (±Inf, quiet and signalling NaNs, NaNs with a
// sign or a payload) at every position of buffers whose lengths straddle
// the 8-value step, beside the finite values nearest to them (the largest
// float, denormals, zeros).
#include "worker/finite_scan.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace strata::worker {
namespace {

int64_t first_by_isfinite(const std::vector<float>& x) {
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return static_cast<int64_t>(i);
  }
  return static_cast<int64_t>(x.size());
}

TEST(FiniteScan, FindsTheFirstNonFiniteValueAtEveryPosition) {
  const float inf = std::numeric_limits<float>::infinity();
  const float bad[] = {inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::signaling_NaN(),
                       std::bit_cast<float>(0xFFC00001u), std::bit_cast<float>(0x7F800001u)};
  const float edge[] = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::denorm_min(), -0.0f, 0.0f, 1.0f};
  for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 33, 262}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[i] = edge[i % std::size(edge)];
    ASSERT_EQ(first_not_finite(x.data(), n), n) << "all finite, n " << n;
    for (int64_t at = 0; at < n; ++at) {
      for (float b : bad) {
        std::vector<float> y = x;
        y[at] = b;
        if (at + 3 < n) y[at + 3] = inf;  // a later one must not win
        ASSERT_EQ(first_not_finite(y.data(), n), first_by_isfinite(y))
            << "n " << n << ", at " << at << ", bits " << std::bit_cast<uint32_t>(b);
        ASSERT_EQ(first_not_finite(y.data(), n), at);
      }
    }
  }
}

}  // namespace
}  // namespace strata::worker
