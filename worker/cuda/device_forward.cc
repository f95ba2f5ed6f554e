// The step of the device backend (device_backend_impl.h): the recipe of
// worker/cpu/forward.cc as launches of worker/cuda/kernels (a mixture's
// feed-forward: device_moe.cc).
#include "worker/cuda/device_backend_impl.h"
#include "worker/embedding_pool.h"
#include "worker/head_picks.h"

namespace strata::worker::device {

// --- the step -----------------------------------------------------------------

bool DeviceBackend::matvec_on_tensor_cores(const DeviceMatrix& m, size_t i) const {
  return m.int8 && options_.matvec_mma &&
         ck::kStepMatvecColumns[i] >= ck::kMatvecMmaMinColumns;
}

absl::StatusOr<KernelHandle> DeviceBackend::kernel_of(const DeviceMatrix& m, size_t w, size_t i) {
  KernelHandle& h = m.matvec[w][i];
  if (h.id < 0) {
    const auto& src = ck::step_sources().matvec[ck::step_matvec_type_index(m.type)];
    const std::string entry = matvec_on_tensor_cores(m, i) ? ck::matvec3_mma_entry(m.type)
                              : m.int8                     ? ck::matvec3_i8_entry(m.type)
                                                           : ck::matvec3_entry(m.type);
    STRATA_DEVICE_ASSIGN_OR_RETURN(h, kernel(src[w][i], entry));
  }
  return h;
}

absl::StatusOr<const float*> DeviceBackend::paired(const DeviceMatrix& m, PairedRows& in) {
  const auto kind = static_cast<size_t>(m.round);
  if (m.round == ck::kRoundNone || in.n == 0) return in.x;
  if (in.width != m.n_in) {
    return absl::InternalError(absl::StrCat("rows of ", in.width, " for a matrix of ", m.n_in));
  }
  float* out = paired_[kind].as<float>();
  if (in.stamp[kind] != 0 && in.stamp[kind] == paired_stamp_[kind]) return out;
  const int64_t total = int64_t{in.n} * in.width;
  if (total > paired_floats_[kind]) {
    return absl::InternalError(absl::StrCat(in.n, " rows of ", in.width, " past the ",
                                            paired_floats_[kind], " floats of kind ", m.round));
  }
  STRATA_DEVICE_RETURN_IF_ERROR(
      run_over(k_round_rows_, total, in.x, out, static_cast<long long>(total), m.round));
  in.stamp[kind] = paired_stamp_[kind] = ++stamps_;
  return out;
}

absl::StatusOr<Int8Rows> DeviceBackend::int8_rows(int kind, int n, int64_t width) {
  if (kind != ck::kRoundQ8_0 && kind != ck::kRoundQ8_K && kind != ck::kRoundQ8_1) {
    return absl::InternalError(absl::StrCat("no int8 rows of kind ", kind));
  }
  const auto k = static_cast<size_t>(kind);
  if (width > int8_width_[k] || int64_t{n} > options_.max_batch) {
    return absl::InternalError(absl::StrCat(n, " rows of ", width, " past the int8 rows of ",
                                            int8_width_[k], " of kind ", kind));
  }
  return int8_rows_at(int8_[k].as<unsigned char>(), options_.max_batch, int8_width_[k]);
}

int DeviceBackend::int8_kind(const DeviceMatrix& m) const {
  if (!m.present() || !m.takes_int8_rows()) return ck::kRoundNone;
  return m.round;
}

absl::StatusOr<Int8Rows> DeviceBackend::quantized(const DeviceMatrix& m, PairedRows& in) {
  if (in.width != m.n_in) {
    return absl::InternalError(absl::StrCat("rows of ", in.width, " for a matrix of ", m.n_in));
  }
  Int8Rows r;
  STRATA_DEVICE_ASSIGN_OR_RETURN(r, int8_rows(m.round, in.n, in.width));
  const auto kind = static_cast<size_t>(m.round);
  if (in.stamp_i8[kind] != 0 && in.stamp_i8[kind] == int8_stamp_[kind]) return r;
  const int64_t total = int64_t{in.n} * in.width;
  STRATA_DEVICE_RETURN_IF_ERROR(run_over(k_quantize_rows_, total, in.x,
                                         const_cast<signed char*>(r.q), const_cast<float*>(r.d),
                                         const_cast<float*>(r.sums),
                                         static_cast<long long>(total), m.round));
  mark_quantized(in, m.round);
  return r;
}

absl::StatusOr<MatvecRows> DeviceBackend::matvec_rows(const DeviceMatrix& m, PairedRows& in) {
  MatvecRows r;
  if (m.int8) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(r.q, quantized(m, in));
  } else {
    STRATA_DEVICE_ASSIGN_OR_RETURN(r.x, paired(m, in));
  }
  return r;
}

absl::Status DeviceBackend::matvec3(const DeviceMatrix& m, PairedRows& x, float* y0, float* y1,
                                    float* y2, int n0, int n1) {
  MatvecRows rows;
  STRATA_DEVICE_ASSIGN_OR_RETURN(rows, matvec_rows(m, x));
  return launch_matvec3(m, rows, x.n, y0, y1, y2, n0, n1);
}

absl::Status DeviceBackend::launch_matvec3(const DeviceMatrix& m, const MatvecRows& x, int n,
                                           float* y0, float* y1, float* y2, int n0, int n1) {
  // The kernel reads a block format's activations as float4, int8 rows as
  // uint4 (matvec.cuh): a misaligned address faults on a GPU (and the
  // emulation aborts).
  const void* in = m.int8 ? static_cast<const void*>(x.q.q) : static_cast<const void*>(x.x);
  if (m.type != GgmlType::kF32 && m.type != GgmlType::kF16 &&
      reinterpret_cast<uintptr_t>(in) % 16 != 0) {
    return absl::InternalError("matvec: activations not 16-byte aligned");
  }
  const int n2 = m.n_out - n0 - n1;
  int done = 0;
  while (done < n) {
    // The widest build that fits what is left.
    size_t i = ck::kStepMatvecColumns.size() - 1;
    while (ck::kStepMatvecColumns[i] > n - done) --i;
    absl::StatusOr<KernelHandle> k = kernel_of(m, static_cast<size_t>(m.split), i);
    if (!k.ok()) return k.status();
    // The int8 form's warps take matvec_i8_warp_rows rows each, its
    // tensor-core form's 16 (all of a row's parts).
    const int rows_per_block =
        matvec_on_tensor_cores(m, i)
            ? m.threads / 32 * 16
            : m.threads / 32 / ck::kStepRowWarps[static_cast<size_t>(m.split)] *
                  (m.int8 ? ck::matvec_i8_warp_rows(ck::kStepMatvecColumns[i]) : 1);
    const unsigned grid = static_cast<unsigned>((m.n_out + rows_per_block - 1) / rows_per_block);
    const MatvecRows at = x.from(done, m.n_in);
    float* a = y0 + int64_t{done} * n0;
    float* b = y1 + int64_t{done} * n1;
    float* c = y2 + int64_t{done} * n2;
    if (m.int8) {
      STRATA_DEVICE_RETURN_IF_ERROR(run(*k, grid, static_cast<unsigned>(m.threads), m.data,
                                        at.q.q, at.q.d, at.q.sums, a, b, c, n0, n1, m.n_out,
                                        m.n_in, m.row_bytes));
    } else {
      STRATA_DEVICE_RETURN_IF_ERROR(run(*k, grid, static_cast<unsigned>(m.threads), m.data,
                                        at.x, a, b, c, n0, n1, m.n_out, m.n_in, m.row_bytes));
    }
    done += ck::kStepMatvecColumns[i];
  }
  return absl::OkStatus();
}

