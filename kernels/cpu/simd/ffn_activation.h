// The gated feed-forward activations vectorised for AVX2 + FMA + F16C, equal
// bit for bit to reference::ops::swiglu and reference::ops::geglu
// (kernels/cpu/reference/ops/elementwise.h), which hold llama.cpp's CPU
// numerics:
//
//   swiglu  out[i] = gate[i] / (1 + exp(-gate[i])) * up[i], exp as
//           ggml_v_expf (8 lanes, the reference's exp_ggml per lane);
//   geglu   out[i] = GELU(gate[i]) * up[i] with GELU(tanh form) taken at the
//           f16 value of gate[i] and rounded to f16 — as ggml's
//           ggml_vec_geglu_f32 reads its table of GELU over every f16 — so
//           here a 65,536-entry f32 table built once; gate <= -10 gives 0,
//           gate >= 10 gives gate.
//
// Layout: gate, up, out are [n] f32; out may alias gate. Threads: split
// over `pool` in chunks of at least 4096 values (a decode step's row runs
// on the caller). Requires ffn_activation_supported() (AVX2 + FMA + F16C).
// Vectors: `tier` kAvx2 runs 8 lanes; kAvx512 / kAvx512Vnni run 16 lanes
// (AVX-512 F/BW/VL/DQ) when this CPU has that tier, 8 otherwise. Every
// width gives the same values bit for bit.
#pragma once

#include <cstdint>

#include "kernels/cpu/base/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace strata::kernels::simd {

bool ffn_activation_supported();

void swiglu(const float* gate, const float* up, int64_t n, float* out, ThreadPool& pool,
            IsaTier tier);
void geglu(const float* gate, const float* up, int64_t n, float* out, ThreadPool& pool,
           IsaTier tier);

// The same on the output of a fused gate|up matmul: gate_up is
// [n_rows][2 f] (row t: gate then up), out [n_rows][f] and must not overlap
// gate_up. out[t][i] = act(gate_up[t][i]) * gate_up[t][f + i]. Saves
// splitting the rows first. Rows split over `pool` (at least 4096 values a
// chunk).
void swiglu_rows(const float* gate_up, int64_t n_rows, int64_t f, float* out,
                 ThreadPool& pool, IsaTier tier);
void geglu_rows(const float* gate_up, int64_t n_rows, int64_t f, float* out,
                ThreadPool& pool, IsaTier tier);

}  // namespace strata::kernels::simd
