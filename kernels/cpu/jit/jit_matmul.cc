#include "kernels/cpu/jit/jit_matmul.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/jit/perf_map.h"

namespace strata::kernels::jit {
namespace {

bool is_float(Encoding e) {
  return e == Encoding::kF32 || e == Encoding::kF16 || e == Encoding::kBF16;
}

const char* act_name(ActKind a) {
  switch (a) {
    case ActKind::kQ8_0:
      return "q8_0";
    case ActKind::kQ8_1:
      return "q8_1";
    case ActKind::kQ8_K:
      return "q8_K";
    case ActKind::kF32:
      return "f32";
    case ActKind::kF16:
      return "f16";
    case ActKind::kBF16:
      return "bf16";
  }
  return "?";
}

}  // namespace

KernelParams default_params(GgmlType type, IsaTier tier) {
  KernelParams p;
  if (type == GgmlType::kF32 || type == GgmlType::kF16 ||
      type == GgmlType::kBF16) {
    p.rows = 4;
    p.cols = 3;
  }
  if (interleaved_type(type)) {
    p.rows = 8;
    p.decode_rows = 8;
    // kU5 holds 3 columns (interleaved_generator.cc), the others 4-5.
    const bool u5 = type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1 ||
                    type == GgmlType::kQ5_K;
    p.cols = u5 ? 3 : 4;
    // 32 registers: AVX-512 holds 9-13 columns. VNNI takes 6 by default,
    // which pairs row groups (max_paired_cols: each activation broadcast,
    // a load, feeds two vpdpbusd; 12 independent int32 sums cover the
    // vpdpbusd latency as 12 unpaired columns did). On Ice Lake (session
    // 21) `matmul_bench -t 1 --rows 512 --cols 6` against `--cols 12`:
    // Q8_0 576x576 178 against 123 GMAC/s, Q4_0 146 against 128; the
    // tuner still tries 8-12 unpaired columns.
    if (tier == IsaTier::kAvx512) p.cols = 8;
    if (tier == IsaTier::kAvx512Vnni) p.cols = 6;
    p.unroll = 1;
    p.prefetch =
        1024;  // decode: 13.5 -> 19-22 GB/s on Q4_0 (bench/matmul_bench)
  }
  return p;
}

std::string params_text(const KernelParams& p) {
  return absl::StrCat("rows=", p.rows, " cols=", p.cols,
                      " decode_rows=", p.decode_rows, " unroll=", p.unroll,
                      " prefetch=", p.prefetch, " act_block=", p.act_block,
                      " grain=", p.row_grain, " few_cols=", p.few_cols);
}

TileFn KernelCache::get(const TileConf& conf) {
  std::unique_ptr<Tile>& t = tiles_[conf.key()];
  if (t == nullptr) {
    t = conf.interleaved ? make_interleaved_tile(conf) : make_avx2_tile(conf);
    if (perf_map_enabled()) {
      perf_map_add(reinterpret_cast<const void*>(t->fn()), t->code_bytes(),
                   absl::StrCat("strata_",
                                conf.vnni   ? "vnni_"
                                : conf.wide ? "avx512_"
                                            : "",
                                encoding_name(conf.encoding), "_r", conf.rows,
                                "c", conf.cols, "_in",
                                conf.n_units * (conf.interleaved ? 32 : 8),
                                "_out", conf.y_stride));
    }
  }
  return t->fn();
}

size_t KernelCache::code_bytes() const {
  size_t n = 0;
  for (const auto& [key, tile] : tiles_) n += tile->code_bytes();
  return n;
}

std::string kernel_name(GgmlType type, IsaTier tier) {
  const std::string type_name(ggml_type_info(type).name);
  if (!can_pack(type)) {
    return absl::StrCat("reference (no generator for ", type_name, ")");
  }
  const int64_t n_in = type == GgmlType::kF32 || type == GgmlType::kF16 ||
                               type == GgmlType::kBF16
                           ? 8
                           : 256;
  const absl::StatusOr<PackedLayout> l = packed_layout(type, n_in, 1, tier);
  if (!l.ok()) return "reference";
  // Interleaved (quantized) layouts have AVX-512 and VNNI flavours; the
  // rest run the AVX2 generator on every tier.
  const bool own = tier != IsaTier::kAvx2 && l->row_group > 1;
  std::string s =
      absl::StrCat(own ? isa_name(tier) : "avx2", " ",
                   encoding_name(l->encoding), "x", act_name(l->act));
  if (l->correction == Correction::kZeroPoint) {
    absl::StrAppend(&s, " zero point ", l->zero_point);
  } else if (l->correction == Correction::kMin) {
    absl::StrAppend(&s, " + min");
  }
  if (l->paired_scales) absl::StrAppend(&s, ", 2 scales/32");
  if (l->row_group > 1)
    absl::StrAppend(&s, ", ", l->row_group, "-row interleaved");
  if (tier != IsaTier::kAvx2 && !own) {
    absl::StrAppend(&s, " (no ", isa_name(tier),
                    " generator for this type; the avx2 one runs)");
  }
  return s;
}

TileConf JitMatmul::base_conf(int rows, int cols) const {
  const PackedLayout& l = packed_->layout();
  TileConf c;
  c.encoding = l.encoding;
  c.paired_scales = l.paired_scales;
  c.correction = l.correction != Correction::kNone;
  c.min_correction = l.correction == Correction::kMin;
  c.interleaved = l.row_group > 1;
  if (c.interleaved) c.group = l.row_group;
  c.scale_f16 = l.scale_f16;
  c.k_scales = l.k_scales;
  c.signed_scales = l.type == GgmlType::kQ6_K;
  c.wide = tier_ != IsaTier::kAvx2 && c.interleaved;
  c.vnni = tier_ == IsaTier::kAvx512Vnni && c.interleaved;
  c.rows = rows;
  c.cols = cols;
  c.unroll =
      l.k_scales ? 8 : params_.unroll;  // k_scales: a super-block per iteration
  c.prefetch = cols == 1 ? params_.prefetch : 0;
  c.n_units = l.n_units;
  c.unit_bytes = l.unit_bytes;
  c.value_stride = l.value_stride;
  c.act_stride = is_float(l.encoding) ? l.n_in_pad : l.n_in;
  c.act_d_stride = l.act_d_stride;
  c.act_corr_stride = l.corr_len;
  c.y_stride = l.n_out;
  if (c.interleaved) {
    const int64_t es = scale_elem_bytes(l);
    c.hbit_group_bytes = l.hbit_stride;
    c.scale_group_bytes = l.scale_stride * es;
    c.mins_group_bytes = l.mins_stride * es;
  }
  return c;
}

bool JitMatmul::paired(int cols) const {
  const TileConf c = base_conf(packed_->layout().row_group, cols);
  return c.vnni && cols <= max_paired_cols(c);
}

int JitMatmul::max_cols(int rows) const {
  return max_tile(base_conf(rows, 1)) / rows;
}

absl::Status JitMatmul::set_params(const KernelParams& params) {
  const PackedLayout& l = packed_->layout();
  KernelParams p = params;
  if (l.row_group > 1) {  // tiles are whole row groups
    p.rows = l.row_group;
    p.decode_rows = l.row_group;
  }
  TileConf probe = base_conf(1, 1);
  const int limit = max_tile(probe);
  if (p.rows < 1 || p.cols < 1 || p.cols > 16 || p.rows * p.cols > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tile ", p.rows, "x", p.cols, " needs ", p.rows * p.cols,
        " accumulators; ", encoding_name(l.encoding), " holds ", limit));
  }
  if (p.decode_rows < 1 || p.decode_rows > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "decode_rows ", p.decode_rows, " is out of range [1, ", limit, "]"));
  }
  if (p.unroll < 1 || p.unroll > 8 || p.prefetch < 0 || p.prefetch > 8192 ||
      p.act_block < 1 || p.row_grain < 1 || p.few_cols < 0 || p.few_cols > kFewRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel parameters out of range: ", params_text(p)));
  }
  const int few_cols =
      p.few_cols == 0 ? std::min(kFewRows, max_cols(p.rows)) : p.few_cols;
  if (few_cols > max_cols(p.rows)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "few_cols ", p.few_cols, ": a tile of ", p.rows, " rows holds ", max_cols(p.rows)));
  }
  params_ = p;
  pair_groups_ = l.row_group > 1 && paired(p.cols);
  const int64_t n_out = l.n_out;
  for (auto& row : prefill_) std::fill(std::begin(row), std::end(row), nullptr);
  decode_[0] = decode_[1] = nullptr;
  const int tails[2] = {p.rows, static_cast<int>(n_out % p.rows)};
  for (int t = 0; t < 2; ++t) {
    if (tails[t] == 0 || (t == 0 && n_out < p.rows)) continue;
    for (int c = 1; c <= p.cols; ++c) {
      TileConf conf = base_conf(tails[t], c);
      // Whole row groups of a tile that pairs them (max_paired_cols).
      conf.pair = t == 0 && pair_groups_;
      // A prefill tile never prefetches (base_conf gives a 1-column tile
      // the decode tile's distance; the paired generator has none).
      if (conf.pair) conf.prefetch = 0;
      prefill_[t][c - 1] = cache_->get(conf);
    }
  }
  // Few-column tiles: unpaired, `rows` weight rows, prefetching ahead.
  for (auto& row : few_) std::fill(std::begin(row), std::end(row), nullptr);
  few_cols_ = few_cols < 2 ? 0 : few_cols;
  for (int t = 0; t < 2 && few_cols_ > 0; ++t) {
    if (tails[t] == 0 || (t == 0 && n_out < p.rows)) continue;
    for (int c = 1; c <= few_cols_; ++c) {
      TileConf conf = base_conf(tails[t], c);
      conf.prefetch = p.prefetch;
      few_[t][c - 1] = cache_->get(conf);
    }
  }
  const int dtails[2] = {p.decode_rows,
                         static_cast<int>(n_out % p.decode_rows)};
  for (int t = 0; t < 2; ++t) {
    if (dtails[t] == 0 || (t == 0 && n_out < p.decode_rows)) continue;
    decode_[t] = cache_->get(base_conf(dtails[t], 1));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<JitMatmul>> JitMatmul::create(
    const WeightMatrix& w, IsaTier tier,
    const KernelParams& params, KernelCache* cache, ThreadPool& pool) {
  if (!cpu_has(tier)) {
    return absl::FailedPreconditionError(
        absl::StrCat("this CPU cannot run ISA tier ", isa_name(tier)));
  }
  absl::StatusOr<std::unique_ptr<PackedWeights>> packed =
      PackedWeights::pack(w, tier, pool);
  if (!packed.ok()) return packed.status();
  auto m = std::unique_ptr<JitMatmul>(new JitMatmul());
  m->tier_ = tier;
  m->packed_ = std::move(*packed);
  if (cache == nullptr) {
    m->own_cache_ = std::make_unique<KernelCache>();
    cache = m->own_cache_.get();
  }
  m->cache_ = cache;
  absl::Status st = m->set_params(params);
  if (!st.ok()) return st;
  return m;
}

void JitMatmul::run(const float* x, int64_t n_rows, float* y,
                    JitScratch& scratch, ThreadPool& pool) const {
  const PackedLayout& l = packed_->layout();
  assert(n_rows >= 1 && n_rows <= scratch.max_rows() &&
         l.n_in <= scratch.max_in());
  ActivationBuffers& acts = scratch.activations();
  prepare_activations(l, x, n_rows, acts, pool);
  run_tiles(n_rows, y, acts, pool);
}

ThreadPool::WarmPlan JitMatmul::decode_warm_plan(int thread,
                                                 const ThreadPool& pool,
                                                 int64_t bytes) const {
  const PackedLayout& l = packed_->layout();
  const PackedWeights& pw = *packed_;
  const int64_t R = params_.decode_rows;
  const int64_t n_tiles = (l.n_out + R - 1) / R;
  const int64_t t0 = pool.share_begin(n_tiles, thread);
  // Plan tiles: row groups (interleaved), or rows (float rows, so a partial
  // last tile of R rows names no row past the plane).
  const bool grouped = l.row_group > 1;
  const int64_t first = grouped ? t0 : t0 * R;
  const int64_t last =
      grouped ? pool.share_begin(n_tiles, thread + 1)
              : std::min(l.n_out, pool.share_begin(n_tiles, thread + 1) * R);
  ThreadPool::WarmPlan plan;
  auto add = [&](const uint8_t* plane, int64_t stride) {
    if (plane == nullptr || stride <= 0) return;
    plan.base[plan.planes] = plane + first * stride;
    plan.stride[plan.planes] = stride;
    ++plan.planes;
  };
  // Bytes per group (row) of each plane (run_tiles' args_for).
  add(pw.values(), l.value_stride);
  if (grouped) {
    const int64_t es = scale_elem_bytes(l);
    add(pw.scales(), l.scale_stride * es);
    add(pw.mins(), l.mins_stride * es);
    add(pw.hbits(), l.hbit_stride);
  }
  int64_t per_tile = 0;
  for (int i = 0; i < plan.planes; ++i) per_tile += plan.stride[i];
  plan.tiles = std::min(last - first,
                        per_tile > 0 ? (bytes + per_tile - 1) / per_tile : 0);
  return plan;
}

TileArgs JitMatmul::tile_args(int64_t r0, int64_t c0, ActivationBuffers& acts, float* y) const {
  const PackedLayout& l = packed_->layout();
  const PackedWeights& pw = *packed_;
  TileArgs a{};
  if (l.row_group > 1) {  // the row group's planes
    const int64_t g = r0 / l.row_group;
    const int64_t es = scale_elem_bytes(l);
    a.values = pw.values() + g * l.value_stride;
    a.hbits = pw.hbits() ? pw.hbits() + g * l.hbit_stride : nullptr;
    a.scales = pw.scales() + g * l.scale_stride * es;
    a.wcorr = pw.mins() ? pw.mins() + g * l.mins_stride * es : nullptr;
  } else {  // float rows
    a.values = pw.values() + r0 * l.value_stride;
  }
  a.act = is_float(l.encoding) ? static_cast<const void*>(acts.f() + c0 * l.n_in_pad)
                               : static_cast<const void*>(acts.q() + c0 * l.n_in);
  a.act_d = acts.d() + c0 * l.act_d_stride;
  a.act_corr = acts.corr() + c0 * l.corr_len;
  a.y = y + c0 * l.n_out + r0;
  a.groups = 1;
  return a;
}

void JitMatmul::run_tiles(int64_t n_rows, float* y, ActivationBuffers& acts,
                          ThreadPool& pool) const {
  const PackedLayout& l = packed_->layout();
  const int64_t n_out = l.n_out;
  auto args_for = [&](int64_t r0, int64_t c0) { return tile_args(r0, c0, acts, y); };

  // Tiles are taken off a shared counter (ThreadPool::parallel_for_dynamic):
  // the two threads of this machine's decode ran the same halves 13-27 %
  // apart in time, the faster then waiting. A chunk is at least row_grain
  // tiles and kMinChunkBytes of weights, so taking one costs little.
  constexpr int64_t kMinChunkBytes = 32 << 10;
  auto min_chunk = [&](int64_t rows_per_tile) {
    const int64_t tile_bytes = std::max<int64_t>(
        1, l.row_group > 1 ? l.value_stride : rows_per_tile * l.value_stride);
    return std::max<int64_t>(params_.row_grain, kMinChunkBytes / tile_bytes);
  };
  if (n_rows == 1) {
    const int64_t R = params_.decode_rows;
    const int64_t n_tiles = (n_out + R - 1) / R;
    auto body = [&](int64_t b, int64_t e, int) {
      // Interleaved tiles run the range's whole row groups in one call;
      // a partial last group (and each float tile) is a call of its own.
      int64_t t = b;
      const int64_t full = std::min(e, n_out / R);  // tiles with R rows
      if (l.row_group > 1 && t < full) {
        TileArgs a = args_for(t * R, 0);
        a.groups = full - t;
        decode_[0](&a);
        t = full;
      }
      for (; t < e; ++t) {
        const int64_t r0 = t * R;
        const TileArgs a = args_for(r0, 0);
        decode_[n_out - r0 < R ? 1 : 0](&a);
      }
    };
    // Each thread streams its own share of the row groups in order, then
    // helps with what is left of the other's; as it finishes it asks for
    // its share of the next matmul (set_decode_successor).
    pool.parallel_for_owned(n_tiles, body, min_chunk(R), [&](int thread) {
      return successor_ != nullptr
                 ? successor_->decode_warm_plan(thread, pool, kDecodeWarmBytes)
                 : ThreadPool::WarmPlan{};
    });
    return;
  }
  if (n_rows <= kFewRows && few_cols_ > 0) {
    // A decode step of several sequences: one pass over the weights, the
    // rows cut into as few column tiles as few_cols allows (13 rows with
    // few_cols 8: 7 + 6), each run over a run of row groups while they are
    // in L1.
    const int64_t tiles = (n_rows + few_cols_ - 1) / few_cols_;
    run_column_tiles(n_rows, y, acts, pool, few_, (n_rows + tiles - 1) / tiles, false);
    return;
  }
  run_column_tiles(n_rows, y, acts, pool, prefill_, params_.cols, pair_groups_);
}

void JitMatmul::run_column_tiles(int64_t n_rows, float* y, ActivationBuffers& acts,
                                 ThreadPool& pool, const TileFn (*table)[16], int64_t C,
                                 bool pairs) const {
  const PackedLayout& l = packed_->layout();
  const int64_t n_out = l.n_out;
  auto args_for = [&](int64_t r0, int64_t c0) { return tile_args(r0, c0, acts, y); };
  const int64_t R = params_.rows;
  const int64_t block = (params_.act_block + C - 1) / C * C;
  const int64_t n_tiles = (n_out + R - 1) / R;
  const int64_t full_tiles = n_out / R;
  // Tiles that pair row groups take them two by two: chunks and runs of
  // an even count, so that only the matrix's last group can run alone
  // (the least chunk, row_grain, then counts pairs).
  const int64_t step = pairs ? 2 : 1;
  constexpr int64_t kRunBytes = 24 << 10;  // weights of one prefill call
  const int64_t run = std::max<int64_t>(
      step, kRunBytes / std::max<int64_t>(1, l.value_stride) / step * step);
  pool.parallel_for_dynamic(
      (n_tiles + step - 1) / step,
      [&](int64_t sb, int64_t se, int) {
        const int64_t b = sb * step, e = std::min(n_tiles, se * step);
        for (int64_t cb = 0; cb < n_rows; cb += block) {
          const int64_t ce = std::min(n_rows, cb + block);
          // Interleaved tiles: runs of up to `run` whole row groups per call
          // (their weights stay in L1/L2 across the block's columns), so the
          // call and set-up cost is paid once per run, not per group.
          for (int64_t t = b; t < e;) {
            const int64_t r0 = t * R;
            const int tail = n_out - r0 < R ? 1 : 0;
            int64_t groups = 1;
            if (!tail && l.row_group > 1)
              groups = std::min(run, std::min(e, full_tiles) - t);
            for (int64_t c0 = cb; c0 < ce; c0 += C) {
              const int64_t nc = std::min(C, ce - c0);
              TileArgs a = args_for(r0, c0);
              a.groups = groups;
              table[tail][nc - 1](&a);
            }
            t += groups;
          }
        }
      },
      // A prefill tile is worth n_rows decode tiles of work: the least
      // chunk is the row grain, so the threads end within about one tile.
      params_.row_grain);
}

}  // namespace strata::kernels::jit