absl::Status DeviceBackend::step_matvec3(const DeviceMatrix& m, PairedRows& rows, float* y0,
                                         float* y1, float* y2, int n0, int n1) {
  const int n2 = m.n_out - n0 - n1;
  for (const RowRun& r : runs_) {
    float* a = y0 + int64_t{r.row0} * n0;
    float* b = y1 + int64_t{r.row0} * n1;
    float* c = y2 + int64_t{r.row0} * n2;
    if (!r.tensor || m.mma.id < 0) {
      MatvecRows x;  // made once for the step's runs (the memo of paired/quantized)
      STRATA_DEVICE_ASSIGN_OR_RETURN(x, matvec_rows(m, rows));
      STRATA_DEVICE_RETURN_IF_ERROR(
          launch_matvec3(m, x.from(r.row0, m.n_in), r.rows, a, b, c, n0, n1));
      continue;
    }
    if (m.mma_i8.id >= 0 || m.mma_wg.id >= 0) {  // tensor cores on the rows' Q8 values
      MatvecRows q;
      STRATA_DEVICE_ASSIGN_OR_RETURN(q.q, quantized(m, rows));
      const Int8Rows at = q.from(r.row0, m.n_in).q;
      STRATA_DEVICE_RETURN_IF_ERROR(launch_mma(m, &at, nullptr, r.rows, a, b, c, n0, n1));
      continue;
    }
    const float* x = nullptr;
    STRATA_DEVICE_ASSIGN_OR_RETURN(x, paired(m, rows));
    STRATA_DEVICE_RETURN_IF_ERROR(
        launch_mma(m, nullptr, x + int64_t{r.row0} * m.n_in, r.rows, a, b, c, n0, n1));
  }
  return absl::OkStatus();
}

absl::Status DeviceBackend::launch_mma(const DeviceMatrix& m, const Int8Rows* q, const float* x,
                                       int rows, float* y0, float* y1, float* y2, int n0,
                                       int n1) {
  if (m.mma_wg.id >= 0) {  // sm_90's warpgroup instructions, f16 of the rows' Q8 values
    const int64_t wg_rows = (m.n_out + ck::kWgmmaRowsPerBlock - 1) / ck::kWgmmaRowsPerBlock;
    const int64_t wg_toks = (rows + ck::kWgmmaTokensPerBlock - 1) / ck::kWgmmaTokensPerBlock;
    return run(m.mma_wg, static_cast<unsigned>(wg_rows * wg_toks), ck::kStepWgmmaThreads, m.data,
               q->q, q->d, y0, y1, y2, n0, n1, m.n_out, m.n_in, m.row_bytes, rows);
  }
  // mma.sync's tiles, int8 or f16.
  const int64_t row_tiles = (m.n_out + ck::kMmaRowsPerBlock - 1) / ck::kMmaRowsPerBlock;
  const int64_t tok_tiles = (rows + ck::kMmaTokensPerBlock - 1) / ck::kMmaTokensPerBlock;
  const auto grid = static_cast<unsigned>(row_tiles * tok_tiles);
  if (m.mma_i8.id >= 0) {
    return run(m.mma_i8, grid, ck::kStepMmaThreads, m.data, q->q, q->d, q->sums, y0, y1, y2, n0,
               n1, m.n_out, m.n_in, m.row_bytes, rows);
  }
  return run(m.mma, grid, ck::kStepMmaThreads, m.data, x, y0, y1, y2, n0, n1, m.n_out, m.n_in,
             m.row_bytes, rows);
}

absl::Status DeviceBackend::rms_norm(const float* x, const DeviceBuffer& weight, int rows,
                                     int dim, float* y) {
  return run(k_rms_, static_cast<unsigned>(rows), ck::kStepRmsNormThreads, x,
             static_cast<const float*>(weight.as<float>()), y, dim, hp_.rms_eps);
}

absl::Status DeviceBackend::add_rms_norm(float* x, const float* delta, const DeviceBuffer& weight,
                                         int rows, int dim, float* y) {
  return run(k_add_rms_, static_cast<unsigned>(rows), ck::kStepRmsNormThreads, x, delta,
             static_cast<const float*>(weight.as<float>()), y, dim, hp_.rms_eps);
}

absl::Status DeviceBackend::norm_rows(float* x, const float* delta, const DeviceBuffer& weight,
                                      int n, int dim, float* y, PairedRows& rows, int kind) {
  if (kind == ck::kRoundNone) {
    return delta != nullptr ? add_rms_norm(x, delta, weight, n, dim, y)
                            : rms_norm(x, weight, n, dim, y);
  }
  Int8Rows r;
  STRATA_DEVICE_ASSIGN_OR_RETURN(r, int8_rows(kind, n, dim));
  auto* q = const_cast<signed char*>(r.q);
  auto* d = const_cast<float*>(r.d);
  auto* sums = const_cast<float*>(r.sums);
  const auto* w = static_cast<const float*>(weight.as<float>());
  if (delta != nullptr) {
    STRATA_DEVICE_RETURN_IF_ERROR(run(k_add_rms_q_, static_cast<unsigned>(n),
                                      ck::kStepRmsNormThreads, x, delta, w, y, dim, hp_.rms_eps,
                                      q, d, sums, kind));
  } else {
    STRATA_DEVICE_RETURN_IF_ERROR(run(k_rms_q_, static_cast<unsigned>(n), ck::kStepRmsNormThreads,
                                      static_cast<const float*>(x), w, y, dim, hp_.rms_eps, q, d,
                                      sums, kind));
  }
  mark_quantized(rows, kind);
  return absl::OkStatus();
}

