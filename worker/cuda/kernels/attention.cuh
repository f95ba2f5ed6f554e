// Decode attention over an f16 KV cache (issue 32): one query token of one
// sequence against the cache rows [window_begin, n_kv), every query head,
// CUDA C++ for NVRTC (embedded by cmake/embed_source.cmake;
// sources.h names the entry); tests/cuda/kernels_emulation_test.cc
// runs it on the CPU against reference::ops::attention.
//
//   strata_attention_decode(const float* q, const unsigned short* k_cache,
//       const unsigned short* v_cache, float* out, float* scores, int n_kv,
//       int window_begin, int n_head, int n_head_kv, int dk, int dv,
//       float scale, float softcap, const float* sinks)
//   q [n_head][dk] f32; k_cache [n_ctx][n_head_kv][dk], v_cache
//   [n_ctx][n_head_kv][dv] f16 bits (worker/kv_cache.h's layout); out
//   [n_head][dv]; scores [n_head][n_kv] f32 scratch. Head h reads KV head
//   h / (n_head / n_head_kv). softcap 0: off. sinks [n_head] or null: head
//   h's sink logit joins the maximum and the softmax's denominator
//   (gpt-oss's attention sinks, as reference::ops::attention).
//
// The numerics of the reference with an f16 cache (llama.cpp's CPU path
// without flash attention): q rounded to f16 before q.k, s = softcap ?
// cap tanh(s / cap) : s, p = softmax(s scale), p rounded to f16 before it
// weighs V. Sums in float (the reference sums the softmax in double).
//
// Launch: grid (n_head), block (THREADS, a multiple of 32 up to 1024).
//
//   strata_attention_rows(q, k_cache, v_cache, out, scores, int scores_stride,
//       int pos0, int window, n_head, n_head_kv, dk, dv, scale, softcap, sinks)
//   n_rows consecutive rows of one sequence (a prompt chunk) in one launch:
//   grid (n_head x n_rows), block r x n_head + h; q [n_rows][n_head][dk],
//   out [n_rows][n_head][dv], scores [n_rows][n_head][scores_stride]
//   (scores_stride >= pos0 + n_rows).
//
//   strata_attention_batch (and _quantize): the decode rows of a step, each
//   of its own sequence; strata_attention_split_scores and _weigh: the same
//   rows with long contexts split over blocks (below).
#ifndef THREADS
#define THREADS 128
#endif
#ifndef STRATA_KERNEL
#define STRATA_KERNEL extern "C" __global__ void __launch_bounds__(THREADS)
#endif
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// (strata_to_f16 and strata_from_f16: quantize.cuh, before this file in
// the program.)
__device__ __forceinline__ float strata_f16(unsigned short h) { return strata_from_f16(h); }
__device__ __forceinline__ float strata_round_f16(float f) {
  return strata_from_f16(strata_to_f16(f));
}

// The block's maximum (max 1) or sum (max 0) of every thread's v, on every
// thread.
__device__ __forceinline__ float strata_block_reduce(float v, int max) {
  __shared__ float warps[32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = max ? fmaxf(v, other) : v + other;
  }
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    const int n = (THREADS + 31) / 32;
    float w = (int)threadIdx.x < n ? warps[threadIdx.x] : (max ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, w, o);
      w = max ? fmaxf(w, other) : w + other;
    }
    if (threadIdx.x == 0) total = w;
  }
  __syncthreads();
  const float result = total;
  __syncthreads();  // `total` and `warps` are free for the next reduction
  return result;
}

#ifndef STRATA_ATTENTION_SHARED_DK
#define STRATA_ATTENTION_SHARED_DK 512  // q rounded in shared memory up to this dk
#endif
// V is weighed by the block's warps together up to dv = 32 x this (a
// register a lane each 32 dims); wider heads by a thread a dim.
#ifndef STRATA_ATTENTION_DV_REGS
#define STRATA_ATTENTION_DV_REGS 8
#endif
// Loops the device compiler unrolls wholly, or 4 times (nothing for the
// emulation).
#if defined(__CUDA_ARCH__)
#define STRATA_ATTENTION_UNROLL _Pragma("unroll")
#define STRATA_ATTENTION_UNROLL4 _Pragma("unroll 4")
#else
#define STRATA_ATTENTION_UNROLL
#define STRATA_ATTENTION_UNROLL4
#endif

