#include "kernels/cpu/reference/ops/matmul.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/reference/block_layouts.h"
#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/fp16.h"

namespace strata::reference::ops {

using kernels::WeightMatrix;

namespace {

bool is_legacy_integer(GgmlType t) {
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1 ||
         t == GgmlType::kQ5_0 || t == GgmlType::kQ5_1 || t == GgmlType::kQ8_0;
}

// Round half to even for |v| < 2^22 without a libm call (ggml's
// nearest_int uses the same trick; _mm256_round_ps gives the same result).
inline float round_even(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

// --- Activation quantizers (ggml-cpu x86 quantize_row_q8_0 / q8_1 and
// quantize_row_q8_K_ref): facts from llama.cpp, code our own. -------------

void quantize_q8_1(const float* x, int64_t n, BlockQ8_1* out) {
  for (int64_t b = 0; b < n / kQK8_1; ++b) {
    const float* xb = x + b * kQK8_1;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_1; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK8_1; ++j) {
      const int q = static_cast<int>(round_even(xb[j] * id));
      out[b].qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    out[b].d = f32_to_f16(d);
    out[b].s = f32_to_f16(d * static_cast<float>(sum));
  }
}

// Q8_K as values: per 256 elements, scale -127/max of the element with the
// largest magnitude, round half to even, clamp at 127; value = d * q.
void round_q8_k(const float* x, int64_t n, float* out) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    float* ob = out + b * kQK_K;
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    if (amax == 0.0f) {
      std::fill(ob, ob + kQK_K, 0.0f);
      continue;
    }
    const float iscale = -127.0f / max;
    const float d = 1.0f / iscale;
    for (int j = 0; j < kQK_K; ++j) {
      const float q = std::min(127.0f, round_even(iscale * xb[j]));
      ob[j] = d * q;
    }
  }
}

int nibble_lo(uint8_t b) { return b & 0x0F; }
int nibble_hi(uint8_t b) { return b >> 4; }

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// --- Legacy-quant weights: a row is unpacked once into int8 values and
// per-block scales (and offsets), then dotted with every activation row.

// One row of activations or weights in unpacked form: int8 values and one
// scale (and, for Q8_1 / *_1 weights, one offset term) per 32-element block.
struct UnpackedRow {
  int8_t* q;  // [n]
  float* d;   // [n / 32]
  float* m;   // [n / 32]: weights' offset m; activations' f16(d * sum q)
};

void unpack_weight_row(GgmlType type, const uint8_t* row, int64_t nb,
                       UnpackedRow out) {
  for (int64_t b = 0; b < nb; ++b) {
    int8_t* q = out.q + b * 32;
    switch (type) {
      case GgmlType::kQ4_0: {
        BlockQ4_0 w;
        std::memcpy(&w, row + b * sizeof(w), sizeof(w));
        for (int j = 0; j < 16; ++j) {
          q[j] = static_cast<int8_t>(nibble_lo(w.qs[j]) - 8);
          q[j + 16] = static_cast<int8_t>(nibble_hi(w.qs[j]) - 8);
        }
        out.d[b] = f16_to_f32(w.d);
        out.m[b] = 0.0f;
        break;
      }
      case GgmlType::kQ4_1: {
        BlockQ4_1 w;
        std::memcpy(&w, row + b * sizeof(w), sizeof(w));
        for (int j = 0; j < 16; ++j) {
          q[j] = static_cast<int8_t>(nibble_lo(w.qs[j]));
          q[j + 16] = static_cast<int8_t>(nibble_hi(w.qs[j]));
        }
        out.d[b] = f16_to_f32(w.d);
        out.m[b] = f16_to_f32(w.m);
        break;
      }
      case GgmlType::kQ5_0:
      case GgmlType::kQ5_1: {
        const bool has_min = type == GgmlType::kQ5_1;
        uint16_t d, m = 0;
        uint8_t qh_bytes[4], qs[16];
        const uint8_t* p = row + b * (has_min ? sizeof(BlockQ5_1)
                                              : sizeof(BlockQ5_0));
        std::memcpy(&d, p, 2);
        if (has_min) std::memcpy(&m, p + 2, 2);
        std::memcpy(qh_bytes, p + (has_min ? 4 : 2), 4);
        std::memcpy(qs, p + (has_min ? 8 : 6), 16);
        const uint32_t qh = load_u32(qh_bytes);
        const int bias = has_min ? 0 : 16;
        for (int j = 0; j < 16; ++j) {
          q[j] = static_cast<int8_t>(
              (nibble_lo(qs[j]) | static_cast<int>((qh >> j) & 1) << 4) - bias);
          q[j + 16] = static_cast<int8_t>(
              (nibble_hi(qs[j]) | static_cast<int>((qh >> (j + 16)) & 1) << 4) -
              bias);
        }
        out.d[b] = f16_to_f32(d);
        out.m[b] = has_min ? f16_to_f32(m) : 0.0f;
        break;
      }
      case GgmlType::kQ8_0: {
        BlockQ8_0 w;
        std::memcpy(&w, row + b * sizeof(w), sizeof(w));
        std::memcpy(q, w.qs, 32);
        out.d[b] = f16_to_f32(w.d);
        out.m[b] = 0.0f;
        break;
      }
      default:
        assert(false && "not a legacy integer type");
    }
  }
}

// Quantizes activations to Q8_0 / Q8_1 in unpacked form (the values ggml's
// x86 quantize_row_q8_0 / _q8_1 produce; m = f16(d * sum q) for Q8_1).
void quantize_activation_row(const float* x, int64_t n, UnpackedRow out) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    BlockQ8_1 blk;
    quantize_q8_1(x + b * kQK8_0, kQK8_0, &blk);
    std::memcpy(out.q + b * 32, blk.qs, 32);
    out.d[b] = f16_to_f32(blk.d);
    out.m[b] = f16_to_f32(blk.s);
  }
}

