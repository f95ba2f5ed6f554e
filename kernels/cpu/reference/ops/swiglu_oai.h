// gpt-oss's gated feed-forward activation ("swiglu_oai" in llama.cpp; the
// `swiglu` of OpenAI's gpt-oss reference code): a SiLU with a sharpened
// sigmoid, the gate clamped from above, the up projection clamped on both
// sides and shifted by one:
//
//   x      = min(gate, limit)
//   y      = clamp(up, -limit, limit)
//   out    = x / (1 + e^(-alpha x)) * (y + 1)      (x * sigmoid(alpha x))
//
// gpt-oss uses alpha = 1.702 and limit = 7 (kGptOssAlpha, kGptOssLimit; the
// constants llama.cpp's build_moe_ffn hard-codes for LLM_FFN_SWIGLU_OAI_MOE).
// Numerics as ggml-cpu's ggml_compute_forward_swiglu_oai_f32: the
// exponential is the C library's expf (not ggml's vectorised exp), the
// operations in the order above, in f32.
//
// Layout: gate, up, out are [n] f32; out may alias gate or up.
// Threads: split over `pool` in chunks of at least 4096 values (a decode
// step's row runs on the caller).
#pragma once

#include <cstdint>

#include "kernels/cpu/base/thread_pool.h"

namespace strata::reference::ops {

inline constexpr float kGptOssAlpha = 1.702f;
inline constexpr float kGptOssLimit = 7.0f;

void swiglu_oai(const float* gate, const float* up, int64_t n, float alpha, float limit,
                float* out, ThreadPool& pool);

// One value of it (the function above applies this to every element).
float swiglu_oai_one(float gate, float up, float alpha, float limit);

}  // namespace strata::reference::ops
