// A mixture-of-experts block on the device (device_backend_impl.h): the
// router and the routing (strata_moe_route), then every (row, expert) slot
// of each expert matrix in one launch (a decode step) or each used
// expert over its gathered rows (a prompt), as worker/cpu/moe.cc.
#include "worker/cuda/device_backend_impl.h"

namespace strata::worker::device {

// A step of few rows (a mixture's decode) runs each expert matrix's
// (row, expert) slots in one launch (expert_slots) when the slots fit the
// step buffers and read no more weights than the experts hold (n k <=
// max(n_expert, 16)), and every expert of a matrix takes the same kernel
// build (DeviceExperts::one_build: the tuner keys its choice by shape).
bool DeviceBackend::expert_slots_fit(const DeviceExperts& x, int n) const {
  const int slots = n * hp_.moe.n_expert_used;
  return options_.moe_slots && x.one_build && slots <= options_.max_batch &&
         slots <= std::max(hp_.moe.n_expert, 16) && n <= moe_rows();
}

absl::Status DeviceBackend::load_ids_kernel(const DeviceMatrix& m) {
  if (m.matvec_ids.id >= 0) return absl::OkStatus();
  const auto& src =
      ck::step_sources().matvec[ck::step_matvec_type_index(m.type)];
  STRATA_DEVICE_ASSIGN_OR_RETURN(m.matvec_ids,
                                 kernel(src[static_cast<size_t>(m.split)][0],
                                        m.int8 ? ck::matvec_ids_i8_entry(m.type)
                                               : ck::matvec_ids_entry(m.type)));
  return absl::OkStatus();
}

// y [slots][n_out] = each slot's expert matrix (slot_experts_: the experts of
// `experts`, one buffer of equal slices) times row s / x_div of `in`, in one
// launch (ck::matvec_ids_entry: matvec3's sums for that row and column).
absl::Status DeviceBackend::expert_product(
    const std::vector<DeviceMatrix>& experts, PairedRows& in, int x_div,
    float* y, int slots) {
  const DeviceMatrix& m = experts.front();
  STRATA_DEVICE_RETURN_IF_ERROR(load_ids_kernel(m));
  const KernelHandle& k = m.matvec_ids;
  MatvecRows rows;
  STRATA_DEVICE_ASSIGN_OR_RETURN(rows, matvec_rows(m, in));
  const long long expert_bytes =
      experts.size() > 1 ? experts[1].data - experts[0].data : 0;
  const int rows_per_block = m.threads / 32 /
                             ck::kStepRowWarps[static_cast<size_t>(m.split)] *
                             (m.int8 ? ck::matvec_i8_warp_rows(1) : 1);
  const int row_blocks = (m.n_out + rows_per_block - 1) / rows_per_block;
  const auto grid = static_cast<unsigned>(slots * row_blocks);
  const int* ids = slot_experts_.as<int>();
  if (m.int8) {
    return run(k, grid, static_cast<unsigned>(m.threads), m.data, expert_bytes,
               ids, rows.q.q, rows.q.d, rows.q.sums, x_div, y, m.n_out, m.n_in,
               m.row_bytes, row_blocks);
  }
  return run(k, grid, static_cast<unsigned>(m.threads), m.data, expert_bytes,
             ids, rows.x, x_div, y, m.n_out, m.n_in, m.row_bytes, row_blocks);
}

// proj [n][n_embd] = Σ_j w_j · Expert_{e_j}(xn) of the routed slots
// (slot_experts_, slot_weights_: slot s = t k + j), every matrix's slots
// in one launch: gate, up (slot s reads xn's row s / k), their biases by
// expert, the activation over the slots' rows, down straight into
// expert_out_ in slot order, its bias, the weighted sum. Each slot's values
// are the gathered path's bit for bit (the same kernels' sums per row and
// column), so the choice of path changes no sequence's numbers.
absl::Status DeviceBackend::expert_slots(const DeviceExperts& x, int n,
                                         PairedRows& xn_rows, float* proj) {
  const arch::MoeParams& p = hp_.moe;
  const int k = p.n_expert_used;
  const int slots = n * k;
  const int64_t f = p.n_ff_expert, e = hp_.n_embd;
  float* gate = gate_.as<float>();  // [slots][f]
  float* up = up_.as<float>();      // [slots][f]
  float* out = expert_out_.as<float>();
  const int* ids = slot_experts_.as<int>();
  STRATA_DEVICE_RETURN_IF_ERROR(
      expert_product(x.gate, xn_rows, k, gate, slots));
  STRATA_DEVICE_RETURN_IF_ERROR(expert_product(x.up, xn_rows, k, up, slots));
  if (x.gate_bias.get() != nullptr) {
    STRATA_DEVICE_RETURN_IF_ERROR(
        run_over(k_add_bias_ids_, int64_t{slots} * f, gate,
                 static_cast<const float*>(x.gate_bias.as<float>()), ids,
                 static_cast<long long>(slots), static_cast<int>(f)));
    STRATA_DEVICE_RETURN_IF_ERROR(
        run_over(k_add_bias_ids_, int64_t{slots} * f, up,
                 static_cast<const float*>(x.up_bias.as<float>()), ids,
                 static_cast<long long>(slots), static_cast<int>(f)));
  }
  PairedRows act = rows_of(gate, slots, f);
  STRATA_DEVICE_RETURN_IF_ERROR(
      activate(gate, up, slots, f, x.down.front(), act));
  STRATA_DEVICE_RETURN_IF_ERROR(expert_product(x.down, act, 1, out, slots));
  if (x.down_bias.get() != nullptr) {
    STRATA_DEVICE_RETURN_IF_ERROR(
        run_over(k_add_bias_ids_, int64_t{slots} * e, out,
                 static_cast<const float*>(x.down_bias.as<float>()), ids,
                 static_cast<long long>(slots), static_cast<int>(e)));
  }
  return run_over(k_moe_sum_, int64_t{n} * e, static_cast<const float*>(out),
                  static_cast<const float*>(slot_weights_.as<float>()), proj, n,
                  k, static_cast<int>(e));
}

// proj [n][n_embd] = Σ_j w_j · Expert_{e_j}(xn) of the routed slots
// (slot_experts_, slot_weights_), each used expert once over its gathered
// rows, moe_rows() rows at a time: the experts' ids downloaded and grouped
// on the host (a counting sort, rows ascending within an expert), each
// expert's rows gathered, its FFN, its outputs scattered to their slots,
// the weighted sum.
absl::Status DeviceBackend::gathered_experts(const DeviceExperts& x, int il,
                                             int n, float* proj) {
  const arch::MoeParams& p = hp_.moe;
  const int64_t e = hp_.n_embd;
  const int k = p.n_expert_used;
  const float* xn = xn_.as<float>();
  const bool biased = x.gate_bias.get() != nullptr;
  STRATA_DEVICE_RETURN_IF_ERROR(
      api_->download(route_experts_.data(), slot_experts_.get(),
                     static_cast<size_t>(n) * k * sizeof(int32_t)));
  // The ids index the host's tables below: one out of range (a device
  // fault) is refused, never followed.
  for (int s = 0; s < n * k; ++s) {
    const int32_t id = route_experts_[static_cast<size_t>(s)];
    if (id < 0 || id >= p.n_expert) {
      return absl::InternalError(
          absl::StrCat("block ", il, ": the device routed row ", s / k,
                       " to expert ", id, " of ", p.n_expert));
    }
  }
  for (int r0 = 0; r0 < n; r0 += moe_rows()) {
    const int rows = std::min(moe_rows(), n - r0);
    const int n_slots = rows * k;
    const int32_t* experts = route_experts_.data() + int64_t{r0} * k;
    // Group the slots by expert (counting sort, rows ascending within one).
    std::fill(expert_begin_.begin(), expert_begin_.end(), 0);
    for (int s = 0; s < n_slots; ++s)
      ++expert_begin_[static_cast<size_t>(experts[s]) + 1];
    for (int ex = 0; ex < p.n_expert; ++ex)
      expert_begin_[ex + 1] += expert_begin_[ex];
    std::copy(expert_begin_.begin(), expert_begin_.end() - 1,
              expert_fill_.begin());
    for (int s = 0; s < n_slots; ++s) {
      const int32_t at = expert_fill_[static_cast<size_t>(experts[s])]++;
      grouped_slots_[static_cast<size_t>(at)] = s;
      grouped_rows_[static_cast<size_t>(at)] = r0 + s / k;
    }
    const size_t ints = static_cast<size_t>(n_slots) * sizeof(int32_t);
    STRATA_DEVICE_RETURN_IF_ERROR(
        api_->upload(slot_rows_.get(), grouped_rows_.data(), ints));
    STRATA_DEVICE_RETURN_IF_ERROR(
        api_->upload(slot_ids_.get(), grouped_slots_.data(), ints));
    for (int ex = 0; ex < p.n_expert; ++ex) {
      const int begin = expert_begin_[static_cast<size_t>(ex)];
      const int m = expert_begin_[static_cast<size_t>(ex) + 1] - begin;
      if (m == 0) continue;
      STRATA_DEVICE_RETURN_IF_ERROR(
          run_over(k_gather_, int64_t{m} * e, xn,
                   static_cast<const int*>(slot_rows_.as<int>() + begin),
                   moe_x_.as<float>(), m, static_cast<int>(e)));
      const size_t i = static_cast<size_t>(ex);
      PairedRows expert_rows = rows_of(moe_x_.as<float>(), m, e);
      STRATA_DEVICE_RETURN_IF_ERROR(
          ffn(x.gate[i], x.up[i], x.down[i], p.n_ff_expert, expert_rows, m,
              moe_y_.as<float>(), biased ? &x.gate_bias : nullptr,
              biased ? &x.up_bias : nullptr, biased ? &x.down_bias : nullptr,
              ex, /*step_rows=*/false));
      STRATA_DEVICE_RETURN_IF_ERROR(
          run_over(k_scatter_, int64_t{m} * e,
                   static_cast<const float*>(moe_y_.as<float>()),
                   static_cast<const int*>(slot_ids_.as<int>() + begin),
                   expert_out_.as<float>(), m, static_cast<int>(e)));
    }
    STRATA_DEVICE_RETURN_IF_ERROR(run_over(
        k_moe_sum_, int64_t{rows} * e,
        static_cast<const float*>(expert_out_.as<float>()),
        static_cast<const float*>(slot_weights_.as<float>() + int64_t{r0} * k),
        proj + int64_t{r0} * e, rows, k, static_cast<int>(e)));
  }
  return absl::OkStatus();
}

// proj = Σ_j w_j · Expert_{e_j}(xn) (+ sigmoid(g · xn) · Shared(xn)), as
// worker/cpu/moe.cc: the router and the routing on the device
// (strata_moe_route: reference::ops::moe_route's experts, its weights
// within an ulp), then the slots (expert_slots) or each used expert once
// over its gathered rows (the experts downloaded to group them), the
// slots' weighted sum in slot order. Every path routes on the device, so
// the choice of path changes no sequence's numbers.
absl::Status DeviceBackend::moe(int il, int n) {
  const DeviceExperts& x = layers_[static_cast<size_t>(il - range_.first)].moe;
  const arch::MoeParams& p = hp_.moe;
  const int64_t e = hp_.n_embd;
  const int k = p.n_expert_used;
  const float* xn = xn_.as<float>();
  float* proj = proj_.as<float>();

  PairedRows xn_rows = rows_of(xn, n, e);
  STRATA_DEVICE_RETURN_IF_ERROR(
      matvec(x.router, xn_rows, router_logits_.as<float>()));
  STRATA_DEVICE_RETURN_IF_ERROR(
      add_bias(router_logits_.as<float>(), x.router_bias, n, p.n_expert));
  STRATA_DEVICE_RETURN_IF_ERROR(
      run(k_moe_route_, static_cast<unsigned>(n), ck::kStepSampleThreads,
          static_cast<const float*>(router_logits_.as<float>()), p.n_expert, k,
          moe_gating(p.gating), p.norm_weights ? 1 : 0, p.weights_scale,
          slot_experts_.as<int>(), slot_weights_.as<float>()));

  STRATA_DEVICE_RETURN_IF_ERROR(expert_slots_fit(x, n)
                                    ? expert_slots(x, n, xn_rows, proj)
                                    : gathered_experts(x, il, n, proj));
  if (!x.shared_down.present()) return absl::OkStatus();
  // The shared expert on every row, scaled by sigmoid(g), g the one-row
  // router's logit (xn's rounded rows shared with the router's).
  STRATA_DEVICE_RETURN_IF_ERROR(
      ffn(x.shared_gate, x.shared_up, x.shared_down, p.n_ff_shared, xn_rows, n,
          moe_y_.as<float>(), nullptr, nullptr, nullptr, 0,
          /*step_rows=*/true));
  STRATA_DEVICE_RETURN_IF_ERROR(
      matvec(x.shared_router, xn_rows, shared_gate_.as<float>()));
  return run_over(k_add_shared_, int64_t{n} * e, proj,
                  static_cast<const float*>(moe_y_.as<float>()),
                  static_cast<const float*>(shared_gate_.as<float>()), n,
                  static_cast<int>(e));
}

}  // namespace strata::worker::device
