// Generated (JIT) matmul: y = x · Wᵀ for one weight matrix, the hot path of
// every linear layer and the output head on the CPU. Same contract and
// numerics as reference::ops::matmul (kernels/cpu/reference/ops/matmul.h):
// activations are rounded to the type ggml pairs with the weight type before
// integer (quantized weights) or f32 (float weights) dot products; results
// equal the reference up to f32 summation order.
//
// At create() the weights are repacked (packed_weights.h) and the tile
// functions are generated for the matrix's shape (avx2_generator.h): one for
// prefill tiles of `rows` weight rows × `cols` activation rows and their
// ragged edges, one for decode (one activation row, `decode_rows` weight
// rows), and few-column tiles for 2 to kFewRows activation rows (a decode
// step of several sequences: one pass over the weights with up to
// `few_cols` columns a tile, prefetching the weights ahead as the decode
// tile does, so several columns cost about the bytes of one). Every tile
// computes an output with the same operations in the same order, so a row's
// result does not depend on how many rows run beside it (batch invariance).
// run() quantizes the activations into the Scratch and calls the tiles; it
// does not allocate.
//
// Usage:
//   JitScratch scratch(/*max_rows=*/512, /*max_in=*/4096);
//   auto mm = JitMatmul::create(w, IsaTier::kAvx2, KernelParams{}, &cache);
//   (*mm)->run(x, n_rows, y, scratch, pool);   // x [n_rows][n_in] f32,
//                                              // y [n_rows][n_out] f32
//
// Ownership: a JitMatmul owns its packed weights (or views the GGUF bytes
// for float types whose rows need no padding; they must outlive it) and
// shares its generated code with the KernelCache (which must outlive it).
// Threads: run() from one thread at a time per Scratch; it splits the weight
// rows over the pool. create() and KernelCache: one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "absl/status/statusor.h"
#include "kernels/cpu/base/op_types.h"
#include "kernels/cpu/base/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/jit/activations.h"
#include "kernels/cpu/jit/avx2_generator.h"
#include "kernels/cpu/jit/packed_weights.h"

namespace strata::kernels::jit {

// Version of the generators: part of the tune cache key, so a changed
// generator retunes.
inline constexpr int kGeneratorVersion = 10;

// The most activation rows run() takes as a few-column (batched decode)
// step; more run as prefill.
inline constexpr int kFewRows = 16;

// Bytes of the next matmul's share a worker thread prefetches after its
// share of a decode run (set_decode_successor): a few microseconds of the
// memory's read rate, well inside a core's L2.
inline constexpr int64_t kDecodeWarmBytes = 192 << 10;

// The tunables of one matmul (the tuner, tuner.h, searches them).
struct KernelParams {
  int rows = 4;         // prefill tile: weight rows ...
  int cols = 2;         // ... × activation rows (rows * cols <= max_tile)
  int decode_rows = 1;  // decode tile: weight rows × 1 activation row
  int unroll = 2;       // 32-element units per loop iteration
  int prefetch = 0;     // decode: bytes ahead in the value plane (0: none)
  int act_block = 64;   // prefill: activation rows per pass over the rows
  int row_grain = 1;    // tiles per chunk when rows split over threads
  // 2..kFewRows activation rows: the most columns of a few-column tile
  // (`rows` weight rows, unpaired, prefetching `prefetch` bytes ahead);
  // 0: as many as the register file holds (max_cols(rows)), at most
  // kFewRows. 1: no few-column tiles (such steps run as prefill).
  int few_cols = 0;

  bool operator==(const KernelParams&) const = default;
};

// The default parameters for a weight type on `tier` (F32/F16/BF16 tiles
// are wider; the AVX-512 VNNI tiles take more columns).
KernelParams default_params(GgmlType type, IsaTier tier = IsaTier::kAvx2);

// "rows=4 cols=2 decode_rows=4 unroll=2 prefetch=0 act_block=64 grain=1".
std::string params_text(const KernelParams& p);

// Generated tile functions shared by every matrix of one model (matrices of
// the same shape and type reuse the same code). Owns the code.
class KernelCache {
 public:
  // The tile for `conf`, generated on first use.
  TileFn get(const TileConf& conf);
  int size() const { return static_cast<int>(tiles_.size()); }
  size_t code_bytes() const;