absl::Status DeviceBackend::add(const float* a, const float* b, float* y, int64_t n) {
  return run_over(k_add_, n, a, b, y, static_cast<long long>(n));
}

absl::Status DeviceBackend::add_bias(float* x, const DeviceBuffer& bias, int rows, int64_t width,
                                     int64_t offset) {
  if (bias.get() == nullptr) return absl::OkStatus();
  return run_over(k_add_bias_, int64_t{rows} * width, x,
                  static_cast<const float*>(bias.as<float>() + offset),
                  static_cast<long long>(rows), static_cast<int>(width));
}

// proj = W_o · Attention(q, k, v) of xn (+ b_o), q = W_q xn (+ b_q), etc.,
// with QK-norm and RoPE on q and k; as worker/cpu/forward.cc's
// attention_step.
absl::Status DeviceBackend::attention(int il, int n, PairedRows& xn) {
  const DeviceLayer& w = layers_[static_cast<size_t>(il - range_.first)];
  const arch::BlockRecipe& r = hp_.recipe;
  const int layer = il - range_.first;
  const int dk = hp_.head_dim_k, dv = hp_.head_dim_v;
  const int64_t qw = q_width(), kw = k_width(), vw = v_width();
  float* q = q_.as<float>();
  float* k = k_.as<float>();
  float* v = v_.as<float>();
  if (w.wqkv.present()) {  // [q | k | v] rows: one launch
    STRATA_DEVICE_RETURN_IF_ERROR(
        step_matvec3(w.wqkv, xn, q, k, v, static_cast<int>(qw), static_cast<int>(kw)));
  } else {
    STRATA_DEVICE_RETURN_IF_ERROR(step_matvec(w.wq, xn, q));
    STRATA_DEVICE_RETURN_IF_ERROR(step_matvec(w.wk, xn, k));
    STRATA_DEVICE_RETURN_IF_ERROR(step_matvec(w.wv, xn, v));
  }
  STRATA_DEVICE_RETURN_IF_ERROR(add_bias(q, w.bq, n, qw));
  STRATA_DEVICE_RETURN_IF_ERROR(add_bias(k, w.bk, n, kw));
  STRATA_DEVICE_RETURN_IF_ERROR(add_bias(v, w.bv, n, vw));
  if (r.qk_norm) {
    STRATA_DEVICE_RETURN_IF_ERROR(rms_norm(q, w.q_norm, n * hp_.n_head, dk, q));
    STRATA_DEVICE_RETURN_IF_ERROR(rms_norm(k, w.k_norm, n * hp_.n_head_kv, dk, k));
  }
  if (r.qk_norm_full) {  // olmoe: over each whole row
    STRATA_DEVICE_RETURN_IF_ERROR(rms_norm(q, w.q_norm, n, static_cast<int>(qw), q));
    STRATA_DEVICE_RETURN_IF_ERROR(rms_norm(k, w.k_norm, n, static_cast<int>(kw), k));
  }

  // RoPE: the angles of this layer's (base, scale) for the step's
  // positions (upload_rope_tables).
  const RopeTable& table = rope_tables_[static_cast<size_t>(rope_of_layer_[static_cast<size_t>(layer)])];
  const int neox = r.rope == arch::RopeStyle::kNeox ? 1 : 0;
  const float* cs = table.cs.as<float>();
  const int half = hp_.n_rot / 2;
  // The decode rows' K and V in one launch (their sequences' caches through
  // the step's table, forward()), with RoPE when every row is one (a decode
  // step); a prompt chunk's in one launch each.
  if (n_decode_ == n) {
    STRATA_DEVICE_RETURN_IF_ERROR(run_over(
        k_rope_store_kv_batch_, int64_t{n} * (int64_t{hp_.n_head} * half + kw + vw), q, k,
        static_cast<const float*>(v), cs, decode_.base, decode_.n_ctx, decode_.pos, decode_.row,
        layer, n, hp_.n_head, hp_.n_head_kv, dk, hp_.n_rot, neox, static_cast<int>(vw)));
  } else {
    STRATA_DEVICE_RETURN_IF_ERROR(run_over(k_rope_qk_,
                                           int64_t{n} * (hp_.n_head + hp_.n_head_kv) * half, q,
                                           k, cs, n, hp_.n_head, hp_.n_head_kv, dk, hp_.n_rot,
                                           neox));
  }
  if (n_decode_ > 0 && n_decode_ < n) {
    STRATA_DEVICE_RETURN_IF_ERROR(run_over(
        k_store_kv_batch_, int64_t{n_decode_} * (kw + vw), static_cast<const float*>(k),
        static_cast<const float*>(v), decode_.base, decode_.n_ctx, decode_.pos, decode_.row,
        layer, n_decode_, static_cast<int>(kw), static_cast<int>(vw)));
  }
  for (const StepSlice& s : slices_) {
    if (s.rows == 1) continue;  // stored above
    STRATA_DEVICE_RETURN_IF_ERROR(run_over(
        k_store_kv_, int64_t{s.rows} * std::max(kw, vw),
        static_cast<const float*>(k + int64_t{s.row0} * kw),
        static_cast<const float*>(v + int64_t{s.row0} * vw), k_cache(*s.seq, layer),
        v_cache(*s.seq, layer), s.pos0, s.rows, static_cast<int>(kw), static_cast<int>(vw)));
  }
  float scale = hp_.attention_scale;
  if (r.scale_query) {  // gemma, phi3: q scaled before attention
    STRATA_DEVICE_RETURN_IF_ERROR(run_over(k_scale_, n * qw, q, hp_.attention_scale,
                                    static_cast<long long>(n * qw)));
    scale = 1.0f;
  }
  // Each row attends to its sequence's positions up to its own (within
  // the window on sliding-window layers).
  const int window = hp_.sliding[static_cast<size_t>(il)] ? hp_.sliding_window : 0;
  const int64_t attn_width = int64_t{hp_.n_head} * dv;
  const float* sinks = w.sinks.get() != nullptr ? w.sinks.as<float>() : nullptr;
  PairedRows attn = rows_of(attn_.as<float>(), n, attn_width);
  // A step of decode rows only whose o takes int8 rows: the attention
  // launch makes them (strata_attention_batch_quantize).
  const int o_kind = options_.attention_quantizes && n_decode_ == n && w.wo.int8
                         ? int8_kind(w.wo)
                         : ck::kRoundNone;
  Int8Rows o_rows;
  if (o_kind != ck::kRoundNone) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(o_rows, int8_rows(o_kind, n, attn_width));
  }
  // The decode rows of every sequence: attention_rows_ of them a launch
  // (split_rows_ when their keys are split over blocks).
  const int decode_rows = split_step_ ? std::min(attention_rows_, split_rows_) : attention_rows_;
  for (int d0 = 0; d0 < n_decode_; d0 += decode_rows) {
    const int rows = std::min(decode_rows, n_decode_ - d0);
    if (split_step_) {
      const unsigned grid = static_cast<unsigned>(hp_.n_head * rows * splits_);
      STRATA_DEVICE_RETURN_IF_ERROR(run(
          k_attention_split_scores_, grid, ck::kStepAttentionThreads, static_cast<const float*>(q),
          decode_.base + d0, decode_.n_ctx + d0, decode_.n_kv + d0, decode_.row + d0,
          attn_.as<float>(), scores_.as<float>(), max_ctx_, attn_part_.as<float>(), layer, window,
          hp_.n_head, hp_.n_head_kv, dk, dv, scale, hp_.attn_softcap, sinks, splits_,
          options_.attention_split_keys));
      STRATA_DEVICE_RETURN_IF_ERROR(run(
          k_attention_split_weigh_, grid, ck::kStepAttentionThreads, decode_.base + d0,
          decode_.n_ctx + d0, decode_.n_kv + d0, decode_.row + d0, attn_.as<float>(),
          scores_.as<float>(), max_ctx_, static_cast<const float*>(attn_part_.as<float>()),
          attn_part_o_.as<float>(), attn_head_done_.as<unsigned int>(), layer, window, hp_.n_head,
          hp_.n_head_kv, dk, dv, sinks, splits_, options_.attention_split_keys, o_kind,
          const_cast<signed char*>(o_rows.q), const_cast<float*>(o_rows.d),
          const_cast<float*>(o_rows.sums), attn_done_.as<unsigned int>()));
      continue;
    }
    if (o_kind != ck::kRoundNone) {
      STRATA_DEVICE_RETURN_IF_ERROR(run(
          k_attention_batch_q_, static_cast<unsigned>(hp_.n_head * rows),
          ck::kStepAttentionThreads, static_cast<const float*>(q), decode_.base + d0,
          decode_.n_ctx + d0, decode_.n_kv + d0, decode_.row + d0, attn_.as<float>(),
          scores_.as<float>(), max_ctx_, layer, window, hp_.n_head, hp_.n_head_kv, dk, dv, scale,
          hp_.attn_softcap, sinks, o_kind, const_cast<signed char*>(o_rows.q),
          const_cast<float*>(o_rows.d), const_cast<float*>(o_rows.sums),
          attn_done_.as<unsigned int>()));
      continue;
    }
    STRATA_DEVICE_RETURN_IF_ERROR(run(
        k_attention_batch_, static_cast<unsigned>(hp_.n_head * rows), ck::kStepAttentionThreads,
        static_cast<const float*>(q), decode_.base + d0, decode_.n_ctx + d0, decode_.n_kv + d0,
        decode_.row + d0, attn_.as<float>(), scores_.as<float>(), max_ctx_, layer, window,
        hp_.n_head, hp_.n_head_kv, dk, dv, scale, hp_.attn_softcap, sinks));
  }
  if (o_kind != ck::kRoundNone) mark_quantized(attn, o_kind);
  for (const StepSlice& s : slices_) {
    if (s.rows == 1) continue;  // attended above
    const auto* kc = static_cast<const unsigned short*>(k_cache(*s.seq, layer));
    const auto* vc = static_cast<const unsigned short*>(v_cache(*s.seq, layer));
    // A tensor-core slice (its matrices ran on mma.cuh too): flash
    // attention, every row in one launch.
    if (k_flash_.id >= 0 && s.rows >= options_.mma_min_rows) {
      const int tiles = (s.rows + ck::kFlashAttentionRowsPerBlock - 1) /
                        ck::kFlashAttentionRowsPerBlock;
      STRATA_DEVICE_RETURN_IF_ERROR(run(
          k_flash_, static_cast<unsigned>(hp_.n_head * tiles), ck::kFlashAttentionThreads,
          static_cast<const float*>(q + s.row0 * qw), kc, vc,
          attn_.as<float>() + s.row0 * attn_width, s.pos0, s.rows, window, hp_.n_head,
          hp_.n_head_kv, scale, hp_.attn_softcap, sinks));
      continue;
    }
    // A prompt chunk: attention_rows_ rows a launch, the same numbers.
    for (int t0 = 0; t0 < s.rows; t0 += attention_rows_) {
      const int rows = std::min(attention_rows_, s.rows - t0);
      const int row = s.row0 + t0;
      STRATA_DEVICE_RETURN_IF_ERROR(run(
          k_attention_rows_, static_cast<unsigned>(hp_.n_head * rows), ck::kStepAttentionThreads,
          static_cast<const float*>(q + row * qw), kc, vc, attn_.as<float>() + row * attn_width,
          scores_.as<float>(), max_ctx_, s.pos0 + t0, window, hp_.n_head, hp_.n_head_kv, dk, dv,
          scale, hp_.attn_softcap, sinks));
    }
  }
  STRATA_DEVICE_RETURN_IF_ERROR(step_matvec(w.wo, attn, proj_.as<float>()));
  return add_bias(proj_.as<float>(), w.bo, n, hp_.n_embd);
}

