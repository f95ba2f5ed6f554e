// The quantized matrix x few-columns kernels: see matvec_source.h (the
// formulas, launch and bounds). CUDA C++ for NVRTC; with CUDA's keywords
// defined away it also compiles as host C++ (tests/cuda/
// matvec_emulation_test.cc runs it one lane a thread).
#ifndef THREADS
#define THREADS 128
#endif
#ifndef NCOLS
#define NCOLS 1
#endif
#ifndef ROW_WARPS
#define ROW_WARPS 1
#endif
#ifndef WARP_ROWS  // the int8 form's rows a warp (matvec_source.h)
#define WARP_ROWS 1
#endif

typedef unsigned char u8;

// `#pragma unroll` for NVRTC; nothing for a host compiler (the emulation).
#if defined(__CUDA_ARCH__)
#define STRATA_UNROLL _Pragma("unroll")
#else
#define STRATA_UNROLL
#endif

// f16 bits h as a float.
__device__ __forceinline__ float f16_value(unsigned int h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
  return f;
#else
  return strata_host_f16_to_f32((unsigned short)h);  // the emulation's
#endif
}

// v to p (aligned to T) in one store; the emulation copies its bytes.
template <typename T>
__device__ __forceinline__ void store_as(void* p, const T& v) {
#if defined(__CUDA_ARCH__)
  *(T*)p = v;
#else
  if ((unsigned long long)p % sizeof(T) != 0) strata_host_misaligned(p, sizeof(T));
  memcpy(p, &v, sizeof v);
#endif
}

// A T at p (aligned to T: 16 bytes for uint4/float4, 2 for unsigned short)
// in one load; the emulation copies its bytes.
template <typename T>
__device__ __forceinline__ T load_as(const void* p) {
#if defined(__CUDA_ARCH__)
  return *(const T*)p;
#else
  // The device faults on a misaligned vector load: so does the emulation.
  if ((unsigned long long)p % sizeof(T) != 0) strata_host_misaligned(p, sizeof(T));
  T r;
  memcpy(&r, p, sizeof r);
  return r;
#endif
}

// The little-endian f16 at p (2-byte aligned) as a float, in one load.
__device__ __forceinline__ float f16_bits(const u8* p) {
  return f16_value(load_as<unsigned short>(p));
}

// Byte l of little-endian words: (words[l / 4] >> 8 (l % 4)) & 255.
__device__ __forceinline__ unsigned int byte_of(const unsigned int* words, int l) {
  return (words[l >> 2] >> (8 * (l & 3))) & 255u;
}

// v as a float, exactly, for |v| < 2^22 (a unit's integer dot product:
// at most 32 x 127 x 127): the bits of 1.5 x 2^23 + v (floats there are
// the integers) less 1.5 x 2^23, an integer and a float add. A type
// conversion issues at a fraction of an add's rate (the CUDA Programming
// Guide's throughput table: 16 a clock per multiprocessor on compute 8.x
// and 9.0, against 64 integer and 128 float adds), and the int8 kernels
// convert a sum per unit and column.
__device__ __forceinline__ float small_int_float(int v) {
  return __uint_as_float(0x4B400000u + (unsigned int)v) - 12582912.0f;
}
// Byte l of little-endian words as a signed byte's value, a float, the
// same way: 2^23 + (byte ^ 128) less 2^23 + 128.
__device__ __forceinline__ float signed_byte_float(const unsigned int* words, int l) {
  return __uint_as_float(0x4B000000u | (byte_of(words, l) ^ 0x80u)) - 8388736.0f;
}

// Each byte of x minus the same byte of k, alone (no borrow between bytes),
// as a signed byte: every byte of x below 128, of k at most 128.
__device__ __forceinline__ unsigned int sub_bytes(unsigned int x, unsigned int k) {
  return ((x | 0x80808080u) - k) ^ 0x80808080u;
}
// Bit j of b (j < 4) as bit 0 of byte j (the four shifted copies of b do
// not overlap, so the product carries nothing).
__device__ __forceinline__ unsigned int spread_bits4(unsigned int b) {
  return ((b & 15u) * 0x00204081u) & 0x01010101u;
}
// A 32-value unit's low nibbles (values 0-15) and high nibbles (16-31) of
// its 16 bytes qs (4 words), with the fifth bits of qh (bit l for value l;
// 0 for the 4-bit types), unsigned, in unit_words' layout: q[0..7].
__device__ __forceinline__ void nibble_words(const unsigned int* qs, unsigned int qh,
                                             unsigned int* q) {
STRATA_UNROLL
  for (int i = 0; i < 4; ++i) {
    q[i] = (qs[i] & 0x0F0F0F0Fu) | (spread_bits4(qh >> (4 * i)) << 4);
    q[i + 4] = ((qs[i] >> 4) & 0x0F0F0F0Fu) | (spread_bits4(qh >> (16 + 4 * i)) << 4);
  }
}

// c + the sum of the four products of a's and b's signed bytes (dp4a).
__device__ __forceinline__ int dot4_i8(unsigned int a, unsigned int b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a((int)a, (int)b, c);
#else
  return strata_host_dp4a(a, b, c);  // the emulation's
#endif
}

// Byte j of the result is byte (s >> 4 j) & 7 of the eight bytes
// {lo, hi} (lo's the first four): prmt with selectors below 8.
__device__ __forceinline__ unsigned int pick_bytes(unsigned int lo, unsigned int hi,
                                                   unsigned int s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(lo, hi, s);
#else
  return strata_host_byte_perm(lo, hi, s);  // the emulation's
#endif
}

// The four words of a 16-byte load.
__device__ __forceinline__ void words_of(const uint4& a, unsigned int* words) {
  words[0] = a.x;
  words[1] = a.y;
  words[2] = a.z;
  words[3] = a.w;
}

// A unit's bytes as a format's fetch loads them (its fields, each in one
// load), for its unpack_words / unpack_ints: the loads of the next unit can
// then be in flight while the kernel works on this one (mma_tile_i8).
struct UnitBits {
  uint4 v[5];
  unsigned int s[2];
};