// Key row kr [dk] (f16 bits) . q (f16-rounded), summed d = 0 .. dk - 1 in
// float; 8 halves a load when `wide` (the caller's check that every key row
// is 16-byte aligned: dk a multiple of 8 and the cache's start aligned).
__device__ __forceinline__ float strata_key_dot(const float* q_round,
                                               const unsigned short* kr, int dk,
                                               bool wide) {
  float s = 0.0f;
  if (wide) {
    for (int d = 0; d < dk; d += 8) {
      unsigned short h[8];
#if defined(__CUDA_ARCH__)
      const uint4 w = *(const uint4*)(kr + d);
      h[0] = (unsigned short)(w.x & 0xffffu);
      h[1] = (unsigned short)(w.x >> 16);
      h[2] = (unsigned short)(w.y & 0xffffu);
      h[3] = (unsigned short)(w.y >> 16);
      h[4] = (unsigned short)(w.z & 0xffffu);
      h[5] = (unsigned short)(w.z >> 16);
      h[6] = (unsigned short)(w.w & 0xffffu);
      h[7] = (unsigned short)(w.w >> 16);
#else
      memcpy(h, kr + d, sizeof h);  // the emulation
#endif
      for (int i = 0; i < 8; ++i) s += q_round[d + i] * strata_f16(h[i]);
    }
  } else {
    for (int d = 0; d < dk; ++d) s += q_round[d] * strata_f16(kr[d]);
  }
  return s;
}

// Head h of one query row against keys [j0, j1) of KV head g: sc[j] =
// scale s with s = q . k_j (q rounded to f16, in shared memory up to
// STRATA_ATTENTION_SHARED_DK dims) or softcap tanh(s / softcap); returns
// the largest of them and m0, on every thread. Thread t takes keys j0 + t,
// j0 + t + THREADS, ... (the exponentials after it may reuse that split
// without a barrier).
__device__ __forceinline__ float strata_head_scores(const float* qh,
                                                   const unsigned short* k_cache, float* sc,
                                                   int j0, int j1, int g, int n_head_kv, int dk,
                                                   float scale, float softcap, float m0) {
  // q rounded to f16 once, in shared memory (beyond its size: in place in
  // a register of each product, the same values).
  __shared__ float q_shared[STRATA_ATTENTION_SHARED_DK];
  const bool shared_q = dk <= STRATA_ATTENTION_SHARED_DK;
  if (shared_q) {
    for (int d = threadIdx.x; d < dk; d += THREADS) q_shared[d] = strata_round_f16(qh[d]);
  }
  __syncthreads();
  // A layer's keys start where the layers before end: aligned for some
  // shapes only (the same for every thread of the block).
  const bool wide = (dk & 7) == 0 && ((unsigned long long)k_cache & 15ull) == 0;
  float m = m0;
  for (int j = j0 + (int)threadIdx.x; j < j1; j += THREADS) {
    const unsigned short* kr = k_cache + ((long long)j * n_head_kv + g) * dk;
    float s = 0.0f;
    if (shared_q) {
      s = strata_key_dot(q_shared, kr, dk, wide);
    } else {
      for (int d = 0; d < dk; ++d) s += strata_round_f16(qh[d]) * strata_f16(kr[d]);
    }
    if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
    s *= scale;
    sc[j] = s;
    m = fmaxf(m, s);
  }
  return strata_block_reduce(m, 1);
}

// oh [dv] = the sum over keys j in [j0, j1) of sc[j] v_j (V head g), every
// sc[j] written before the call (a barrier between).
__device__ __forceinline__ void strata_weigh_values(const unsigned short* v_cache,
                                                   const float* sc, float* oh, int j0, int j1,
                                                   int g, int n_head_kv, int dv) {
  if (dv <= 32 * STRATA_ATTENTION_DV_REGS) {
    // Warp w weighs keys w, w + W, ... of the range (W warps; each key's V
    // row read by one warp, its lanes on consecutive dims: coalesced, and
    // W rows in flight where a thread a dim walked the keys one by one);
    // lane l sums dims l + 32 i. The warps' sums are added in warp order.
    constexpr int kWarps = THREADS / 32;
    __shared__ float o_part[kWarps][32 * STRATA_ATTENTION_DV_REGS];
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    float o[STRATA_ATTENTION_DV_REGS];
STRATA_ATTENTION_UNROLL
    for (int i = 0; i < STRATA_ATTENTION_DV_REGS; ++i) o[i] = 0.0f;
STRATA_ATTENTION_UNROLL4
    for (int j = j0 + warp; j < j1; j += kWarps) {
      const float p = sc[j];
      const unsigned short* vr = v_cache + ((long long)j * n_head_kv + g) * dv;
STRATA_ATTENTION_UNROLL
      for (int i = 0; i < STRATA_ATTENTION_DV_REGS; ++i) {
        const int d = lane + 32 * i;
        if (d < dv) o[i] += p * strata_f16(vr[d]);
      }
    }
STRATA_ATTENTION_UNROLL
    for (int i = 0; i < STRATA_ATTENTION_DV_REGS; ++i) {
      const int d = lane + 32 * i;
      if (d < dv) o_part[warp][d] = o[i];
    }
    __syncthreads();
    for (int d = threadIdx.x; d < dv; d += THREADS) {
      float weighed = o_part[0][d];
      for (int w = 1; w < kWarps; ++w) weighed += o_part[w][d];
      oh[d] = weighed;
    }
  } else {
    for (int d = threadIdx.x; d < dv; d += THREADS) {
      float o = 0.0f;
      for (int j = j0; j < j1; ++j) {
        o += sc[j] * strata_f16(v_cache[((long long)j * n_head_kv + g) * dv + d]);
      }
      oh[d] = o;
    }
  }
}

