#include "kernels/cpu/reference/ops/swiglu_oai.h"

#include <algorithm>
#include <cmath>

namespace strata::reference::ops {

float swiglu_oai_one(float gate, float up, float alpha, float limit) {
  const float x = std::min(gate, limit);
  const float y = std::clamp(up, -limit, limit);
  // expf of alpha * (-x), as ggml writes it (the same float as -(alpha x)).
  const float glu = x / (1.0f + std::exp(alpha * (-x)));
  return glu * (y + 1.0f);
}

void swiglu_oai(const float* gate, const float* up, int64_t n, float alpha, float limit,
                float* out, ThreadPool& pool) {
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end; ++i) {
          out[i] = swiglu_oai_one(gate[i], up[i], alpha, limit);
        }
      },
      /*grain=*/4096);
}

}  // namespace strata::reference::ops