// A format F's unit_words: its fetch, then its unpack_words.
template <typename F>
struct FetchedUnits {
  static __device__ __forceinline__ void unit_words(const u8* w, int n_cols, int u,
                                                    unsigned int* q, float* scale, float* min) {
    UnitBits r;
    F::fetch(w, n_cols, u, &r);
    F::unpack_words(r, u, q, scale, min);
  }
};
// A K-quant F's unpack_words from its unpack_ints (scale = d sc, min =
// dmin m), and its unit_ints: its fetch, then its unpack_ints.
template <typename F>
struct KQuantUnits : FetchedUnits<F> {
  static __device__ __forceinline__ void unpack_words(const UnitBits& r, int u, unsigned int* q,
                                                      float* scale, float* min) {
    int sc[2], m;
    float d, dmin;
    F::unpack_ints(r, u, q, sc, &m, &d, &dmin);
    scale[0] = d * (float)sc[0];
    scale[1] = d * (float)sc[1];
    *min = dmin * (float)m;
  }
  static __device__ __forceinline__ void unit_ints(const u8* w, int n_cols, int u, unsigned int* q,
                                                   int* sc, int* m, float* d, float* dmin) {
    UnitBits r;
    F::fetch(w, n_cols, u, &r);
    F::unpack_ints(r, u, q, sc, m, d, dmin);
  }
};

// The weights' rows are the device layout of worker/cuda/weight_layout.h:
// a regrouped type's row is sections of one field of every block (quants
// first, 16-byte aligned; the scales after), n_cols / (values a block)
// blocks each; Q4_K, Q5_K, F32 and F16 rows are GGUF rows.
//
// Each format fills v[0..31] with unit u of a row (w: the row's bytes,
// n_cols: its values). The float formats' rows may end in a part unit
// (stories260K's 172-wide ffn_down): `value` gives element i alone, and
// kTail says a row may have such a tail; a block format's rows are whole
// blocks.
//
// The types whose products with Q8 values are integer also give the unit
// as int8 q with value = scale q - min: unit_words packs q[l] into byte
// l % 4 of word l / 4 (the layout of int8 rows, so dp4a and mma.sync take
// the words as they are), with kI8Scales scales (2: scale[0] for q[0..15],
// scale[1] for q[16..31]) and a min that is zero unless kI8Min. kI8Q8_1:
// the type pairs with Q8_1 rows (Q4_1, Q5_1), whose units carry s = f16(d
// sum q): the min multiplies s, as the cpu backend's sum does, not d sum q.
// kI8Super (the K-quants): the 8 units of a 256-value block share d and
// dmin and have integer sub-scales (sc: one, Q6_K two, and m), so
// unit_ints gives them apart: scale = d sc, min = dmin m; their rows (Q8_K)
// have one d a block too, so a block's products can be summed in integers.

struct F32 {
  static constexpr bool kTail = true;
  static __device__ __forceinline__ float value(const u8* w, int i) {
    const u8* p = w + (long long)i * 4;
    return __uint_as_float((unsigned int)p[0] | ((unsigned int)p[1] << 8) |
                           ((unsigned int)p[2] << 16) | ((unsigned int)p[3] << 24));
  }
  static __device__ __forceinline__ void unit(const u8* w, int, int u, float* v) {
    const u8* p = w + (long long)u * 32 * 4;
STRATA_UNROLL
    for (int l = 0; l < 32; ++l) {
      const unsigned int b = (unsigned int)p[4 * l] | ((unsigned int)p[4 * l + 1] << 8) |
                             ((unsigned int)p[4 * l + 2] << 16) |
                             ((unsigned int)p[4 * l + 3] << 24);
      v[l] = __uint_as_float(b);
    }
  }
};

struct F16 {
  static constexpr bool kTail = true;
  static __device__ __forceinline__ float value(const u8* w, int i) {
    return f16_bits(w + (long long)i * 2);
  }
  static __device__ __forceinline__ void unit(const u8* w, int, int u, float* v) {
    const u8* p = w + (long long)u * 32 * 2;
STRATA_UNROLL
    for (int l = 0; l < 32; ++l) v[l] = f16_bits(p + 2 * l);
  }
};

// Q4_0: {f16 d; u8 qs[16]}: value l < 16 = ((qs[l] & 15) - 8) d, value
// l + 16 = ((qs[l] >> 4) - 8) d. Device row: [qs 16] [d 2].
struct Q4_0 : FetchedUnits<Q4_0> {
  static constexpr bool kTail = false;
  static __device__ __forceinline__ float value(const u8*, int) { return 0.0f; }
  static __device__ __forceinline__ void unit(const u8* w, int n_cols, int u, float* v) {
    UnitBits r;
    fetch(w, n_cols, u, &r);
    unsigned int q[4];
    words_of(r.v[0], q);
    const float d = f16_value(r.s[0]);
STRATA_UNROLL
    for (int l = 0; l < 16; ++l) {
      v[l] = (float)((int)(byte_of(q, l) & 15) - 8) * d;
      v[l + 16] = (float)((int)(byte_of(q, l) >> 4) - 8) * d;
    }
  }
  static constexpr int kI8Scales = 1;
  static constexpr bool kI8Min = false;
  static constexpr bool kI8Q8_1 = false;
  static constexpr bool kI8Super = false;
  static __device__ __forceinline__ void fetch(const u8* w, int n_cols, int u, UnitBits* r) {
    r->v[0] = load_as<uint4>(w + (long long)u * 16);
    r->s[0] = load_as<unsigned short>(w + (long long)(n_cols / 32) * 16 + 2 * u);
  }
  static __device__ __forceinline__ void unpack_words(const UnitBits& r, int, unsigned int* q,
                                                      float* scale, float* min) {
    unsigned int qs[4];
    words_of(r.v[0], qs);
    *scale = f16_value(r.s[0]);
    *min = 0.0f;
    nibble_words(qs, 0u, q);
STRATA_UNROLL
    for (int i = 0; i < 8; ++i) q[i] = sub_bytes(q[i], 0x08080808u);
  }
};

// Q4_1: {f16 d; f16 m; u8 qs[16]}: value = q d + m, the nibbles as Q4_0.
// Device row: [qs 16] [d m 4].
struct Q4_1 : FetchedUnits<Q4_1> {
  static constexpr bool kTail = false;
  static __device__ __forceinline__ float value(const u8*, int) { return 0.0f; }
  static __device__ __forceinline__ void unit(const u8* w, int n_cols, int u, float* v) {
    UnitBits r;
    fetch(w, n_cols, u, &r);
    unsigned int q[4];
    words_of(r.v[0], q);
    const float d = f16_value(r.s[0] & 0xFFFFu), m = f16_value(r.s[0] >> 16);
STRATA_UNROLL
    for (int l = 0; l < 16; ++l) {
      v[l] = (float)(byte_of(q, l) & 15) * d + m;
      v[l + 16] = (float)(byte_of(q, l) >> 4) * d + m;
    }
  }
  static constexpr int kI8Scales = 1;
  static constexpr bool kI8Min = true;
  static constexpr bool kI8Q8_1 = true;
  static constexpr bool kI8Super = false;
  static __device__ __forceinline__ void fetch(const u8* w, int n_cols, int u, UnitBits* r) {
    r->v[0] = load_as<uint4>(w + (long long)u * 16);
    r->s[0] = load_as<unsigned int>(w + (long long)(n_cols / 32) * 16 + 4 * u);  // d, m
  }
  static __device__ __forceinline__ void unpack_words(const UnitBits& r, int, unsigned int* q,
                                                      float* scale, float* min) {
    unsigned int qs[4];
    words_of(r.v[0], qs);
    *scale = f16_value(r.s[0] & 0xFFFFu);
    *min = -f16_value(r.s[0] >> 16);  // value = d q + m
    nibble_words(qs, 0u, q);
  }
};

