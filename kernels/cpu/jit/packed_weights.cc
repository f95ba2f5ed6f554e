#include "kernels/cpu/jit/packed_weights.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/jit/huge_page_arena.h"
#include "kernels/cpu/reference/block_layouts.h"
#include "kernels/cpu/reference/fp16.h"

namespace strata::kernels::jit {
namespace {

using reference::e8m0_to_f32_half;
using reference::f16_to_f32;
using reference::kMxfp4Values;

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// One 32-element unit's packed form, as the packers below produce it.
struct Unit {
  uint8_t* values;   // unit_bytes
  uint32_t* hbits;   // kU5 only
  float* scales;     // 1 or 2
  float* min;        // min correction only
  // K-quants, when not null: the integer sub-scales (1 or 2) and min of the
  // unit, and its super-block's d and dmin (scales = d * sub, min = -dmin * m).
  int* sub_scales = nullptr;
  int* sub_min = nullptr;
  float* d = nullptr;
  float* dmin = nullptr;
};

// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / MXFP4: one unit per ggml block, in
// encoding `e`.
void pack_legacy(GgmlType type, Encoding e, const uint8_t* block, Unit out) {
  switch (type) {
    case GgmlType::kQ4_0:
      out.scales[0] = f16_to_f32(load<uint16_t>(block));
      std::memcpy(out.values, block + 2, 16);
      return;
    case GgmlType::kQ4_1:
      out.scales[0] = f16_to_f32(load<uint16_t>(block));
      *out.min = f16_to_f32(load<uint16_t>(block + 2));
      std::memcpy(out.values, block + 4, 16);
      return;
    case GgmlType::kQ5_0:
      out.scales[0] = f16_to_f32(load<uint16_t>(block));
      *out.hbits = load<uint32_t>(block + 2);
      std::memcpy(out.values, block + 6, 16);
      return;
    case GgmlType::kQ5_1:
      out.scales[0] = f16_to_f32(load<uint16_t>(block));
      *out.min = f16_to_f32(load<uint16_t>(block + 2));
      *out.hbits = load<uint32_t>(block + 4);
      std::memcpy(out.values, block + 8, 16);
      return;
    case GgmlType::kQ8_0:
      out.scales[0] = f16_to_f32(load<uint16_t>(block));
      std::memcpy(out.values, block + 2, 32);
      if (e == Encoding::kU8) {  // w + 128: two's complement to offset binary
        for (int j = 0; j < 32; ++j) out.values[j] ^= 0x80;
      }
      return;
    case GgmlType::kMXFP4: {
      out.scales[0] = e8m0_to_f32_half(block[0]);
      for (int j = 0; j < 16; ++j) {
        const uint8_t b = block[1 + j];
        out.values[j] = static_cast<uint8_t>(kMxfp4Values[b & 0xF] + 12);
        out.values[j + 16] = static_cast<uint8_t>(kMxfp4Values[b >> 4] + 12);
      }
      return;
    }
    default:
      return;
  }
}

// get_scale_min_k4 of ggml-quants.c (see block_layouts.h, BlockQ4_K).
void scale_min_k4(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K / Q5_K / Q6_K: eight units per 256-element super-block.
void pack_k(GgmlType type, const uint8_t* block, const Unit* units) {
  if (type == GgmlType::kQ6_K) {
    const uint8_t* ql = block;
    const uint8_t* qh = block + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(block + 192);
    const float d = f16_to_f32(load<uint16_t>(block + 208));
    for (int j = 0; j < 8; ++j) {
      const int h = j / 4, g = j % 4;
      for (int l = 0; l < 32; ++l) {
        const uint8_t b = ql[64 * h + 32 * (g & 1) + l];
        const int low = g < 2 ? (b & 0xF) : (b >> 4);
        const int high = (qh[32 * h + l] >> (2 * g)) & 3;
        units[j].values[l] = static_cast<uint8_t>(low | high << 4);
      }
      units[j].scales[0] = d * static_cast<float>(sc[2 * j]);
      units[j].scales[1] = d * static_cast<float>(sc[2 * j + 1]);
      if (units[j].sub_scales != nullptr) {
        units[j].sub_scales[0] = sc[2 * j];
        units[j].sub_scales[1] = sc[2 * j + 1];
        *units[j].d = d;
      }
    }
    return;
  }
  // Q4_K, Q5_K: [0,2) d | [2,4) dmin | [4,16) scales | (Q5_K: [16,48) qh) | qs
  const bool five = type == GgmlType::kQ5_K;
  const float d = f16_to_f32(load<uint16_t>(block));
  const float dmin = f16_to_f32(load<uint16_t>(block + 2));
  const uint8_t* scales = block + 4;
  const uint8_t* qh = block + 16;
  const uint8_t* qs = block + (five ? 48 : 16);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min_k4(j, scales, &sc, &m);
    units[j].scales[0] = d * static_cast<float>(sc);
    *units[j].min = -(dmin * static_cast<float>(m));
    if (units[j].sub_scales != nullptr) {
      units[j].sub_scales[0] = sc;
      *units[j].sub_min = m;
      *units[j].d = d;
      *units[j].dmin = dmin;
    }
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = (j % 2) * 4;
    for (int i = 0; i < 16; ++i) {
      const int lo = (q[i] >> shift) & 0xF;
      const int hi = (q[i + 16] >> shift) & 0xF;
      units[j].values[i] = static_cast<uint8_t>(lo | hi << 4);
    }
    if (five) {
      uint32_t bits = 0;
      for (int l = 0; l < 32; ++l) bits |= uint32_t((qh[l] >> j) & 1) << l;
      *units[j].hbits = bits;
    }
  }
}

bool is_k(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K;
}

// Zeroed plane memory from the huge-page arena (see huge_page_arena.h:
// decode streams every plane once per token); counts it in *bytes.
uint8_t* zeroed_plane(int64_t n, int64_t* bytes) {
  const size_t size = static_cast<size_t>(round_up(n, 64));
  void* p = HugePageArena::global().allocate(size);
  if (p != nullptr) *bytes += static_cast<int64_t>(size);
  return static_cast<uint8_t*>(p);
}

// The interleaved layout (packed_weights.h): each row is packed unit by unit
// as above, then its 4-byte chunks, scales and mins are scattered into the
// row group's planes.
// G: rows per group (l.row_group), a constant so the offsets fold.
template <int64_t G>
void pack_groups(const PackedLayout& l, const WeightMatrix& w,
                      uint8_t* values, uint8_t* hbits, uint8_t* scales,
                      uint8_t* mins, ThreadPool& pool) {
  const int64_t block_bytes = ggml_type_info(l.type).type_size;
  const int n_sc = l.paired_scales ? 2 : 1;
  const bool u6 = l.encoding == Encoding::kU6;
  // Bytes of one row's unit as pack_legacy / pack_k write it (kU6: the
  // 6-bit values, one per byte).
  const int64_t ub = u6 ? 32 : l.unit_bytes;
  auto put = [&](uint8_t* plane, int64_t index, float v) {
    if (l.scale_f16) {
      const uint16_t h = reference::f32_to_f16(v);  // exact: an f16 scale
      std::memcpy(plane + index * 2, &h, 2);
    } else {
      std::memcpy(plane + index * 4, &v, 4);
    }
  };
  // k_scales: per super-block of 8 units, [8 units][n_sc][8 rows] integer
  // sub-scales (bytes), then [8 rows] f32 d; mins the same with m and dmin.
  assert(l.row_group == G);
  const int64_t sb_scale_bytes = G * (8 * n_sc + 4), sb_min_bytes = 12 * G;
  pool.parallel_for(l.n_out, [&](int64_t b, int64_t e, int) {
    std::vector<uint8_t> vals(static_cast<size_t>(l.n_units * ub));
    std::vector<float> sc(static_cast<size_t>(l.n_units * n_sc));
    std::vector<float> mn(static_cast<size_t>(l.n_units));
    std::vector<uint32_t> hb(static_cast<size_t>(l.n_units));
    std::vector<int> isc(static_cast<size_t>(l.n_units * n_sc));
    std::vector<int> imn(static_cast<size_t>(l.n_units));
    std::vector<float> dd(static_cast<size_t>(l.n_units)), dm(static_cast<size_t>(l.n_units));
    auto unit = [&](int64_t u) {
      Unit x{vals.data() + u * ub, hb.data() + u, sc.data() + u * n_sc, mn.data() + u};
      if (l.k_scales) {
        x.sub_scales = isc.data() + u * n_sc;
        x.sub_min = imn.data() + u;
        x.d = dd.data() + u;
        x.dmin = dm.data() + u;
      }
      return x;
    };
    for (int64_t r = b; r < e; ++r) {
      const uint8_t* row = w.data + r * w.row_bytes;
      if (is_k(l.type)) {
        for (int64_t sb = 0; sb < l.n_units / 8; ++sb) {
          Unit units[8];
          for (int j = 0; j < 8; ++j) units[j] = unit(sb * 8 + j);
          pack_k(l.type, row + sb * block_bytes, units);
        }
      } else {
        for (int64_t u = 0; u < l.n_units; ++u) {
          pack_legacy(l.type, l.encoding, row + u * block_bytes, unit(u));
        }
      }
      const int64_t g = r / G, ri = r % G;
      uint8_t* gv = values + g * l.value_stride;
      for (int64_t u = 0; u < l.n_units; ++u) {
        if (u6) {  // low nibbles of chunks 2m | 2m+1; 2-bit high parts
          const uint8_t* v = vals.data() + u * 32;
          uint8_t* gu = gv + u * 16 * G;
          uint8_t* gh = hbits + g * l.hbit_stride + u * 8 * G;
          for (int b4 = 0; b4 < 4; ++b4) {
            for (int m = 0; m < 4; ++m) {
              gu[m * 4 * G + ri * 4 + b4] = static_cast<uint8_t>(
                  (v[4 * (2 * m) + b4] & 0xF) | (v[4 * (2 * m + 1) + b4] & 0xF) << 4);
            }
            for (int k = 0; k < 2; ++k) {
              uint8_t byte = 0;
              for (int i = 0; i < 4; ++i) {
                byte = static_cast<uint8_t>(byte | ((v[4 * (4 * k + i) + b4] >> 4) & 3) << (2 * i));
              }
              gh[k * 4 * G + ri * 4 + b4] = byte;
            }
          }
        } else if (hbits != nullptr) {  // bit j of byte ri*4+b: element 4j+b's fifth bit
          for (int b4 = 0; b4 < 4; ++b4) {
            uint8_t byte = 0;
            for (int j = 0; j < 8; ++j) {
              byte = static_cast<uint8_t>(byte | ((hb[u] >> (4 * j + b4)) & 1u) << j);
            }
            hbits[g * l.hbit_stride + u * 4 * G + ri * 4 + b4] = byte;
          }
        }
        for (int64_t m = 0; m < ub / 4 && !u6; ++m) {
          std::memcpy(gv + u * ub * G + m * 4 * G + ri * 4, vals.data() + u * ub + m * 4, 4);
        }
        if (l.k_scales) {
          const int64_t sb = u / 8, ui = u % 8;
          uint8_t* gs = scales + g * l.scale_stride + sb * sb_scale_bytes;
          for (int h = 0; h < n_sc; ++h) {
            gs[(ui * n_sc + h) * G + ri] = static_cast<uint8_t>(isc[u * n_sc + h]);
          }
          std::memcpy(gs + 8 * n_sc * G + ri * 4, &dd[u], 4);
          if (mins != nullptr) {
            uint8_t* gm = mins + g * l.mins_stride + sb * sb_min_bytes;
            gm[ui * G + ri] = static_cast<uint8_t>(imn[u]);
            std::memcpy(gm + 8 * G + ri * 4, &dm[u], 4);
          }
          continue;
        }
        for (int h = 0; h < n_sc; ++h) {
          put(scales, g * l.scale_stride + (u * n_sc + h) * G + ri, sc[u * n_sc + h]);
        }
        if (mins != nullptr) put(mins, g * l.mins_stride + u * G + ri, mn[u]);
      }
    }
  });
}

void pack_interleaved(const PackedLayout& l, const WeightMatrix& w,
                      uint8_t* values, uint8_t* hbits, uint8_t* scales,
                      uint8_t* mins, ThreadPool& pool) {
  if (l.row_group == 16) {
    pack_groups<16>(l, w, values, hbits, scales, mins, pool);
  } else {
    pack_groups<8>(l, w, values, hbits, scales, mins, pool);
  }
}

}  // namespace

const char* encoding_name(Encoding e) {
  switch (e) {
    case Encoding::kU4: return "u4";
    case Encoding::kU5: return "u5";
    case Encoding::kU6: return "u6";
    case Encoding::kU8: return "u8";
    case Encoding::kS8: return "s8";
    case Encoding::kF32: return "f32";
    case Encoding::kF16: return "f16";
    case Encoding::kBF16: return "bf16";
  }
  return "?";
}

bool can_pack(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16:
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: case GgmlType::kQ8_0: case GgmlType::kMXFP4:
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

bool interleaved_type(GgmlType type) {
  return can_pack(type) && type != GgmlType::kF32 && type != GgmlType::kF16 &&
         type != GgmlType::kBF16;
}

int64_t scale_elem_bytes(const PackedLayout& l) {
  return l.k_scales ? 1 : l.scale_f16 ? 2 : 4;
}

namespace {
// Rows of each plane: row groups (interleaved) or rows.
int64_t plane_rows(const PackedLayout& l) {
  return l.row_group > 1 ? l.n_groups : l.n_out;
}
}  // namespace

int64_t value_plane_bytes(const PackedLayout& l) {
  return plane_rows(l) * l.value_stride;
}
int64_t hbit_plane_bytes(const PackedLayout& l) {
  return plane_rows(l) * l.hbit_stride;
}
int64_t scale_plane_bytes(const PackedLayout& l) {
  return plane_rows(l) * l.scale_stride * scale_elem_bytes(l);
}
int64_t min_plane_bytes(const PackedLayout& l) {
  return plane_rows(l) * l.mins_stride * scale_elem_bytes(l);
}

absl::StatusOr<PackedLayout> packed_layout(GgmlType type, int64_t n_in,
                                           int64_t n_out, IsaTier tier) {
  PackedLayout l;
  l.type = type;
  l.n_in = n_in;
  l.n_out = n_out;
  if (!can_pack(type)) {
    return absl::UnimplementedError(absl::StrCat(
        "no generated matmul for ", std::string(ggml_type_info(type).name)));
  }
  const int64_t block = ggml_type_info(type).block_size;
  if (n_in <= 0 || n_out <= 0 || n_in % block != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(ggml_type_info(type).name), " rows of ", n_in,
                     " elements are not whole blocks of ", block));
  }
  switch (type) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16:
      l.encoding = type == GgmlType::kF32   ? Encoding::kF32
                   : type == GgmlType::kF16 ? Encoding::kF16
                                            : Encoding::kBF16;
      l.act = type == GgmlType::kF32   ? ActKind::kF32
              : type == GgmlType::kF16 ? ActKind::kF16
                                       : ActKind::kBF16;
      l.unit_elems = 8;
      l.n_in_pad = round_up(n_in, 8);
      l.n_units = l.n_in_pad / 8;
      l.unit_bytes = type == GgmlType::kF32 ? 32 : 16;
      l.value_stride = l.n_units * l.unit_bytes;
      return l;
    default:
      break;
  }
  l.n_in_pad = n_in;
  l.unit_elems = 32;
  l.n_units = n_in / 32;
  l.n_scales = l.n_units;
  switch (type) {
    case GgmlType::kQ4_0:
      l.encoding = Encoding::kU4; l.act = ActKind::kQ8_0;
      l.correction = Correction::kZeroPoint; l.zero_point = 8;
      break;
    case GgmlType::kQ4_1:
      l.encoding = Encoding::kU4; l.act = ActKind::kQ8_1;
      l.correction = Correction::kMin;
      break;
    case GgmlType::kQ5_0:
      l.encoding = Encoding::kU5; l.act = ActKind::kQ8_0;
      l.correction = Correction::kZeroPoint; l.zero_point = 16;
      break;
    case GgmlType::kQ5_1:
      l.encoding = Encoding::kU5; l.act = ActKind::kQ8_1;
      l.correction = Correction::kMin;
      break;
    case GgmlType::kQ8_0:
      l.act = ActKind::kQ8_0;
      if (tier == IsaTier::kAvx512Vnni) {
        l.encoding = Encoding::kU8;
        l.correction = Correction::kZeroPoint; l.zero_point = 128;
      } else {
        l.encoding = Encoding::kS8;
      }
      break;
    case GgmlType::kMXFP4:
      l.encoding = Encoding::kU8; l.act = ActKind::kQ8_0;
      l.correction = Correction::kZeroPoint; l.zero_point = 12;
      break;
    case GgmlType::kQ4_K:
      l.encoding = Encoding::kU4; l.act = ActKind::kQ8_K;
      l.correction = Correction::kMin;
      break;
    case GgmlType::kQ5_K:
      l.encoding = Encoding::kU5; l.act = ActKind::kQ8_K;
      l.correction = Correction::kMin;
      break;
    case GgmlType::kQ6_K:
      l.encoding = Encoding::kU6; l.act = ActKind::kQ8_K;
      l.correction = Correction::kZeroPoint; l.zero_point = 32;
      l.paired_scales = true;
      l.n_scales = 2 * l.n_units;
      break;
    default:
      break;
  }
  l.unit_bytes = l.encoding == Encoding::kU4 || l.encoding == Encoding::kU5 ||
                         l.encoding == Encoding::kU6
                     ? 16
                     : 32;
  // Every quantized type: the interleaved layout, in groups of 8 rows (one
  // 32-byte vector of 4-byte chunks), or 16 on the AVX-512 VNNI tier (one
  // 64-byte vector: its vpdpbusd on zmm runs at the ymm instruction rate on
  // a core with a 512-bit datapath, twice the products; bench/isa_throughput).
  const int64_t G = tier == IsaTier::kAvx512Vnni ? 16 : 8;
  l.row_group = static_cast<int>(G);
  l.n_groups = (n_out + G - 1) / G;
  l.scale_f16 = type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 ||
                type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1 ||
                type == GgmlType::kQ8_0;
  // kU5: one byte per (row, 4-element chunk) of fifth bits per unit.
  l.hbit_stride = l.encoding == Encoding::kU5   ? l.n_units * 4 * G
                  : l.encoding == Encoding::kU6 ? l.n_units * 8 * G
                                                : 0;
  l.k_scales = is_k(type);
  l.value_stride = l.n_units * l.unit_bytes * G;
  const int64_t n_sb = l.n_units / 8;
  l.scale_stride = l.k_scales ? n_sb * G * (8 * (l.n_scales / l.n_units) + 4)
                              : l.n_scales * G;
  l.act_d_stride = l.n_units;
  if (l.correction == Correction::kZeroPoint) {
    l.corr_len = round_up(l.n_scales, 8);
  } else if (l.correction == Correction::kMin) {
    l.corr_len = round_up(l.n_units, 8);
    l.mins_stride = l.k_scales ? n_sb * 12 * G : l.n_units * G;
  }
  return l;
}