absl::Status DeviceBackend::ffn(const DeviceMatrix& gate_m, const DeviceMatrix& up_m,
                                const DeviceMatrix& down_m, int64_t f, PairedRows& in, int n,
                                float* y, const DeviceBuffer* gate_bias,
                                const DeviceBuffer* up_bias, const DeviceBuffer* down_bias,
                                int bias_row, bool step_rows) {
  float* gate = gate_.as<float>();  // [n][f]
  float* up = up_.as<float>();      // [n][f]
  const auto product = [&](const DeviceMatrix& m, PairedRows& rows, float* y0, float* y1,
                           float* y2, int n0, int n1) {
    return step_rows ? step_matvec3(m, rows, y0, y1, y2, n0, n1)
                     : matvec3(m, rows, y0, y1, y2, n0, n1);
  };
  if (gate_m.parts == 2) {  // [gate | up] rows: one launch
    STRATA_DEVICE_RETURN_IF_ERROR(
        product(gate_m, in, gate, up, up, static_cast<int>(f), static_cast<int>(f)));
  } else {
    STRATA_DEVICE_RETURN_IF_ERROR(product(gate_m, in, gate, gate, gate, gate_m.n_out, 0));
    STRATA_DEVICE_RETURN_IF_ERROR(product(up_m, in, up, up, up, up_m.n_out, 0));
  }
  if (gate_bias != nullptr) STRATA_DEVICE_RETURN_IF_ERROR(add_bias(gate, *gate_bias, n, f, bias_row * f));
  if (up_bias != nullptr) STRATA_DEVICE_RETURN_IF_ERROR(add_bias(up, *up_bias, n, f, bias_row * f));
  PairedRows act = rows_of(gate, n, f);
  STRATA_DEVICE_RETURN_IF_ERROR(activate(gate, up, n, f, down_m, act));
  STRATA_DEVICE_RETURN_IF_ERROR(product(down_m, act, y, y, y, down_m.n_out, 0));
  if (down_bias != nullptr) {
    STRATA_DEVICE_RETURN_IF_ERROR(add_bias(y, *down_bias, n, hp_.n_embd, int64_t{bias_row} * hp_.n_embd));
  }
  return absl::OkStatus();
}