// Q5_0: {f16 d; u8 qh[4]; u8 qs[16]}: the nibbles as Q4_0 with a fifth bit,
// bit l of the little-endian u32 qh for value l: value = (q - 16) d.
// Device row: [qs 16] [qh 4] [d 2].
struct Q5_0 : FetchedUnits<Q5_0> {
  static constexpr bool kTail = false;
  static __device__ __forceinline__ float value(const u8*, int) { return 0.0f; }
  static __device__ __forceinline__ void unit(const u8* w, int n_cols, int u, float* v) {
    UnitBits r;
    fetch(w, n_cols, u, &r);
    unsigned int q[4];
    words_of(r.v[0], q);
    const unsigned int qh = r.s[0];
    const float d = f16_value(r.s[1]);
STRATA_UNROLL
    for (int l = 0; l < 16; ++l) {
      v[l] = (float)((int)((byte_of(q, l) & 15) | (((qh >> l) & 1) << 4)) - 16) * d;
      v[l + 16] = (float)((int)((byte_of(q, l) >> 4) | (((qh >> (l + 16)) & 1) << 4)) - 16) * d;
    }
  }
  static constexpr int kI8Scales = 1;
  static constexpr bool kI8Min = false;
  static constexpr bool kI8Q8_1 = false;
  static constexpr bool kI8Super = false;
  static __device__ __forceinline__ void fetch(const u8* w, int n_cols, int u, UnitBits* r) {
    const long long nb = n_cols / 32;
    r->v[0] = load_as<uint4>(w + (long long)u * 16);
    r->s[0] = load_as<unsigned int>(w + nb * 16 + 4 * u);    // qh
    r->s[1] = load_as<unsigned short>(w + nb * 20 + 2 * u);  // d
  }
  static __device__ __forceinline__ void unpack_words(const UnitBits& r, int, unsigned int* q,
                                                      float* scale, float* min) {
    unsigned int qs[4];
    words_of(r.v[0], qs);
    *scale = f16_value(r.s[1]);
    *min = 0.0f;
    nibble_words(qs, r.s[0], q);
STRATA_UNROLL
    for (int i = 0; i < 8; ++i) q[i] = sub_bytes(q[i], 0x10101010u);
  }
};

// Q5_1: {f16 d; f16 m; u8 qh[4]; u8 qs[16]}: the bits of Q5_0, unsigned:
// value = q d + m. Device row: [qs 16] [qh 4] [d m 4].
struct Q5_1 : FetchedUnits<Q5_1> {
  static constexpr bool kTail = false;
  static __device__ __forceinline__ float value(const u8*, int) { return 0.0f; }
  static __device__ __forceinline__ void unit(const u8* w, int n_cols, int u, float* v) {
    UnitBits r;
    fetch(w, n_cols, u, &r);
    unsigned int q[4];
    words_of(r.v[0], q);
    const unsigned int qh = r.s[0];
    const float d = f16_value(r.s[1] & 0xFFFFu), m = f16_value(r.s[1] >> 16);
STRATA_UNROLL
    for (int l = 0; l < 16; ++l) {
      v[l] = (float)((byte_of(q, l) & 15) | (((qh >> l) & 1) << 4)) * d + m;
      v[l + 16] = (float)((byte_of(q, l) >> 4) | (((qh >> (l + 16)) & 1) << 4)) * d + m;
    }
  }
  static constexpr int kI8Scales = 1;
  static constexpr bool kI8Min = true;
  static constexpr bool kI8Q8_1 = true;
  static constexpr bool kI8Super = false;
  static __device__ __forceinline__ void fetch(const u8* w, int n_cols, int u, UnitBits* r) {
    const long long nb = n_cols / 32;
    r->v[0] = load_as<uint4>(w + (long long)u * 16);
    r->s[0] = load_as<unsigned int>(w + nb * 16 + 4 * u);  // qh
    r->s[1] = load_as<unsigned int>(w + nb * 20 + 4 * u);  // d, m
  }
  static __device__ __forceinline__ void unpack_words(const UnitBits& r, int, unsigned int* q,
                                                      float* scale, float* min) {
    unsigned int qs[4];
    words_of(r.v[0], qs);
    *scale = f16_value(r.s[1] & 0xFFFFu);
    *min = -f16_value(r.s[1] >> 16);  // value = d q + m
    nibble_words(qs, r.s[0], q);
  }
};

// MXFP4: {u8 e (E8M0); u8 qs[16]}: value l < 16 = table[qs[l] & 15] d, value
// l + 16 = table[qs[l] >> 4] d; the table holds the E2M1 values doubled
// (ggml's kvalues_mxfp4: 0, 1, 2, 3, 4, 6, 8, 12 and their negatives for
// codes 8-15), d = 2^(e - 128) (e8m0_to_f32_half). Device row: [qs 16] [e 1].
struct MXFP4 : FetchedUnits<MXFP4> {
  static constexpr bool kTail = false;
  static __device__ __forceinline__ float value(const u8*, int) { return 0.0f; }
  static __device__ __forceinline__ float e8m0_half(unsigned int e) {
    return __uint_as_float(e < 2 ? (0x00200000u << e) : (e - 1) << 23);
  }
  // The table's bytes for the four codes in the low nibbles of c's bytes:
  // the magnitude by prmt from the table's first half (codes 0-7), negated
  // bytewise where the code's bit 3 is set.
  static __device__ __forceinline__ unsigned int lookup4(unsigned int c) {
    const unsigned int i = c & 0x07070707u;
    const unsigned int s = (i & 0xFu) | ((i >> 4) & 0xF0u) | ((i >> 8) & 0xF00u) |
                           ((i >> 12) & 0xF000u);
    const unsigned int m = pick_bytes(0x03020100u, 0x0C080604u, s);
    const unsigned int negative = ((c >> 3) & 0x01010101u) * 0xFFu;
    return (m & ~negative) | (sub_bytes(0u, m) & negative);
  }
  static constexpr int kI8Scales = 1;
  static constexpr bool kI8Min = false;
  static constexpr bool kI8Q8_1 = false;
  static constexpr bool kI8Super = false;
  static __device__ __forceinline__ void fetch(const u8* w, int n_cols, int u, UnitBits* r) {
    r->v[0] = load_as<uint4>(w + (long long)u * 16);
    r->s[0] = w[(long long)(n_cols / 32) * 16 + u];  // e
  }
  static __device__ __forceinline__ void unpack_words(const UnitBits& r, int, unsigned int* q,
                                                      float* scale, float* min) {
    unsigned int qs[4];
    words_of(r.v[0], qs);
    *scale = e8m0_half(r.s[0]);
    *min = 0.0f;
STRATA_UNROLL
    for (int i = 0; i < 4; ++i) {
      q[i] = lookup4(qs[i]);
      q[i + 4] = lookup4(qs[i] >> 4);
    }
  }
  static __device__ __forceinline__ void unit(const u8* w, int n_cols, int u, float* v) {
    unsigned int q[8];
    float d, zero;
    unit_words(w, n_cols, u, q, &d, &zero);
STRATA_UNROLL
    for (int l = 0; l < 32; ++l) v[l] = (float)(signed char)byte_of(q, l) * d;
  }
};

