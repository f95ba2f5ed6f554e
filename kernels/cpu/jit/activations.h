// Activations quantized on the fly for the generated matmul kernels: each
// f32 row becomes the type ggml pairs with the weight type
// (reference::ops::activation_type), in the unpacked form the kernels read.
//
// Rounding follows reference/ops/matmul.cc, i.e. ggml-cpu's x86
// quantize_row_q8_0 / _q8_1 (scale amax/127 stored as f16, values
// round-half-even(x * 127/amax), Q8_1's sum f16(d * sum q)) and
// quantize_row_q8_K_ref (per 256: scale -127/max, clamp at 127).
//
// Plane shapes for n_rows rows of a matrix with PackedLayout l:
//   q     [n_rows][l.n_in] int8        (quantized kinds)
//   d     [n_rows][l.act_d_stride] f32 scale of each 32-element unit (Q8_K:
//                                      the 256-element scale, repeated)
//   corr  [n_rows][l.corr_len] f32     A(u) of packed_weights.h (min
//                                      correction) or int32 A_z(k) = z sum q
//                                      (zero point), zero after the last
//                                      scale
//   f     [n_rows][l.n_in_pad] f32     float kinds: the values F32/F16/BF16
//                                      represent, zero padded
// Ownership: ActivationBuffers owns its planes; one matmul at a time.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "kernels/cpu/base/thread_pool.h"
#include "kernels/cpu/jit/packed_weights.h"

namespace strata::kernels::jit {

class ActivationBuffers {
 public:
  // For up to max_rows rows of up to max_in elements (any layout).
  ActivationBuffers(int64_t max_rows, int64_t max_in);
  int64_t max_rows() const { return max_rows_; }
  int64_t max_in() const { return max_in_; }

  int8_t* q() { return q_.get(); }
  float* d() { return d_.get(); }
  float* corr() { return corr_.get(); }
  float* f() { return f_.get(); }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  int64_t max_rows_;
  int64_t max_in_;
  std::unique_ptr<int8_t[], Free> q_;
  std::unique_ptr<float[], Free> d_;
  std::unique_ptr<float[], Free> corr_;
  std::unique_ptr<float[], Free> f_;
};

// Fills `buf`'s planes for rows x[0, n_rows) (x: [n_rows][l.n_in] f32) as
// the layout's weight type needs. Requires n_rows <= buf.max_rows() and
// l.n_in <= buf.max_in() (asserted). Rows are split over `pool`.
// Q8_0 / Q8_1 rows of the VNNI tier's layouts (16-row groups) are
// quantized 16 blocks at a time on AVX-512; every tier gives the same
// bytes and floats for the same row (tests/kernels/jit).
void prepare_activations(const PackedLayout& l, const float* x, int64_t n_rows,
                         ActivationBuffers& buf, ThreadPool& pool);

}  // namespace strata::kernels::jit