// gate [n][f] = Act(gate, up), the recipe's activation, in place; with
// the int8 rows of `down_m`'s kind when it takes them (act: gate's rows,
// marked quantized then).
absl::Status DeviceBackend::activate(float* gate, const float* up, int n, int64_t f,
                                     const DeviceMatrix& down_m, PairedRows& act) {
  const int64_t nf = int64_t{n} * f;
  switch (hp_.recipe.activation) {
    case arch::FfnActivation::kSilu:
      if (const int kind = int8_kind(down_m); kind != ck::kRoundNone) {
        // The down matrix's int8 rows made with the values, one launch.
        Int8Rows r;
        STRATA_DEVICE_ASSIGN_OR_RETURN(r, int8_rows(kind, n, f));
        STRATA_DEVICE_RETURN_IF_ERROR(run_over(
            k_swiglu_q_, nf, static_cast<const float*>(gate), up, gate,
            const_cast<signed char*>(r.q), const_cast<float*>(r.d), const_cast<float*>(r.sums),
            static_cast<long long>(nf), kind));
        mark_quantized(act, kind);
        break;
      }
      STRATA_DEVICE_RETURN_IF_ERROR(run_over(k_swiglu_, nf, static_cast<const float*>(gate),
                                      up, gate,
                                      static_cast<long long>(nf)));
      break;
    case arch::FfnActivation::kGeluTanh:
      STRATA_DEVICE_RETURN_IF_ERROR(run_over(k_geglu_, nf, static_cast<const float*>(gate),
                                      up, gate,
                                      static_cast<long long>(nf)));
      break;
    case arch::FfnActivation::kSwigluOai:
      STRATA_DEVICE_RETURN_IF_ERROR(run_over(k_swiglu_oai_, nf, static_cast<const float*>(gate),
                                      up, gate,
                                      static_cast<long long>(nf), reference::ops::kGptOssAlpha,
                                      reference::ops::kGptOssLimit));
      break;
  }
  return absl::OkStatus();
}

// One block (worker/cpu/forward.cc's llama_block and gemma_block):
//   x = x + Post(Attention(RMSNorm(x)));  x = x + Post(FFN(RMSNorm(x)))
// with Post the gemma families' RMSNorm of a sublayer's output (none for
// the others) and FFN dense or the mixture of experts.
absl::Status DeviceBackend::block(int il, int n) {
  const DeviceLayer& w = layers_[static_cast<size_t>(il - range_.first)];
  const int e = hp_.n_embd;
  float* x = x_.as<float>();
  float* xn = xn_.as<float>();
  float* proj = proj_.as<float>();
  // The previous block's last residual add, when it left it for this norm;
  // the normed rows quantized in the same launch for q (|k|v) when its
  // products take int8 rows.
  PairedRows attn_in = rows_of(xn, n, e);
  STRATA_DEVICE_RETURN_IF_ERROR(norm_rows(x, residual_pending_ ? proj : nullptr, w.attn_norm, n,
                                          e, xn, attn_in,
                                          int8_kind(w.wqkv.present() ? w.wqkv : w.wq)));
  residual_pending_ = false;
  STRATA_DEVICE_RETURN_IF_ERROR(attention(il, n, attn_in));
  if (w.post_attn_norm.get() != nullptr) {
    STRATA_DEVICE_RETURN_IF_ERROR(rms_norm(proj, w.post_attn_norm, n, e, proj));
  }
  PairedRows ffn_in = rows_of(xn, n, e);
  if (w.moe.present()) {  // the router's and the experts' rows: made by moe()
    STRATA_DEVICE_RETURN_IF_ERROR(add_rms_norm(x, proj, w.ffn_norm, n, e, xn));
    STRATA_DEVICE_RETURN_IF_ERROR(moe(il, n));
  } else {
    STRATA_DEVICE_RETURN_IF_ERROR(
        norm_rows(x, proj, w.ffn_norm, n, e, xn, ffn_in, int8_kind(w.gate)));
    STRATA_DEVICE_RETURN_IF_ERROR(ffn(w.gate, w.up, w.down, hp_.n_ff, ffn_in, n, proj, nullptr,
                                      nullptr, nullptr, 0, /*step_rows=*/true));
  }
  if (w.post_ffn_norm.get() != nullptr) {
    STRATA_DEVICE_RETURN_IF_ERROR(rms_norm(proj, w.post_ffn_norm, n, e, proj));
  }
  // x += proj: with the next block's first norm when one follows in this
  // step (forward() says), else now.
  if (il + 1 < range_.last && fuse_residual_) {
    residual_pending_ = true;
    return absl::OkStatus();
  }
  return add(x, proj, x, int64_t{n} * e);
}