// Head h of one query row: qh [dk], its keys and values [window_begin,
// n_kv) of KV head g, scores sc [n_kv] scratch, out oh [dv].
__device__ __forceinline__ void strata_attend_head(
    const float* qh, const unsigned short* k_cache,
    const unsigned short* v_cache, float* oh, float* sc,
    int n_kv, int window_begin, int g, int n_head_kv, int dk, int dv, float scale,
    float softcap, float sink, int has_sink) {
  const float m = strata_head_scores(qh, k_cache, sc, window_begin, n_kv, g, n_head_kv, dk,
                                     scale, softcap, sink);
  float sum = 0.0f;
  for (int j = window_begin + (int)threadIdx.x; j < n_kv; j += THREADS) {
    const float e = expf(sc[j] - m);
    sc[j] = e;
    sum += e;
  }
  float total = strata_block_reduce(sum, 0);  // its barriers order sc's writes
  if (has_sink) total += expf(sink - m);
  const float inv = 1.0f / total;
  // The weights p = f16(e / total), once each (not once a V column).
  for (int j = window_begin + (int)threadIdx.x; j < n_kv; j += THREADS) {
    sc[j] = strata_round_f16(sc[j] * inv);
  }
  __syncthreads();
  strata_weigh_values(v_cache, sc, oh, window_begin, n_kv, g, n_head_kv, dv);
  __syncthreads();  // q_shared, sc and o_part are free for the block's next head
}

STRATA_KERNEL strata_attention_decode(const float* q,
                                      const unsigned short* k_cache,
                                      const unsigned short* v_cache,
                                      float* out, float* scores,
                                      int n_kv, int window_begin, int n_head, int n_head_kv,
                                      int dk, int dv, float scale, float softcap,
                                      const float* __restrict__ sinks) {
  strata_grid_dependency();
  const int h = blockIdx.x;
  strata_attend_head(q + (long long)h * dk, k_cache, v_cache, out + (long long)h * dv,
                     scores + (long long)h * n_kv, n_kv, window_begin, h / (n_head / n_head_kv),
                     n_head_kv, dk, dv, scale, softcap, sinks != nullptr ? sinks[h] : -INFINITY,
                     sinks != nullptr);
}

// The decode rows of a step, each of its own sequence, in one launch: block
// r x n_head + h is row r's head h. Row r is row row_of[r] of q [.][n_head]
// [dk] and out [.][n_head][dv]; its sequence's caches start at kv_base[r]
// (f16, per layer K [n_ctx[r]][n_head_kv][dk] then V [n_ctx[r]][n_head_kv]
// [dv], worker/cuda/device_backend_impl.h's layout), of which it reads
// layer `layer`'s keys [begin, n_kv[r]) (begin n_kv[r] - window when window
// > 0); scores [rows][n_head][scores_stride]. The same numbers as
// strata_attention_decode per row.
// Row r's keys of layer `layer` (f16 bits; its values follow the layer's
// n_ctx[r] keys).
__device__ __forceinline__ const unsigned short* strata_row_keys(
    const unsigned long long* kv_base, const int* n_ctx, int r, int layer, int n_head_kv, int dk,
    int dv) {
  const long long kw = (long long)n_head_kv * dk, vw = (long long)n_head_kv * dv;
  return (const unsigned short*)kv_base[r] + (long long)layer * n_ctx[r] * (kw + vw);
}

