// Deterministic test data for the quantizer tests: 256-element blocks of
// ragged distributions (no Python needed).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace strata::testing {

struct TestBlocks {
  std::vector<float> x;            // blocks * 256 values
  std::vector<std::string> kinds;  // one name per 256-element block
};

// `per_kind` blocks of each distribution, from a fixed seed.
inline TestBlocks make_test_blocks(int per_kind, uint32_t seed = 12345) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::exponential_distribution<float> exponential(1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  TestBlocks out;
  auto add = [&](const std::string& kind, auto&& make) {
    for (int b = 0; b < per_kind; ++b) {
      const float scale =
          std::pow(10.0f, 6.0f * unit(rng) - 3.0f);  // 1e-3..1e3
      const float level = 3.0f * uniform(rng);
      for (int e = 0; e < 256; ++e) out.x.push_back(make(e, scale, level));
      out.kinds.push_back(kind);
    }
  };
  add("gaussian", [&](int, float, float) { return normal(rng); });
  add("uniform", [&](int, float, float) { return uniform(rng); });
  add("wide_range", [&](int, float s, float) { return s * normal(rng); });
  add("outliers", [&](int, float, float) {
    return (unit(rng) < 0.02f ? 40.0f : 1.0f) * normal(rng);
  });
  add("laplace",
      [&](int, float, float) { return exponential(rng) - exponential(rng); });
  add("negative_only",
      [&](int, float, float) { return -std::fabs(normal(rng)); });
  add("positive_only",
      [&](int, float, float) { return std::fabs(normal(rng)) + 0.5f; });
  add("zeros", [&](int, float, float) { return 0.0f; });
  add("constant", [&](int, float, float l) { return l; });
  add("tiny", [&](int, float, float) { return 1e-5f * normal(rng); });
  add("sparse",
      [&](int, float, float) { return unit(rng) < 0.1f ? normal(rng) : 0.0f; });
  add("single_spike",
      [&](int e, float s, float) { return e == 77 ? s : 0.0f; });
  add("opposite_extremes", [&](int e, float s, float) {
    return e % 32 == 0 ? s : (e % 32 == 1 ? -s : 0.1f * s * uniform(rng));
  });
  // Sub-blocks of 16 whose magnitudes differ by up to 10^3.
  float sub_scale = 1.0f;
  add("mixed_sub_blocks", [&](int e, float, float) {
    if (e % 16 == 0) sub_scale = std::pow(10.0f, 3.0f * unit(rng) - 2.0f);
    return sub_scale * normal(rng);
  });
  return out;
}

}  // namespace strata::testing