// logits of head_rows_ into logits_ (sized by forward()): RMSNorm with
// output_norm (into xn_, rows in order), the head, the final soft cap
// (gemma2). Launches only.
absl::Status DeviceBackend::head() {
  const int e = hp_.n_embd;
  const int rows = static_cast<int>(head_rows_.size());
  float* x = x_.as<float>();
  float* xn = xn_.as<float>();
  const DeviceMatrix& out = tied_output_ ? token_embd_ : output_;
  PairedRows head_rows = rows_of(xn, rows, e);
  // Runs of consecutive rows in one launch each. A single run (a decode
  // step's rows): the norm also makes the head's int8 rows, when it takes
  // them.
  for (int i = 0; i < rows;) {
    int j = i + 1;
    while (j < rows && head_rows_[j] == head_rows_[j - 1] + 1) ++j;
    const int kind = j - i == rows && out.int8 ? int8_kind(out) : ck::kRoundNone;
    STRATA_DEVICE_RETURN_IF_ERROR(norm_rows(x + int64_t{head_rows_[i]} * e, nullptr, output_norm_,
                                            j - i, e, xn + int64_t{i} * e, head_rows, kind));
    i = j;
  }
  const int64_t n_logits = int64_t{rows} * n_vocab_;
  STRATA_DEVICE_RETURN_IF_ERROR(matvec(out, head_rows, logits_.as<float>()));
  if (hp_.final_softcap > 0.0f) {
    STRATA_DEVICE_RETURN_IF_ERROR(run_over(k_soft_cap_, n_logits, logits_.as<float>(),
                                    hp_.final_softcap, static_cast<long long>(n_logits)));
  }
  if (n_picks_ > 0) {  // the n_picks_ rows before the top-k ones: their picks and checks
    const int64_t first = int64_t{rows - n_tops_ - n_picks_} * n_vocab_;
    STRATA_DEVICE_RETURN_IF_ERROR(run(k_argmax_rows_, static_cast<unsigned>(n_picks_),
                                      ck::kStepSampleThreads,
                                      static_cast<const float*>(logits_.as<float>() + first),
                                      n_vocab_, picks_.as<int>(),
                                      picks_.as<int>() + options_.max_batch));
  }
  if (n_tops_ > 0) {  // the last n_tops_ rows: their candidates and checks
    const int64_t first = int64_t{rows - n_tops_} * n_vocab_;
    const int* table = top_table_.as<int>();
    STRATA_DEVICE_RETURN_IF_ERROR(run(k_top_k_rows_, static_cast<unsigned>(n_tops_),
                                      ck::kStepSampleThreads,
                                      static_cast<const float*>(logits_.as<float>() + first),
                                      n_vocab_, table, top_ids_.as<int>(), top_values_.as<float>(),
                                      top_table_.as<int>() + 2 * options_.max_batch));
  }
  return absl::OkStatus();
}

// The angles of every RoPE setting of the shard's layers for the step's
// positions, made on the host and uploaded (before any launch of the step,
// so that a captured step reads them as data).
absl::Status DeviceBackend::upload_rope_tables(int n) {
  const arch::BlockRecipe& r = hp_.recipe;
  for (RopeTable& table : rope_tables_) {
    kernels::RopeParams rope;
    rope.order = r.rope == arch::RopeStyle::kNeox ? kernels::RopeOrder::kNeox
                                                  : kernels::RopeOrder::kNormal;
    rope.n_rot = hp_.n_rot;
    rope.freq_base = table.base;
    rope.freq_scale = table.scale;
    rope.freq_factors = rope_freqs_.empty() ? nullptr : rope_freqs_.data();
    rope.ext_factor = hp_.yarn_ext_factor;
    rope.attn_factor = hp_.yarn_attn_factor;
    rope.beta_fast = hp_.yarn_beta_fast;
    rope.beta_slow = hp_.yarn_beta_slow;
    rope.n_ctx_orig = hp_.n_ctx_orig;
    reference::ops::rope_angles(positions_.data(), n, rope, cs_host_.data(), host_pool_);
    STRATA_DEVICE_RETURN_IF_ERROR(api_->upload(
        table.cs.get(), cs_host_.data(),
        static_cast<size_t>(n) * (hp_.n_rot / 2) * 2 * sizeof(float)));
  }
  return absl::OkStatus();
}

// Every launch of the step, embedding to head (and, with `hashes`, each
// block's output downloaded and hashed: never inside a capture).
absl::Status DeviceBackend::launch_step(int n, std::vector<uint64_t>* hashes) {
  const int64_t e = hp_.n_embd;
  float* x = x_.as<float>();
  if (is_first()) {
    const int64_t units = int64_t{n} * ((e + 31) / 32);
    const int64_t most = int64_t{8} * std::max(api_->multiprocessors(), 1);
    const auto grid = static_cast<unsigned>(
        std::clamp<int64_t>((units + ck::kStepMatvecBlock - 1) / ck::kStepMatvecBlock, 1,
                            most));
    STRATA_DEVICE_RETURN_IF_ERROR(run(token_embd_.get_rows, grid, ck::kStepMatvecBlock,
                               token_embd_.data, static_cast<const int*>(ids_.as<int>()), x, n,
                               static_cast<int>(e), token_embd_.row_bytes));
    if (hp_.recipe.embedding_scale != 1.0f) {  // gemma
      STRATA_DEVICE_RETURN_IF_ERROR(run_over(k_scale_, n * e, x, hp_.recipe.embedding_scale,
                                      static_cast<long long>(n * e)));
    }
  }
  // Each block's last residual add goes with the next block's first norm,
  // unless every block's output is wanted (the trace's hashes).
  fuse_residual_ = hashes == nullptr;
  residual_pending_ = false;
  for (int il = range_.first; il < range_.last; ++il) {
    STRATA_DEVICE_RETURN_IF_ERROR(block(il, n));
    if (hashes != nullptr) {
      hidden_host_.resize(static_cast<size_t>(n * e));
      STRATA_DEVICE_RETURN_IF_ERROR(
          api_->download(hidden_host_.data(), x, hidden_host_.size() * sizeof(float)));
      append_row_hashes(hidden_host_.data(), n, e, hashes);
    }
  }
  if (!head_rows_.empty()) STRATA_DEVICE_RETURN_IF_ERROR(head());
  return absl::OkStatus();
}

// A decode step (every slice one row, on the last stage every one wanting
// its logits or every one its pick) is replayed from a graph of its
// launches captured at the first step of its row count: its arguments
// depend only on that count (positions, caches and keys to attend are the
// step's uploaded tables; a mixture's experts are routed on the device, and
// its step is replayed only when every block's expert slots run in one
// launch a matrix, which needs no host); the graphs are dropped when a
// buffer they name is made anew (drop_graphs).
bool DeviceBackend::graph_step(const ForwardRequest& req) const {
  if (!options_.graphs || graphs_unsupported_ || req.block_hashes != nullptr) return false;
  for (const StepSlice& s : slices_) {
    if (s.rows != 1) return false;
    if (is_last() && s.logits != slices_.front().logits) return false;
    if (is_last() && !one_head_row(s.logits)) return false;
  }
  const int n = static_cast<int>(slices_.size());
  for (const DeviceLayer& w : layers_) {
    if (w.moe.present() && !expert_slots_fit(w.moe, n)) return false;
  }
  return true;
}