// Q8_0: {f16 d; i8 qs[32]}: value = q d. Device row: [qs 32] [d 2].
struct Q8_0 : FetchedUnits<Q8_0> {
  static constexpr bool kTail = false;
  static __device__ __forceinline__ float value(const u8*, int) { return 0.0f; }
  static __device__ __forceinline__ void unit(const u8* w, int n_cols, int u, float* v) {
    UnitBits r;
    fetch(w, n_cols, u, &r);
    unsigned int q[8];
    words_of(r.v[0], q);
    words_of(r.v[1], q + 4);
    const float d = f16_value(r.s[0]);
STRATA_UNROLL
    for (int l = 0; l < 32; ++l) v[l] = (float)(signed char)byte_of(q, l) * d;
  }
  static constexpr int kI8Scales = 1;
  static constexpr bool kI8Min = false;
  static constexpr bool kI8Q8_1 = false;
  static constexpr bool kI8Super = false;
  static __device__ __forceinline__ void fetch(const u8* w, int n_cols, int u, UnitBits* r) {
    r->v[0] = load_as<uint4>(w + (long long)u * 32);
    r->v[1] = load_as<uint4>(w + (long long)u * 32 + 16);
    r->s[0] = load_as<unsigned short>(w + (long long)(n_cols / 32) * 32 + 2 * u);
  }
  static __device__ __forceinline__ void unpack_words(const UnitBits& r, int, unsigned int* q,
                                                      float* scale, float* min) {
    words_of(r.v[0], q);
    words_of(r.v[1], q + 4);
    *scale = f16_value(r.s[0]);
    *min = 0.0f;
  }
};

// Q4_K's and Q5_K's first 16 bytes {f16 d; f16 dmin; u8 scales[12]}, in
// one load: d, dmin and sub-block s's 6-bit scale and min (ggml's
// get_scale_min_k4: s < 4 the low 6 bits of scales[s] and scales[s + 4];
// else the nibbles of scales[s + 4] with the top 2 bits of scales[s - 4]
// and scales[s]).
__device__ __forceinline__ void k4_head(const uint4& h, int s, float* d, float* dmin, int* scale,
                                        int* min) {
  *d = f16_value(h.x & 0xFFFFu);
  *dmin = f16_value(h.x >> 16);
  const int shift = 8 * (s & 3);
  const unsigned int lo = (h.y >> shift) & 255u, mid = (h.z >> shift) & 255u,
                     hi = (h.w >> shift) & 255u;
  if (s < 4) {
    *scale = (int)(lo & 63u);
    *min = (int)(mid & 63u);
  } else {
    *scale = (int)((hi & 15u) | ((lo >> 6) << 4));
    *min = (int)((hi >> 4) | ((mid >> 6) << 4));
  }
}

// Q4_K: 256 values in 144 bytes {f16 d; f16 dmin; u8 scales[12]; u8
// qs[128]}; sub-block s (32 values) has a 6-bit scale and min (ggml's
// get_scale_min_k4) and takes the low (s even) or high (s odd) nibbles of
// qs[32 (s / 2) .. + 32): value = d sc q - dmin m. Device row: the GGUF
// row (blocks of 144 = 9 x 16 bytes).
struct Q4_K : KQuantUnits<Q4_K> {
  static constexpr bool kTail = false;
  static __device__ __forceinline__ float value(const u8*, int) { return 0.0f; }
  static __device__ __forceinline__ void unit(const u8* w, int n_cols, int u, float* v) {
    UnitBits r;
    fetch(w, n_cols, u, &r);
    const int s = u & 7;
    float d, dmin;
    int scale, min;
    k4_head(r.v[0], s, &d, &dmin, &scale, &min);
    const float d1 = d * (float)scale, m1 = dmin * (float)min;
    unsigned int q[8];
    words_of(r.v[1], q);
    words_of(r.v[2], q + 4);
    const int shift = (s & 1) * 4;
STRATA_UNROLL
    for (int l = 0; l < 32; ++l) v[l] = d1 * (float)((byte_of(q, l) >> shift) & 15) - m1;
  }
  static constexpr int kI8Scales = 1;
  static constexpr bool kI8Min = true;
  static constexpr bool kI8Q8_1 = false;
  static constexpr bool kI8Super = true;
  static __device__ __forceinline__ void fetch(const u8* w, int, int u, UnitBits* r) {
    const u8* b = w + (long long)(u >> 3) * 144;
    r->v[0] = load_as<uint4>(b);  // d, dmin, scales
    r->v[1] = load_as<uint4>(b + 16 + 32 * ((u & 7) >> 1));
    r->v[2] = load_as<uint4>(b + 32 + 32 * ((u & 7) >> 1));
  }
  static __device__ __forceinline__ void unpack_ints(const UnitBits& r, int u, unsigned int* q,
                                                     int* sc, int* m, float* d, float* dmin) {
    const int s = u & 7;
    k4_head(r.v[0], s, d, dmin, &sc[0], m);
    sc[1] = sc[0];
    unsigned int words[8];
    words_of(r.v[1], words);
    words_of(r.v[2], words + 4);
    const int shift = (s & 1) * 4;
STRATA_UNROLL
    for (int i = 0; i < 8; ++i) q[i] = (words[i] >> shift) & 0x0F0F0F0Fu;
  }
};