int32_t dot_i8_32(const int8_t* a, const int8_t* b) {
  int32_t s = 0;
  for (int j = 0; j < 32; ++j) s += int32_t{a[j]} * int32_t{b[j]};
  return s;
}

// sum_b d_w d_a sumi_b (+ sum_b m_w s_a for weights with an offset).
float dot_unpacked(const UnpackedRow& w, const UnpackedRow& a, int64_t nb,
                   bool has_min) {
  float acc = 0.0f;
  float acc_m = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    acc += w.d[b] * a.d[b] * static_cast<float>(dot_i8_32(w.q + b * 32, a.q + b * 32));
  }
  if (has_min) {
    for (int64_t b = 0; b < nb; ++b) acc_m += w.m[b] * a.m[b];
  }
  return acc + acc_m;
}

// f32 dot product with 8 partial sums (as a SIMD lane set would).
float dot_f32(const float* a, const float* b, int64_t n) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] += a[i + l] * b[i + l];
  }
  float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
              ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

GgmlType activation_type(GgmlType weight) {
  switch (weight) {
    case GgmlType::kF16:
      return GgmlType::kF16;
    case GgmlType::kBF16:
      return GgmlType::kBF16;
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
    case GgmlType::kQ8_0:
    case GgmlType::kMXFP4:
      return GgmlType::kQ8_0;
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
      return GgmlType::kQ8_1;
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kQ8_K:
      return GgmlType::kQ8_K;
    default:
      return GgmlType::kF32;
  }
}

void quantize_q8_1_row(const float* x, int64_t n, int8_t* q, float* d, float* s) {
  for (int64_t b = 0; b < n / kQK8_1; ++b) {
    BlockQ8_1 blk;
    quantize_q8_1(x + b * kQK8_1, kQK8_1, &blk);
    std::memcpy(q + b * kQK8_1, blk.qs, kQK8_1);
    d[b] = f16_to_f32(blk.d);
    s[b] = f16_to_f32(blk.s);
  }
}

bool can_matmul(GgmlType weight) {
  return weight != GgmlType::kQ8_1 && can_dequantize(weight);
}

absl::StatusOr<WeightMatrix> make_weight_matrix(const char* name,
                                                GgmlType type,
                                                const void* data, int64_t n_in,
                                                int64_t n_out,
                                                uint64_t n_bytes) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (!can_matmul(type)) {
    return absl::UnimplementedError(
        absl::StrCat(name, ": weight type ", std::string(info.name), " is not supported"));
  }
  const std::optional<int64_t> row_bytes = ggml_row_bytes(type, n_in);
  if (!row_bytes || n_in <= 0 || n_out <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", std::string(info.name), " rows of ", n_in,
                     " elements are not whole blocks of ", info.block_size));
  }
  if (static_cast<uint64_t>(*row_bytes) * static_cast<uint64_t>(n_out) !=
      n_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": ", n_bytes, " bytes, expected ", n_out, " rows of ",
        *row_bytes));
  }
  return WeightMatrix{type, static_cast<const uint8_t*>(data), n_in, n_out,
                      *row_bytes};
}