// Block r x n_head + h of strata_attention_batch: its row's head h.
// Returns the row (of q and out).
__device__ __forceinline__ long long strata_attention_batch_head(
    const float* q, const unsigned long long* kv_base, const int* n_ctx, const int* n_kv,
    const int* row_of, float* out, float* scores, int scores_stride, int layer, int window,
    int n_head, int n_head_kv, int dk, int dv, float scale, float softcap, const float* sinks) {
  const int h = blockIdx.x % n_head;
  const int r = blockIdx.x / n_head;
  const unsigned short* k = strata_row_keys(kv_base, n_ctx, r, layer, n_head_kv, dk, dv);
  const unsigned short* v = k + (long long)n_ctx[r] * n_head_kv * dk;
  const int nk = n_kv[r];
  const int begin = window > 0 && nk > window ? nk - window : 0;
  const long long row = row_of[r];
  strata_attend_head(q + (row * n_head + h) * dk, k, v, out + (row * n_head + h) * dv,
                     scores + ((long long)r * n_head + h) * scores_stride, nk, begin,
                     h / (n_head / n_head_kv), n_head_kv, dk, dv, scale, softcap,
                     sinks != nullptr ? sinks[h] : -INFINITY, sinks != nullptr);
  return row;
}

STRATA_KERNEL strata_attention_batch(const float* q,
                                     const unsigned long long* kv_base,
                                     const int* n_ctx, const int* n_kv,
                                     const int* row_of, float* out,
                                     float* scores, int scores_stride, int layer,
                                     int window, int n_head, int n_head_kv, int dk, int dv,
                                     float scale, float softcap, const float* __restrict__ sinks) {
  strata_grid_dependency();
  strata_attention_batch_head(q, kv_base, n_ctx, n_kv, row_of, out, scores, scores_stride, layer,
                              window, n_head, n_head_kv, dk, dv, scale, softcap, sinks);
}

// One head of row `row` of out [.][n_head][dv] is final (this block wrote
// it, or a launch before): counted in done[row]; the block that counts the
// row's last head quantizes the row into int8 rows of `kind` and sets
// done[row] back to 0 (strata_attention_batch_quantize below).
__device__ __forceinline__ void strata_head_done_quantize(const float* out, long long row,
                                                          int n_head, int dv, int kind,
                                                          signed char* xq, float* xd, float* xs,
                                                          unsigned int* done) {
  __shared__ int last;
  __threadfence();  // this block's outputs, before its count
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&done[row], 1u) == (unsigned int)(n_head - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();  // every head counted: their outputs are visible
  const long long width = (long long)n_head * dv;
  strata_quantize_values<true>(out + row * width, width, xq + row * width, xd + row * (width / 32),
                               xs + row * (width / 32), kind, threadIdx.x >> 5, THREADS / 32,
                               (int)threadIdx.x & 31);
  if (threadIdx.x == 0) done[row] = 0u;
}

// strata_attention_batch, which also gives each row's output [n_head dv]
// as the o projection's int8 rows of `kind` (quantize.cuh's layout and
// numbers: xq [row][n_head dv], xd and xs [row][n_head dv / 32]; a Q8_K
// block may span two heads): done[row] counts the row's finished heads,
// and the block that finishes the last one quantizes the row and sets
// done[row] back to 0 for the next launch (done: zeros before the first).
// The heads' outputs reach it through __threadfence and L2 loads.
STRATA_KERNEL strata_attention_batch_quantize(
    const float* q, const unsigned long long* kv_base, const int* n_ctx, const int* n_kv,
    const int* row_of, float* out, float* scores, int scores_stride, int layer, int window,
    int n_head, int n_head_kv, int dk, int dv, float scale, float softcap,
    const float* __restrict__ sinks, int kind, signed char* xq, float* xd, float* xs,
    unsigned int* done) {
  strata_grid_dependency();
  const long long row =
      strata_attention_batch_head(q, kv_base, n_ctx, n_kv, row_of, out, scores, scores_stride,
                                  layer, window, n_head, n_head_kv, dk, dv, scale, softcap, sinks);
  strata_head_done_quantize(out, row, n_head, dv, kind, xq, xd, xs, done);
}