absl::StatusOr<std::unique_ptr<PackedWeights>> PackedWeights::pack(
    const WeightMatrix& w, IsaTier tier, ThreadPool& pool) {
  absl::StatusOr<PackedLayout> layout = packed_layout(w.type, w.n_in, w.n_out, tier);
  if (!layout.ok()) return layout.status();
  auto p = std::unique_ptr<PackedWeights>(new PackedWeights());
  p->layout_ = *layout;
  const PackedLayout& l = p->layout_;
  const int64_t n_out = l.n_out;
  auto oom = [&] {
    return absl::ResourceExhaustedError(
        absl::StrCat("packing ", n_out, " rows of ", l.n_in, " ",
                     std::string(ggml_type_info(l.type).name),
                     " weights: out of memory"));
  };

  const bool is_float = l.unit_elems == 8;
  if (is_float && l.n_in == l.n_in_pad) {
    p->values_ = w.data;  // the GGUF rows are the packed rows
    return p;
  }
  p->owned_values_.reset(
      zeroed_plane(value_plane_bytes(l), &p->owned_bytes_));
  if (!p->owned_values_) return oom();
  p->values_ = p->owned_values_.get();
  if (is_float) {
    const int64_t elem = l.type == GgmlType::kF32 ? 4 : 2;
    uint8_t* dst = p->owned_values_.get();
    pool.parallel_for(n_out, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) {
        std::memcpy(dst + r * l.value_stride, w.data + r * w.row_bytes,
                    static_cast<size_t>(l.n_in * elem));
      }
    });
    return p;
  }
  if (l.hbit_stride > 0) {
    p->hbits_.reset(zeroed_plane(hbit_plane_bytes(l), &p->owned_bytes_));
    if (!p->hbits_) return oom();
  }
  p->scales_.reset(zeroed_plane(scale_plane_bytes(l), &p->owned_bytes_));
  if (!p->scales_) return oom();
  if (l.correction == Correction::kMin) {
    p->mins_.reset(zeroed_plane(min_plane_bytes(l), &p->owned_bytes_));
    if (!p->mins_) return oom();
  }
  pack_interleaved(l, w, p->owned_values_.get(), p->hbits_.get(),
                   p->scales_.get(), p->mins_.get(), pool);
  return p;
}

}  // namespace strata::kernels::jit