MatmulScratch::MatmulScratch(int64_t max_rows, int64_t max_in, int n_threads)
    : max_rows_(max_rows),
      max_in_(max_in),
      quantized_(static_cast<size_t>(max_rows) * max_in),
      act_scales_(static_cast<size_t>(max_rows) * 2 * (max_in / kQK8_0 + 1)),
      converted_(static_cast<size_t>(max_rows) * max_in),
      weight_rows_(static_cast<size_t>(std::max(1, n_threads)) * max_in),
      weight_q_(static_cast<size_t>(std::max(1, n_threads)) * max_in),
      weight_scales_(static_cast<size_t>(std::max(1, n_threads)) * 2 *
                     (max_in / kQK8_0 + 1)) {}

void round_activations(GgmlType type, const float* x, int64_t n, float* out) {
  switch (type) {
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(f32_to_f16(x[i]));
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
      return;
    case GgmlType::kQ8_K:
      round_q8_k(x, n, out);
      return;
    case GgmlType::kQ8_0:
    case GgmlType::kQ8_1: {
      for (int64_t b = 0; b < n / kQK8_0; ++b) {
        BlockQ8_1 q;
        quantize_q8_1(x + b * kQK8_0, kQK8_0, &q);
        for (int j = 0; j < kQK8_0; ++j) {
          out[b * kQK8_0 + j] = f16_to_f32(q.d) * q.qs[j];
        }
      }
      return;
    }
    default:
      std::copy(x, x + n, out);
  }
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_rows, float* y,
            MatmulScratch& scratch, ThreadPool& pool) {
  assert(n_rows <= scratch.max_rows_ && w.n_in <= scratch.max_in_);
  assert(pool.size() * scratch.max_in_ <=
         static_cast<int64_t>(scratch.weight_rows_.size()));
  const int64_t n_in = w.n_in;
  const int64_t n_out = w.n_out;
  const GgmlType act = activation_type(w.type);
  const bool integer = is_legacy_integer(w.type);
  const bool has_min = w.type == GgmlType::kQ4_1 || w.type == GgmlType::kQ5_1;
  const int64_t nb = n_in / kQK8_0;
  const int64_t scale_stride = 2 * (scratch.max_in_ / kQK8_0 + 1);
  auto activation_row = [&](int64_t t) {
    float* scales = scratch.act_scales_.data() + t * scale_stride;
    return UnpackedRow{scratch.quantized_.data() + t * n_in, scales,
                       scales + scale_stride / 2};
  };
  const float* xa = x;

  // 1. Activations -> the paired type.
  if (integer) {
    pool.parallel_for(n_rows, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        quantize_activation_row(x + t * n_in, n_in, activation_row(t));
      }
    });
  } else if (act != GgmlType::kF32) {
    float* converted = scratch.converted_.data();
    pool.parallel_for(n_rows, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        round_activations(act, x + t * n_in, n_in, converted + t * n_in);
      }
    });
    xa = converted;
  }

  // 2. One weight row at a time against every activation row.
  pool.parallel_for(
      n_out,
      [&](int64_t begin, int64_t end, int thread) {
        float* wrow = scratch.weight_rows_.data() + thread * scratch.max_in_;
        float* wscales =
            scratch.weight_scales_.data() + thread * scale_stride;
        const UnpackedRow wq{scratch.weight_q_.data() + thread * scratch.max_in_,
                             wscales, wscales + scale_stride / 2};
        for (int64_t r = begin; r < end; ++r) {
          const uint8_t* row = w.data + r * w.row_bytes;
          if (integer) {
            unpack_weight_row(w.type, row, nb, wq);
            for (int64_t t = 0; t < n_rows; ++t) {
              y[t * n_out + r] = dot_unpacked(wq, activation_row(t), nb, has_min);
            }
            continue;
          }
          const absl::Status st = dequantize_row(w.type, row, n_in, wrow);
          assert(st.ok());
          (void)st;
          for (int64_t t = 0; t < n_rows; ++t) {
            y[t * n_out + r] = dot_f32(wrow, xa + t * n_in, n_in);
          }
        }
      },
      /*grain=*/16);
}

}  // namespace strata::reference::ops