// Decode attention split over its keys (flash-decoding's split of a long
// context over many blocks, with the reference's numbers): a row whose keys
// [begin, n_kv) (as strata_attention_batch's) number len > split_keys has
// them in chunks of C = max(split_keys, ceil(len / splits)) keys, chunk c =
// [begin + c C, min(begin + (c + 1) C, n_kv)), each a block of its own;
// grid (rows x n_head x splits), block (r x n_head + h) x splits + c.
//
//   strata_attention_split_scores(q, kv_base, n_ctx, n_kv, row_of, out,
//       scores, scores_stride, part, layer, window, n_head, n_head_kv, dk,
//       dv, scale, softcap, sinks, splits, split_keys)
//   A row of one chunk: block (r, h, 0) attends as strata_attention_batch
//   (the same bits), the row's other blocks return. A row of more: chunk
//   c's scores s (as strata_attention_batch's) into scores [rows][n_head]
//   [scores_stride], m_c = max(sink, its s) and l_c = the sum over it of
//   exp(s - m_c) into part [rows][n_head][splits][2].
//
//   strata_attention_split_weigh(kv_base, n_ctx, n_kv, row_of, out, scores,
//       scores_stride, part, part_o, head_done, layer, window, n_head,
//       n_head_kv, dk, dv, sinks, splits, split_keys, kind, xq, xd, xs, done)
//   After it, the same grid. A row of more chunks: m = max_c m_c (the
//   maximum with the sink), total = sum_c l_c exp(m_c - m) (c in order) +
//   exp(sink - m), p = f16(exp(s - m) / total): the reference's numbers up
//   to the order of total's sum. Chunk c's sum of p v goes to part_o [rows]
//   [n_head][splits][dv]; the block that finishes a head's last chunk
//   (head_done [rows][n_head], zeros before the first launch and after
//   each) adds the chunks' sums in chunk order into out. When kind is not
//   kRoundNone (0) the row's last final head (a one-chunk row's: at block
//   (r, h, 0)) quantizes the row as strata_attention_batch_quantize does
//   (done [row]); otherwise one-chunk rows are left alone.
//
// A row's numbers depend on its own keys, splits and split_keys only, so a
// step's rows stay independent of each other.
struct StrataSplitBlock {
  int r, h, c;  // row of the launch, head, chunk
  int begin, n_kv, chunks, j0, j1;
};
__device__ __forceinline__ StrataSplitBlock strata_split_block(const int* n_kv, int window,
                                                               int n_head, int splits,
                                                               int split_keys) {
  StrataSplitBlock b;
  b.c = (int)(blockIdx.x % (unsigned)splits);
  b.h = (int)((blockIdx.x / (unsigned)splits) % (unsigned)n_head);
  b.r = (int)(blockIdx.x / ((unsigned)splits * (unsigned)n_head));
  b.n_kv = n_kv[b.r];
  b.begin = window > 0 && b.n_kv > window ? b.n_kv - window : 0;
  const int len = b.n_kv - b.begin;
  int size = (len + splits - 1) / splits;
  if (size < split_keys) size = split_keys;
  b.chunks = len > 0 ? (len + size - 1) / size : 0;
  // (c < chunks: c size < len, no overflow.)
  b.j0 = b.c < b.chunks ? b.begin + b.c * size : b.n_kv;
  b.j1 = b.j0 + size < b.n_kv ? b.j0 + size : b.n_kv;
  return b;
}

STRATA_KERNEL strata_attention_split_scores(
    const float* q, const unsigned long long* kv_base, const int* n_ctx, const int* n_kv,
    const int* row_of, float* out, float* scores, int scores_stride, float* part, int layer,
    int window, int n_head, int n_head_kv, int dk, int dv, float scale, float softcap,
    const float* __restrict__ sinks, int splits, int split_keys) {
  strata_grid_dependency();
  const StrataSplitBlock b = strata_split_block(n_kv, window, n_head, splits, split_keys);
  if (b.c >= b.chunks) return;
  const unsigned short* k = strata_row_keys(kv_base, n_ctx, b.r, layer, n_head_kv, dk, dv);
  const long long row = row_of[b.r];
  const long long head = (long long)b.r * n_head + b.h;
  const int g = b.h / (n_head / n_head_kv);
  const float sink = sinks != nullptr ? sinks[b.h] : -INFINITY;
  const float* qh = q + (row * n_head + b.h) * dk;
  float* sc = scores + head * scores_stride;
  if (b.chunks == 1) {
    strata_attend_head(qh, k, k + (long long)n_ctx[b.r] * n_head_kv * dk,
                       out + (row * n_head + b.h) * dv, sc, b.n_kv, b.begin, g, n_head_kv, dk, dv,
                       scale, softcap, sink, sinks != nullptr);
    return;
  }
  const float m =
      strata_head_scores(qh, k, sc, b.j0, b.j1, g, n_head_kv, dk, scale, softcap, sink);
  float sum = 0.0f;
  for (int j = b.j0 + (int)threadIdx.x; j < b.j1; j += THREADS) sum += expf(sc[j] - m);
  const float l = strata_block_reduce(sum, 0);
  if (threadIdx.x == 0) {
    part[(head * splits + b.c) * 2] = m;
    part[(head * splits + b.c) * 2 + 1] = l;
  }
}