// Q5_K: 256 values in 176 bytes {f16 d; f16 dmin; u8 scales[12]; u8
// qh[32]; u8 qs[128]}: Q4_K's nibbles, scales and mins, and a fifth bit,
// bit s of qh[l] for value l of sub-block s: value = d sc q - dmin m.
// Device row: the GGUF row (blocks of 176 = 11 x 16 bytes).
struct Q5_K : KQuantUnits<Q5_K> {
  static constexpr bool kTail = false;
  static __device__ __forceinline__ float value(const u8*, int) { return 0.0f; }
  static __device__ __forceinline__ void unit(const u8* w, int n_cols, int u, float* v) {
    UnitBits r;
    fetch(w, n_cols, u, &r);
    const int s = u & 7;
    float d, dmin;
    int scale, min;
    k4_head(r.v[0], s, &d, &dmin, &scale, &min);
    const float d1 = d * (float)scale, m1 = dmin * (float)min;
    unsigned int qh[8], q[8];
    words_of(r.v[1], qh);
    words_of(r.v[2], qh + 4);
    words_of(r.v[3], q);
    words_of(r.v[4], q + 4);
    const int shift = (s & 1) * 4;
STRATA_UNROLL
    for (int l = 0; l < 32; ++l) {
      v[l] = d1 * (float)(((byte_of(q, l) >> shift) & 15) | (((byte_of(qh, l) >> s) & 1) << 4)) -
             m1;
    }
  }
  static constexpr int kI8Scales = 1;
  static constexpr bool kI8Min = true;
  static constexpr bool kI8Q8_1 = false;
  static constexpr bool kI8Super = true;
  static __device__ __forceinline__ void fetch(const u8* w, int, int u, UnitBits* r) {
    const u8* b = w + (long long)(u >> 3) * 176;
    r->v[0] = load_as<uint4>(b);  // d, dmin, scales
    r->v[1] = load_as<uint4>(b + 16);  // qh
    r->v[2] = load_as<uint4>(b + 32);
    r->v[3] = load_as<uint4>(b + 48 + 32 * ((u & 7) >> 1));
    r->v[4] = load_as<uint4>(b + 64 + 32 * ((u & 7) >> 1));
  }
  static __device__ __forceinline__ void unpack_ints(const UnitBits& r, int u, unsigned int* q,
                                                     int* sc, int* m, float* d, float* dmin) {
    const int s = u & 7;
    k4_head(r.v[0], s, d, dmin, &sc[0], m);
    sc[1] = sc[0];
    unsigned int qh[8], words[8];
    words_of(r.v[1], qh);
    words_of(r.v[2], qh + 4);
    words_of(r.v[3], words);
    words_of(r.v[4], words + 4);
    const int shift = (s & 1) * 4;
STRATA_UNROLL
    for (int i = 0; i < 8; ++i) {
      q[i] = ((words[i] >> shift) & 0x0F0F0F0Fu) | (((qh[i] >> s) & 0x01010101u) << 4);
    }
  }
};

// Q6_K: 256 values in 210 bytes {u8 ql[128]; u8 qh[64]; i8 scales[16];
// f16 d}. Sub-block s: half h = s / 4 (128 values), quarter k = s % 4;
// value l of it: 4 low bits from ql[64 h + 32 (k & 1) + l] (the low nibble
// for k < 2, the high one else), 2 high bits (qh[32 h + l] >> 2k) & 3,
// minus 32, times d and scales[8 h + 2 k + l / 16]. Device row: [ql qh
// scales 208] [d 2].
struct Q6_K : KQuantUnits<Q6_K> {
  static constexpr bool kTail = false;
  static __device__ __forceinline__ float value(const u8*, int) { return 0.0f; }
  static __device__ __forceinline__ void unit(const u8* w, int n_cols, int u, float* v) {
    UnitBits r;
    fetch(w, n_cols, u, &r);
    unsigned int ql[8], qh[8];
    words_of(r.v[0], ql);
    words_of(r.v[1], ql + 4);
    words_of(r.v[2], qh);
    words_of(r.v[3], qh + 4);
    const float d = f16_value(r.s[1]);
    const int k = u & 3;
    const float scales[2] = {(float)(signed char)(r.s[0] & 255u), (float)(signed char)(r.s[0] >> 8)};
    const int low_shift = k < 2 ? 0 : 4;
STRATA_UNROLL
    for (int l = 0; l < 32; ++l) {
      const int q =
          (int)(((byte_of(ql, l) >> low_shift) & 15) | (((byte_of(qh, l) >> (2 * k)) & 3) << 4)) -
          32;
      v[l] = d * scales[l >> 4] * (float)q;
    }
  }
  // A scale for each 16 values: scale[0] for q[0..15], scale[1] for q[16..31].
  static constexpr int kI8Scales = 2;  // scale[0] for q[0..15], scale[1] for q[16..31]
  static constexpr bool kI8Min = false;
  static constexpr bool kI8Q8_1 = false;
  static constexpr bool kI8Super = true;
  static __device__ __forceinline__ void fetch(const u8* w, int n_cols, int u, UnitBits* r) {
    const u8* b = w + (long long)(u >> 3) * 208;
    const int s = u & 7, h = s >> 2, k = s & 3;
    r->v[0] = load_as<uint4>(b + 64 * h + 32 * (k & 1));  // ql
    r->v[1] = load_as<uint4>(b + 64 * h + 32 * (k & 1) + 16);
    r->v[2] = load_as<uint4>(b + 128 + 32 * h);  // qh
    r->v[3] = load_as<uint4>(b + 128 + 32 * h + 16);
    r->s[0] = load_as<unsigned short>(b + 192 + 8 * h + 2 * k);  // the two scales
    r->s[1] = load_as<unsigned short>(w + (long long)(n_cols / 256) * 208 + 2 * (u >> 3));  // d
  }
  static __device__ __forceinline__ void unpack_ints(const UnitBits& r, int u, unsigned int* q,
                                                     int* sc, int* m, float* d, float* dmin) {
    unsigned int ql[8], qh[8];
    words_of(r.v[0], ql);
    words_of(r.v[1], ql + 4);
    words_of(r.v[2], qh);
    words_of(r.v[3], qh + 4);
    *d = f16_value(r.s[1]);
    *dmin = 0.0f;
    sc[0] = (int)(signed char)(r.s[0] & 255u);
    sc[1] = (int)(signed char)(r.s[0] >> 8);
    *m = 0;
    const int k = u & 3;
    const int low_shift = k < 2 ? 0 : 4;
STRATA_UNROLL
    for (int i = 0; i < 8; ++i) {
      q[i] = sub_bytes(((ql[i] >> low_shift) & 0x0F0F0F0Fu) | (((qh[i] >> (2 * k)) & 0x03030303u) << 4),
                       0x20202020u);
    }
  }
};