 private:
  using Key = decltype(TileConf{}.key());
  std::map<Key, std::unique_ptr<Tile>> tiles_;
};

// Which generated kernel serves `type` on `tier`, for `strata hardware`:
// "avx2 u4xq8_1 + min, 8-row interleaved"; "avx512vnni u8xq8_0 zero point
// 128, 16-row interleaved"; "reference (no generator for Q2_K)".
std::string kernel_name(GgmlType type, IsaTier tier);

// Activation buffers of the generated matmuls; sized once.
class JitScratch {
 public:
  JitScratch(int64_t max_rows, int64_t max_in) : acts_(max_rows, max_in) {}
  int64_t max_rows() const { return acts_.max_rows(); }
  int64_t max_in() const { return acts_.max_in(); }
  ActivationBuffers& activations() { return acts_; }

 private:
  ActivationBuffers acts_;
};

class JitMatmul {
 public:
  // Packs `w` and generates its tiles. Errors: Unimplemented when no
  // generator serves w.type (can_pack); InvalidArgument for params the
  // register file cannot hold ("tile 4x4 needs 16 accumulators; u4 holds
  // 10"); FailedPrecondition when this CPU cannot run `tier`.
  // `cache` may be null (the matmul then owns its code).
  static absl::StatusOr<std::unique_ptr<JitMatmul>> create(
      const WeightMatrix& w, IsaTier tier, const KernelParams& params,
      KernelCache* cache, ThreadPool& pool);

  // y = x · Wᵀ: x [n_rows][n_in], y [n_rows][n_out] (must not overlap x).
  // Requires 1 <= n_rows <= scratch.max_rows(), n_in <= scratch.max_in()
  // (asserted).
  void run(const float* x, int64_t n_rows, float* y, JitScratch& scratch,
           ThreadPool& pool) const;

  // Regenerates the tiles for other parameters (the tuner); same errors as
  // create(). Interleaved layouts (PackedLayout::row_group 8): tiles are
  // whole row groups, so rows and decode_rows are set to 8 whatever `params`
  // says.
  absl::Status set_params(const KernelParams& params);

  const PackedLayout& layout() const { return packed_->layout(); }
  IsaTier tier() const { return tier_; }
  // The most activation rows a prefill tile of `rows` weight rows holds on
  // this matmul's tier (max_tile / rows).
  int max_cols(int rows) const;
  const KernelParams& params() const { return params_; }
  const PackedWeights& packed() const { return *packed_; }

  // The matmul a decode step runs after this one (the forward pass's order;
  // null: none). As each thread finishes its share of a decode run it asks
  // the caches for the first bytes of its share of `next` (decode_warm_plan):
  // the caller's thread a few KB, a worker, which would otherwise wait
  // through the caller's one-thread work (norms, RoPE, softmax), up to
  // kDecodeWarmBytes until the next loop starts. So the weight stream from
  // memory does not stop between two matmuls. `next` must outlive this
  // matmul's runs (or be reset); it changes no result.
  void set_decode_successor(const JitMatmul* next) { successor_ = next; }

  // What thread `thread` of `pool` reads first in a decode run of this
  // matmul (its share's first row groups, every plane), up to `bytes`.
  ThreadPool::WarmPlan decode_warm_plan(int thread, const ThreadPool& pool,
                                        int64_t bytes) const;

 private:
  JitMatmul() = default;
  TileConf base_conf(int rows, int cols) const;
  // Whether prefill tiles of `cols` columns pair row groups
  // (TileConf::pair: the VNNI tier, up to max_paired_cols).
  bool paired(int cols) const;
  void run_tiles(int64_t n_rows, float* y, ActivationBuffers& acts,
                 ThreadPool& pool) const;

  IsaTier tier_ = IsaTier::kAvx2;
  std::unique_ptr<PackedWeights> packed_;
  std::unique_ptr<KernelCache> own_cache_;
  KernelCache* cache_ = nullptr;
  KernelParams params_;
  // Prefill tiles of params_.cols pair row groups (paired(), set_params).
  bool pair_groups_ = false;
  const JitMatmul* successor_ = nullptr;
  // The arguments of a tile at weight row r0 and activation row c0.
  TileArgs tile_args(int64_t r0, int64_t c0, ActivationBuffers& acts, float* y) const;
  // The prefill loop over tiles of up to C columns from table[tail][c - 1]
  // (the prefill tiles, or the few-column ones).
  void run_column_tiles(int64_t n_rows, float* y, ActivationBuffers& acts, ThreadPool& pool,
                        const TileFn (*table)[16], int64_t C, bool pairs) const;

  // prefill_[tail][c - 1]: tail 0 for `rows` weight rows, 1 for the last
  // n_out % rows; c activation rows.
  TileFn prefill_[2][16] = {};
  // few_[tail][c - 1] for 1 <= c <= few_cols_ (few_cols_ 0: none).
  TileFn few_[2][16] = {};
  int few_cols_ = 0;
  TileFn decode_[2] = {};
};

}  // namespace strata::kernels::jit