STRATA_KERNEL strata_attention_split_weigh(
    const unsigned long long* kv_base, const int* n_ctx, const int* n_kv, const int* row_of,
    float* out, float* scores, int scores_stride, const float* part, float* part_o,
    unsigned int* head_done, int layer, int window, int n_head, int n_head_kv, int dk, int dv,
    const float* __restrict__ sinks, int splits, int split_keys, int kind, signed char* xq,
    float* xd, float* xs, unsigned int* done) {
  strata_grid_dependency();
  const StrataSplitBlock b = strata_split_block(n_kv, window, n_head, splits, split_keys);
  if (b.c >= b.chunks) return;
  const long long row = row_of[b.r];
  const long long head = (long long)b.r * n_head + b.h;
  if (b.chunks > 1) {
    const float* ph = part + head * splits * 2;
    float m = -INFINITY;
    for (int c = 0; c < b.chunks; ++c) m = fmaxf(m, ph[2 * c]);
    float total = 0.0f;
    for (int c = 0; c < b.chunks; ++c) total += ph[2 * c + 1] * expf(ph[2 * c] - m);
    if (sinks != nullptr) total += expf(sinks[b.h] - m);
    const float inv = 1.0f / total;
    float* sc = scores + head * scores_stride;
    for (int j = b.j0 + (int)threadIdx.x; j < b.j1; j += THREADS) {
      sc[j] = strata_round_f16(expf(sc[j] - m) * inv);
    }
    __syncthreads();
    const unsigned short* v = strata_row_keys(kv_base, n_ctx, b.r, layer, n_head_kv, dk, dv) +
                              (long long)n_ctx[b.r] * n_head_kv * dk;
    strata_weigh_values(v, sc, part_o + (head * splits + b.c) * dv, b.j0, b.j1,
                        b.h / (n_head / n_head_kv), n_head_kv, dv);
    __shared__ int last;
    __threadfence();  // this chunk's sums, before its count
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&head_done[head], 1u) == (unsigned int)(b.chunks - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();  // every chunk counted: their sums are visible
    const float* po = part_o + head * splits * dv;
    float* oh = out + (row * n_head + b.h) * dv;
    for (int d = threadIdx.x; d < dv; d += THREADS) {
      float o = strata_load_y<true>(po + d);
      for (int c = 1; c < b.chunks; ++c) o += strata_load_y<true>(po + (long long)c * dv + d);
      oh[d] = o;
    }
    if (threadIdx.x == 0) head_done[head] = 0u;
  }
  if (kind == 0) return;
  strata_head_done_quantize(out, row, n_head, dv, kind, xq, xd, xs, done);
}

// Rows [0, n_rows) of one sequence's prompt chunk at positions pos0 ..: row
// r attends to keys [begin, pos0 + r + 1), begin pos0 + r + 1 - window when
// window > 0 (else 0); the same numbers as strata_attention_decode per row.
STRATA_KERNEL strata_attention_rows(const float* q,
                                    const unsigned short* k_cache,
                                    const unsigned short* v_cache,
                                    float* out, float* scores,
                                    int scores_stride, int pos0, int window, int n_head,
                                    int n_head_kv, int dk, int dv, float scale, float softcap,
                                    const float* __restrict__ sinks) {
  strata_grid_dependency();
  const int h = blockIdx.x % n_head;
  const int r = blockIdx.x / n_head;
  const int n_kv = pos0 + r + 1;
  const int begin = window > 0 && n_kv > window ? n_kv - window : 0;
  strata_attend_head(q + ((long long)r * n_head + h) * dk, k_cache, v_cache,
                     out + ((long long)r * n_head + h) * dv,
                     scores + ((long long)r * n_head + h) * scores_stride, n_kv, begin,
                     h / (n_head / n_head_kv), n_head_kv, dk, dv, scale, softcap,
                     sinks != nullptr ? sinks[h] : -INFINITY, sinks != nullptr);
}