// ROW_WARPS warps share a row (split-K: the row's units dealt over
// 32 ROW_WARPS lanes); each warp sums its lanes, then the row's first warp
// adds the warps' sums in warp order. ROW_WARPS 1: one warp a row.
// Row `row`'s result for column c: rows [0, n0) go to y0 [NCOLS][n0],
// [n0, n0 + n1) to y1 [NCOLS][n1], the rest to y2 [NCOLS][n_rows - n0 - n1]
// (one matrix of q, k and v rows, or gate and up rows, three or two outputs).
__device__ __forceinline__ void strata_put(float* y0, float* y1, float* y2, int n0, int n1,
                                           int n_rows, int row, int c, float v) {
  if (row < n0) {
    y0[(long long)c * n0 + row] = v;
  } else if (row < n0 + n1) {
    y1[(long long)c * n1 + (row - n0)] = v;
  } else {
    y2[(long long)c * (n_rows - n0 - n1) + (row - n0 - n1)] = v;
  }
}

// The end of a warp's R rows' sums (rows row0 .. row0 + R - 1, those below
// n_rows live): each warp sums its lanes' acc[j] (xor shuffles); with
// ROW_WARPS > 1 the rows' first warp adds the warps' sums in warp order;
// each live row's NCOLS results go out (strata_put). A row's sums are the
// same whatever R.
template <int R>
__device__ __forceinline__ void strata_finish_rows(float (*acc)[NCOLS], int lane, int warp,
                                                   int part, int row0, float* y0, float* y1,
                                                   float* y2, int n0, int n1, int n_rows) {
STRATA_UNROLL
  for (int j = 0; j < R; ++j) {
STRATA_UNROLL
    for (int c = 0; c < NCOLS; ++c) {
      float s = acc[j][c];
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      acc[j][c] = s;
    }
  }
#if ROW_WARPS > 1
  __shared__ float partial[THREADS / 32][R][NCOLS];
  if (lane == 0) {
STRATA_UNROLL
    for (int j = 0; j < R; ++j)
STRATA_UNROLL
      for (int c = 0; c < NCOLS; ++c) partial[warp][j][c] = acc[j][c];
  }
  __syncthreads();
  if (part == 0 && lane == 0) {
STRATA_UNROLL
    for (int j = 0; j < R; ++j) {
      if (row0 + j >= n_rows) break;
STRATA_UNROLL
      for (int c = 0; c < NCOLS; ++c) {
        float s = partial[warp][j][c];
        for (int p = 1; p < ROW_WARPS; ++p) s += partial[warp + p][j][c];
        strata_put(y0, y1, y2, n0, n1, n_rows, row0 + j, c, s);
      }
    }
  }
#else
  (void)warp;
  (void)part;
  if (lane == 0) {
STRATA_UNROLL
    for (int j = 0; j < R; ++j) {
      if (row0 + j >= n_rows) break;
STRATA_UNROLL
      for (int c = 0; c < NCOLS; ++c) strata_put(y0, y1, y2, n0, n1, n_rows, row0 + j, c, acc[j][c]);
    }
  }
#endif
}

// Block `block` of a launch over the rows (blockIdx.x for one matrix).
template <typename Format>
__device__ __forceinline__ void matvec(const u8* __restrict__ w, const float* x,
                                       float* y0, float* y1, float* y2, int n0, int n1,
                                       int n_rows, int n_cols, long long row_bytes, int block) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int part = warp % ROW_WARPS;  // this warp's share of the row
  // Rows a block: of the launch's block (a multiple of 32 ROW_WARPS, at
  // most THREADS), a launch choice the tuner makes.
  const int row = block * (blockDim.x / 32 / ROW_WARPS) + warp / ROW_WARPS;
  const bool live = row < n_rows;  // no early return: the block meets at a barrier
  const int first = part * 32 + lane;
  const int step = 32 * ROW_WARPS;
  const u8* wr = w + (long long)(live ? row : 0) * row_bytes;
  float acc[1][NCOLS];
STRATA_UNROLL
  for (int c = 0; c < NCOLS; ++c) acc[0][c] = 0.0f;
  const int units = live ? n_cols / 32 : 0;
  for (int u = first; u < units; u += step) {
    float v[32];
    Format::unit(wr, n_cols, u, v);
STRATA_UNROLL
    for (int c = 0; c < NCOLS; ++c) {
      const float* xc = x + (long long)c * n_cols + 32 * u;
      float s = 0.0f;
      if (Format::kTail) {  // rows of any width: xc may be unaligned
STRATA_UNROLL
        for (int l = 0; l < 32; ++l) s = fmaf(v[l], xc[l], s);
      } else {  // n_cols a multiple of 32: xc 16-byte aligned (x is)
STRATA_UNROLL
        for (int l = 0; l < 32; l += 4) {  // the same sums in the same order
          const float4 t = load_as<float4>(xc + l);
          s = fmaf(v[l], t.x, s);
          s = fmaf(v[l + 1], t.y, s);
          s = fmaf(v[l + 2], t.z, s);
          s = fmaf(v[l + 3], t.w, s);
        }
      }
      acc[0][c] += s;
    }
  }
  if (Format::kTail && live) {  // the elements after the last whole unit, a lane each
    for (int i = units * 32 + first; i < n_cols; i += step) {
      const float v = Format::value(wr, i);
STRATA_UNROLL
      for (int c = 0; c < NCOLS; ++c) acc[0][c] = fmaf(v, x[(long long)c * n_cols + i], acc[0][c]);
    }
  }
  strata_finish_rows<1>(acc, lane, warp, part, row, y0, y1, y2, n0, n1, n_rows);
}