void DeviceBackend::drop_graphs() {
  for (auto& [n, g] : decode_graphs_) api_->release(g);
  decode_graphs_.clear();
}

// The step's decode rows (one-row slices), as strata_attention_batch and
// strata_store_kv_batch read them: [base | n_ctx | pos | n_kv | row] in one
// upload.
absl::Status DeviceBackend::upload_decode_table() {
  n_decode_ = 0;
  split_step_ = false;
  const size_t b = static_cast<size_t>(options_.max_batch);
  uint8_t* table = decode_host_.data();
  auto* base = reinterpret_cast<unsigned long long*>(table);
  auto* ints = reinterpret_cast<int*>(table + b * sizeof(unsigned long long));
  for (const StepSlice& s : slices_) {
    if (s.rows != 1) continue;
    const size_t d = static_cast<size_t>(n_decode_++);
    base[d] = reinterpret_cast<unsigned long long>(s.seq->kv.get());
    ints[d] = s.seq->n_ctx;
    ints[b + d] = s.pos0;
    ints[2 * b + d] = s.pos0 + 1;
    ints[3 * b + d] = s.row0;
    // A row longer than a chunk: the step's decode attention splits (a
    // row's keys within a window may be fewer: the kernels decide each
    // row's chunks, with strata_attention_batch's bits for one).
    if (splits_ > 1 && s.pos0 + 1 > options_.attention_split_keys) split_step_ = true;
  }
  if (n_decode_ == 0) return absl::OkStatus();
  return api_->upload(decode_table_.get(), table, decode_host_.size());
}