// The same products from int8 rows (the types with unit_words): x given as
// xq [NCOLS][n_cols] int8 with, per 32-value unit u, its scale xd and the
// sum of its q xs ([NCOLS][n_cols / 32]; strata_quantize_rows, the values
// the cpu backend multiplies; Q8_1 rows: xs is s). Per unit, dp4a gives the
// exact integer dot product sumi of the weights' and the column's q, and
//   acc += (scale_w d_x) sumi - (min_w d_x) sum_x     (Q8_1: - min_w s_x)
// (Q6_K: its two halves' sums, each with its scale), mma_tile_i8's per-unit
// sum; the lanes' and warps' sums as matvec's. A warp takes WARP_ROWS rows
// together: each column's loads serve them all, and each row's sums are
// what they are with one row a warp.
template <typename Format>
__device__ __forceinline__ void matvec_i8(const u8* __restrict__ w,
                                          const signed char* xq,
                                          const float* xd,
                                          const float* xs, float* y0, float* y1,
                                          float* y2, int n0, int n1, int n_rows, int n_cols,
                                          long long row_bytes, int block) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int part = warp % ROW_WARPS;
  // This warp's WARP_ROWS rows from row0 (each column's loads serve them all).
  const int row0 = (block * (blockDim.x / 32 / ROW_WARPS) + warp / ROW_WARPS) * WARP_ROWS;
  const int first = part * 32 + lane;
  const int step = 32 * ROW_WARPS;
  const u8* wr[WARP_ROWS];
STRATA_UNROLL
  for (int j = 0; j < WARP_ROWS; ++j) {
    // A row past the end reads row 0 (its sums are not written).
    wr[j] = w + (long long)(row0 + j < n_rows ? row0 + j : 0) * row_bytes;
  }
  float acc[WARP_ROWS][NCOLS];
STRATA_UNROLL
  for (int j = 0; j < WARP_ROWS; ++j)
STRATA_UNROLL
    for (int c = 0; c < NCOLS; ++c) acc[j][c] = 0.0f;
  // No early return for a warp past the end: the block meets at a barrier.
  const int units = row0 < n_rows ? n_cols / 32 : 0;
  for (int u = first; u < units; u += step) {
    unsigned int q[WARP_ROWS][8];
    float scale[WARP_ROWS][2], min[WARP_ROWS];
STRATA_UNROLL
    for (int j = 0; j < WARP_ROWS; ++j) {
      Format::unit_words(wr[j], n_cols, u, q[j], scale[j], &min[j]);
    }
STRATA_UNROLL
    for (int c = 0; c < NCOLS; ++c) {
      // n_cols a multiple of 32: the unit's 32 bytes are 16-byte aligned (xq is).
      const u8* xr = (const u8*)xq + (long long)c * n_cols + 32 * u;
      const uint4 lo = load_as<uint4>(xr), hi = load_as<uint4>(xr + 16);
      const long long at = (long long)c * (n_cols / 32) + u;
      const float dx = xd[at];
      const float sx = Format::kI8Min ? xs[at] : 0.0f;
STRATA_UNROLL
      for (int j = 0; j < WARP_ROWS; ++j) {
        int s0 = dot4_i8(q[j][0], lo.x, 0);
        s0 = dot4_i8(q[j][1], lo.y, s0);
        s0 = dot4_i8(q[j][2], lo.z, s0);
        s0 = dot4_i8(q[j][3], lo.w, s0);
        if (Format::kI8Scales == 1) {
          s0 = dot4_i8(q[j][4], hi.x, s0);
          s0 = dot4_i8(q[j][5], hi.y, s0);
          s0 = dot4_i8(q[j][6], hi.z, s0);
          s0 = dot4_i8(q[j][7], hi.w, s0);
          if (Format::kI8Q8_1) {  // xs: the row unit's s = f16(d sum q)
            acc[j][c] += scale[j][0] * dx * small_int_float(s0) - min[j] * sx;
          } else if (Format::kI8Min) {
            acc[j][c] += scale[j][0] * dx * small_int_float(s0) - min[j] * dx * sx;
          } else {
            acc[j][c] += scale[j][0] * dx * small_int_float(s0);
          }
        } else {  // a scale each 16 values (Q6_K)
          int s1 = dot4_i8(q[j][4], hi.x, 0);
          s1 = dot4_i8(q[j][5], hi.y, s1);
          s1 = dot4_i8(q[j][6], hi.z, s1);
          s1 = dot4_i8(q[j][7], hi.w, s1);
          acc[j][c] += scale[j][0] * dx * small_int_float(s0) +
                       scale[j][1] * dx * small_int_float(s1);
        }
      }
    }
  }
  strata_finish_rows<WARP_ROWS>(acc, lane, warp, part, row0, y0, y1, y2, n0, n1, n_rows);
}

// Rows of a table by id, dequantized (the token embedding): out [n_ids]
// [n_cols] = dequant(table row ids[i]). A grid-stride loop over the ids'
// 32-value units: any launch of at most THREADS threads a block.
template <typename Format>
__device__ __forceinline__ void get_rows(const u8* __restrict__ table, const int* ids,
                                         float* out, int n_ids, int n_cols,
                                         long long row_bytes) {
  const int units = (n_cols + 31) / 32;  // the last one part of a unit for F32/F16
  const long long total = (long long)n_ids * units;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += (long long)gridDim.x * blockDim.x) {
    const long long r = t / units;
    const int u = (int)(t % units);
    const u8* row = table + (long long)ids[r] * row_bytes;
    float* o = out + r * n_cols + 32 * u;
    if (32 * (u + 1) > n_cols) {  // a float format's tail
      for (int i = 32 * u; i < n_cols; ++i) out[r * n_cols + i] = Format::value(row, i);
      continue;
    }
    float v[32];
    Format::unit(row, n_cols, u, v);
STRATA_UNROLL
    for (int l = 0; l < 32; ++l) o[l] = v[l];
  }
}

// An entry point (the emulation defines STRATA_KERNEL as a plain function).
#ifndef STRATA_KERNEL
#define STRATA_KERNEL extern "C" __global__ void __launch_bounds__(THREADS)
#endif
// Every format's two entries: strata_matvec_<type> and strata_get_rows_<type>;
// with -DSTRATA_ONE_TYPE -DSTRATA_TYPE_<type> only that type's (a build the
// backend compiles in a fraction of the time of all of them).
#define STRATA_ENTRIES(type, Format)                                                      \
  STRATA_KERNEL strata_matvec_##type(const u8* w, const float* x, float* y, int n_rows,   \
                                     int n_cols, long long row_bytes) {                   \
    strata_grid_dependency();                                                             \
    matvec<Format>(w, x, y, y, y, n_rows, 0, n_rows, n_cols, row_bytes, blockIdx.x);      \
  }                                                                                       \
  STRATA_KERNEL strata_matvec3_##type(const u8* w, const float* x, float* y0, float* y1,  \
                                      float* y2, int n0, int n1, int n_rows, int n_cols,  \
                                      long long row_bytes) {                              \
    strata_grid_dependency();                                                             \
    matvec<Format>(w, x, y0, y1, y2, n0, n1, n_rows, n_cols, row_bytes, blockIdx.x);      \
  }                                                                                       \
  STRATA_KERNEL strata_get_rows_##type(const u8* table, const int* ids, float* out,       \
                                       int n_ids, int n_cols, long long row_bytes) {      \
    strata_grid_dependency();                                                             \
    get_rows<Format>(table, ids, out, n_ids, n_cols, row_bytes);                          \
  }