absl::Status DeviceBackend::forward(const ForwardRequest& req, ForwardResult* result) {
  ForwardSlice single;
  const absl::StatusOr<CheckedStep> step = check_forward(
      req, StepShape{is_first(), hp_.n_embd, options_.max_batch, n_vocab_},
      [this](int seq) -> absl::StatusOr<std::pair<int, int>> {
        auto it = sequences_.find(seq);
        if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
        return std::make_pair(it->second.length, it->second.n_ctx);
      },
      &single);
  if (!step.ok()) return step.status();
  const int n = static_cast<int>(step->rows);
  slices_.clear();
  runs_.clear();
  int row = 0;
  for (const ForwardSlice& s : step->slices) {
    Sequence& seq = sequences_.find(s.seq)->second;
    slices_.push_back(StepSlice{&seq, row, s.rows, seq.length, s.logits, s.top_k});
    for (int t = 0; t < s.rows; ++t) positions_[static_cast<size_t>(row + t)] = seq.length + t;
    row += s.rows;
    const bool tensor = options_.mma_min_rows > 0 && s.rows >= options_.mma_min_rows;
    if (!runs_.empty() && runs_.back().tensor == tensor) {
      runs_.back().rows += s.rows;
    } else {
      runs_.push_back(RowRun{row - s.rows, s.rows, tensor});
    }
  }
  STRATA_DEVICE_RETURN_IF_ERROR(upload_decode_table());
  STRATA_DEVICE_RETURN_IF_ERROR(upload_rope_tables(n));
  if (is_first()) {
    STRATA_DEVICE_RETURN_IF_ERROR(api_->upload(ids_.get(), req.tokens.data(),
                                        static_cast<size_t>(n) * sizeof(int32_t)));
  } else {
    STRATA_DEVICE_RETURN_IF_ERROR(
        api_->upload(x_.get(), req.hidden.data(), req.hidden.size() * sizeof(float)));
  }
  head_rows_.clear();
  n_picks_ = 0;
  n_tops_ = 0;
  n_top_candidates_ = 0;
  if (is_last()) {
    for (const StepSlice& s : slices_) {
      if (s.logits == Logits::kAll) {
        for (int t = 0; t < s.rows; ++t) head_rows_.push_back(s.row0 + t);
      } else if (s.logits == Logits::kLast) {
        head_rows_.push_back(s.row0 + s.rows - 1);
      }
    }
    for (const StepSlice& s : slices_) {
      if (s.logits != Logits::kArgmax) continue;
      head_rows_.push_back(s.row0 + s.rows - 1);
      ++n_picks_;
    }
    for (const StepSlice& s : slices_) {
      if (s.logits != Logits::kTopK) continue;
      head_rows_.push_back(s.row0 + s.rows - 1);
      top_table_host_[static_cast<size_t>(2 * n_tops_)] = s.top_k;
      top_table_host_[static_cast<size_t>(2 * n_tops_ + 1)] = n_top_candidates_;
      ++n_tops_;
      n_top_candidates_ += s.top_k;
    }
    if (n_tops_ > 0) {  // read by the step's launches (a replayed graph's too)
      STRATA_DEVICE_RETURN_IF_ERROR(api_->upload(top_table_.get(), top_table_host_.data(),
                                                 static_cast<size_t>(2 * n_tops_) * sizeof(int32_t)));
    }
    const size_t need = head_rows_.size() * static_cast<size_t>(n_vocab_) * sizeof(float);
    if (logits_.bytes() < need) {
      drop_graphs();  // they name the old buffer
      STRATA_DEVICE_ASSIGN_OR_RETURN(logits_, space(need));
    }
  }

  if (graph_step(req)) {
    // One graph a row count, kind of head (logits, picks, candidates) and
    // form of decode attention (split or not).
    const int key = 2 * (3 * n + (n_picks_ > 0 ? 1 : n_tops_ > 0 ? 2 : 0)) + (split_step_ ? 1 : 0);
    auto it = decode_graphs_.find(key);
    if (it == decode_graphs_.end()) {
      absl::StatusOr<GraphHandle> g = api_->capture([&] { return launch_step(n, nullptr); });
      if (g.status().code() == absl::StatusCode::kUnimplemented) {
        graphs_unsupported_ = true;  // this api launches one by one
      } else if (!g.ok()) {
        return g.status();
      } else {
        it = decode_graphs_.emplace(key, *g).first;
      }
    }
    if (it != decode_graphs_.end()) {
      STRATA_DEVICE_RETURN_IF_ERROR(api_->replay(it->second));
    } else {
      STRATA_DEVICE_RETURN_IF_ERROR(launch_step(n, nullptr));
    }
  } else {
    STRATA_DEVICE_RETURN_IF_ERROR(launch_step(n, req.block_hashes));
  }
  const int64_t e = hp_.n_embd;
  float* x = x_.as<float>();

  result->n_rows = n;
  result->hidden = {};
  result->logits = {};
  result->argmax = {};
  result->top_ids = {};
  result->top_logits = {};
  result->embeddings = {};
  if (!is_last()) {
    hidden_host_.resize(static_cast<size_t>(n * e));
    STRATA_DEVICE_RETURN_IF_ERROR(
        api_->download(hidden_host_.data(), x, hidden_host_.size() * sizeof(float)));
    // As the cpu backend: a NaN or Inf is not passed on (nothing changed).
    if (const int64_t i = first_not_finite(hidden_host_.data(), n * e); i < n * e) {
      return absl::InternalError(absl::StrCat(
          "blocks [", range_.first, ", ", range_.last, "): hidden row ", i / e, " column ", i % e,
          " is not finite (", hidden_host_[static_cast<size_t>(i)],
          "): the model's weights hold a NaN or Inf, or its activations overflow"));
    }
    for (const StepSlice& s : slices_) s.seq->length += s.rows;
    result->hidden = std::span<const float>(hidden_host_.data(), static_cast<size_t>(n * e));
    return absl::OkStatus();
  }
  if (!head_rows_.empty()) {
    // The logits rows, then the picks, then the candidates; a picked row
    // that holds a NaN or an infinity is downloaded to say where.
    const int n_rows_out = static_cast<int>(head_rows_.size()) - n_picks_ - n_tops_;
    const int64_t n_logits = int64_t{n_rows_out} * n_vocab_;
    logits_host_.resize(static_cast<size_t>(n_logits));
    STRATA_DEVICE_RETURN_IF_ERROR(api_->download(logits_host_.data(), logits_.get(),
                                                 logits_host_.size() * sizeof(float)));
    const auto not_finite = [&](const float* row0, int64_t count, int64_t row_base) {
      if (const int64_t i = first_not_finite(row0, count); i < count) {
        return absl::InternalError(absl::StrCat(
            "blocks [", range_.first, ", ", range_.last, ") and the head: logit row ",
            row_base + i / n_vocab_, " token ", i % n_vocab_, " is not finite (", row0[i],
            "): the weights hold a NaN or Inf, or the activations overflow"));
      }
      return absl::OkStatus();
    };
    // Flags [count] ints at `flags` (device) for the head rows from `row0`
    // on: a flagged row is downloaded and refused, naming its first bad
    // logit.
    const auto refuse_flagged = [&](const int* flags, int count, int row0) -> absl::Status {
      STRATA_DEVICE_RETURN_IF_ERROR(api_->download(flags_host_.data(), flags,
                                                   static_cast<size_t>(count) * sizeof(int32_t)));
      for (int p = 0; p < count; ++p) {
        if (flags_host_[static_cast<size_t>(p)] == 0) continue;
        std::vector<float> picked(static_cast<size_t>(n_vocab_));
        STRATA_DEVICE_RETURN_IF_ERROR(api_->download(
            picked.data(), logits_.as<float>() + int64_t{row0 + p} * n_vocab_,
            picked.size() * sizeof(float)));
        STRATA_DEVICE_RETURN_IF_ERROR(not_finite(picked.data(), n_vocab_, row0 + p));
      }
      return absl::OkStatus();
    };
    STRATA_DEVICE_RETURN_IF_ERROR(not_finite(logits_host_.data(), n_logits, 0));
    if (n_picks_ > 0) {
      STRATA_DEVICE_RETURN_IF_ERROR(refuse_flagged(picks_.as<int>() + options_.max_batch,
                                                   n_picks_, n_rows_out));
      STRATA_DEVICE_RETURN_IF_ERROR(api_->download(picks_host_.data(), picks_.get(),
                                                   static_cast<size_t>(n_picks_) * sizeof(int32_t)));
      result->argmax = std::span<const int32_t>(picks_host_.data(), static_cast<size_t>(n_picks_));
    }
    if (n_tops_ > 0) {
      STRATA_DEVICE_RETURN_IF_ERROR(refuse_flagged(top_table_.as<int>() + 2 * options_.max_batch,
                                                   n_tops_, n_rows_out + n_picks_));
      const size_t c = static_cast<size_t>(n_top_candidates_);
      top_ids_host_.resize(c);
      top_values_host_.resize(c);
      STRATA_DEVICE_RETURN_IF_ERROR(
          api_->download(top_ids_host_.data(), top_ids_.get(), c * sizeof(int32_t)));
      STRATA_DEVICE_RETURN_IF_ERROR(
          api_->download(top_values_host_.data(), top_values_.get(), c * sizeof(float)));
      result->top_ids = top_ids_host_;
      result->top_logits = top_values_host_;
    }
    result->logits = std::span<const float>(logits_host_.data(), logits_host_.size());
  }
  // The embedding slices': their rows of x_ (the blocks' output) to the
  // host, normed and pooled there (worker/embedding_pool.h).
  embeddings_host_.clear();
  for (const StepSlice& s : slices_) {
    if (!is_embedding(s.logits)) continue;
    int first = 0;
    const int count = embedding_rows(s.logits, s.rows, &first);
    hidden_host_.resize(static_cast<size_t>(int64_t{count} * e));
    STRATA_DEVICE_RETURN_IF_ERROR(api_->download(hidden_host_.data(),
                                                 x + int64_t{s.row0 + first} * e,
                                                 hidden_host_.size() * sizeof(float)));
    embeddings_host_.resize(embeddings_host_.size() + static_cast<size_t>(e));
    norm_and_pool_rows(hidden_host_.data(), count, e, output_norm_host_.data(), hp_.rms_eps,
                       s.logits, &embedding_rows_, embeddings_host_.data() + embeddings_host_.size() - e);
  }
  const int64_t n_embedded = static_cast<int64_t>(embeddings_host_.size());
  if (const int64_t i = first_not_finite(embeddings_host_.data(), n_embedded); i < n_embedded) {
    return absl::InternalError(absl::StrCat(
        "blocks [", range_.first, ", ", range_.last, ") and the output norm: embedding ", i / e,
        " column ", i % e, " is not finite (", embeddings_host_[static_cast<size_t>(i)],
        "): the weights hold a NaN or Inf, or the activations overflow"));
  }
  result->embeddings = embeddings_host_;
  for (const StepSlice& s : slices_) s.seq->length += s.rows;
  return absl::OkStatus();
}

}  // namespace strata::worker::device