// strata_matvec3_i8_<type>: strata_matvec3_<type>'s outputs from int8 rows
// (matvec_i8), for the types with unit_words.
#define STRATA_I8_ENTRY(type, Format)                                                        \
  STRATA_KERNEL strata_matvec3_i8_##type(const u8* w, const signed char* xq, const float* xd, \
                                         const float* xs, float* y0, float* y1, float* y2,   \
                                         int n0, int n1, int n_rows, int n_cols,             \
                                         long long row_bytes) {                              \
    strata_grid_dependency();                                                                \
    matvec_i8<Format>(w, xq, xd, xs, y0, y1, y2, n0, n1, n_rows, n_cols, row_bytes,          \
                      blockIdx.x);                                                           \
  }

// A mixture's expert slots in one launch (the decode rows of a mixture of
// experts: each slot its own expert, one column): slot s multiplies expert
// ids[s]'s matrix (w + ids[s] expert_bytes) by input row s / x_div (x
// [.][n_cols], or int8 rows xq, xd, xs likewise) into y [s][n_rows]; block
// b = s row_blocks + r takes the rows block r of one matrix's launch takes,
// so each slot's sums are matvec's (matvec_i8's) bit for bit. In the
// NCOLS = 1 builds only: strata_matvec_ids_<type> and, for the types with
// unit_words, strata_matvec_ids_i8_<type>.
#if NCOLS == 1
#define STRATA_IDS_ENTRY(type, Format)                                                        \
  STRATA_KERNEL strata_matvec_ids_##type(const u8* w, long long expert_bytes, const int* ids, \
                                         const float* x, int x_div, float* y, int n_rows,      \
                                         int n_cols, long long row_bytes, int row_blocks) {    \
    strata_grid_dependency();                                                                 \
    const int s = (int)(blockIdx.x / (unsigned)row_blocks);                                   \
    float* ys = y + (long long)s * n_rows;                                                    \
    matvec<Format>(w + ids[s] * expert_bytes, x + (long long)(s / x_div) * n_cols, ys, ys, ys, \
                   n_rows, 0, n_rows, n_cols, row_bytes,                                      \
                   (int)(blockIdx.x % (unsigned)row_blocks));                                 \
  }
#define STRATA_IDS_I8_ENTRY(type, Format)                                                       \
  STRATA_KERNEL strata_matvec_ids_i8_##type(                                                    \
      const u8* w, long long expert_bytes, const int* ids, const signed char* xq,               \
      const float* xd, const float* xs, int x_div, float* y, int n_rows, int n_cols,            \
      long long row_bytes, int row_blocks) {                                                    \
    strata_grid_dependency();                                                                   \
    const int s = (int)(blockIdx.x / (unsigned)row_blocks);                                     \
    const long long r = s / x_div;                                                              \
    float* ys = y + (long long)s * n_rows;                                                      \
    matvec_i8<Format>(w + ids[s] * expert_bytes, xq + r * n_cols, xd + r * (n_cols / 32),       \
                      xs + r * (n_cols / 32), ys, ys, ys, n_rows, 0, n_rows, n_cols, row_bytes, \
                      (int)(blockIdx.x % (unsigned)row_blocks));                                \
  }
#else
#define STRATA_IDS_ENTRY(type, Format)
#define STRATA_IDS_I8_ENTRY(type, Format)
#endif

// -DSTRATA_MATVEC_NO_ENTRIES: the formats alone (the tensor-core program,
// mma_source.h, compiles this file before mma.cuh).
#if !defined(STRATA_MATVEC_NO_ENTRIES)
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_f32)
STRATA_ENTRIES(f32, F32)
STRATA_IDS_ENTRY(f32, F32)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_f16)
STRATA_ENTRIES(f16, F16)
STRATA_IDS_ENTRY(f16, F16)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_0)
STRATA_ENTRIES(q4_0, Q4_0)
STRATA_IDS_ENTRY(q4_0, Q4_0)
STRATA_I8_ENTRY(q4_0, Q4_0)
STRATA_IDS_I8_ENTRY(q4_0, Q4_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_1)
STRATA_ENTRIES(q4_1, Q4_1)
STRATA_IDS_ENTRY(q4_1, Q4_1)
STRATA_I8_ENTRY(q4_1, Q4_1)
STRATA_IDS_I8_ENTRY(q4_1, Q4_1)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_0)
STRATA_ENTRIES(q5_0, Q5_0)
STRATA_IDS_ENTRY(q5_0, Q5_0)
STRATA_I8_ENTRY(q5_0, Q5_0)
STRATA_IDS_I8_ENTRY(q5_0, Q5_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_1)
STRATA_ENTRIES(q5_1, Q5_1)
STRATA_IDS_ENTRY(q5_1, Q5_1)
STRATA_I8_ENTRY(q5_1, Q5_1)
STRATA_IDS_I8_ENTRY(q5_1, Q5_1)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q8_0)
STRATA_ENTRIES(q8_0, Q8_0)
STRATA_IDS_ENTRY(q8_0, Q8_0)
STRATA_I8_ENTRY(q8_0, Q8_0)
STRATA_IDS_I8_ENTRY(q8_0, Q8_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_mxfp4)
STRATA_ENTRIES(mxfp4, MXFP4)
STRATA_IDS_ENTRY(mxfp4, MXFP4)
STRATA_I8_ENTRY(mxfp4, MXFP4)
STRATA_IDS_I8_ENTRY(mxfp4, MXFP4)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_k)
STRATA_ENTRIES(q4_k, Q4_K)
STRATA_IDS_ENTRY(q4_k, Q4_K)
STRATA_I8_ENTRY(q4_k, Q4_K)
STRATA_IDS_I8_ENTRY(q4_k, Q4_K)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_k)
STRATA_ENTRIES(q5_k, Q5_K)
STRATA_IDS_ENTRY(q5_k, Q5_K)
STRATA_I8_ENTRY(q5_k, Q5_K)
STRATA_IDS_I8_ENTRY(q5_k, Q5_K)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q6_k)
STRATA_ENTRIES(q6_k, Q6_K)
STRATA_IDS_ENTRY(q6_k, Q6_K)
STRATA_I8_ENTRY(q6_k, Q6_K)
STRATA_IDS_I8_ENTRY(q6_k, Q6_K)
#endif
#endif  // !STRATA_MATVEC_NO_ENTRIES
