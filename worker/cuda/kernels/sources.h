// NVRTC sources of the step kernels (worker/cuda/kernels/*.cuh, embedded at
// build time by cmake/embed_source.cmake) and their entry points. Each
// .cuh documents its kernels' arguments, launch and numerics; the matvec
// and RMSNorm sources have headers of their own (matvec_source.h,
// rms_norm_source.h).
#pragma once

namespace strata::worker::cuda_kernels {

// rope_rotate, swiglu, add, add_bias, store_kv and the rest of elementwise.cuh: grid-stride loops (any launch).
// (quantize.cuh first: the quantizers it shares with rms_norm.cuh.)
inline constexpr const char* kElementwiseSource =
#include "worker/cuda/kernels/grid.cuh.inc"
#include "worker/cuda/kernels/quantize.cuh.inc"
#include "worker/cuda/kernels/elementwise.cuh.inc"
    ;
inline constexpr const char* kRopeRotateEntry = "strata_rope_rotate";
inline constexpr const char* kRopeRotateQkEntry = "strata_rope_rotate_qk";
inline constexpr const char* kSwigluEntry = "strata_swiglu";
inline constexpr const char* kSwigluQuantizeEntry = "strata_swiglu_quantize";
inline constexpr const char* kAddEntry = "strata_add";
inline constexpr const char* kAddBiasEntry = "strata_add_bias";
inline constexpr const char* kAddBiasIdsEntry = "strata_add_bias_ids";
inline constexpr const char* kScaleEntry = "strata_scale";
inline constexpr const char* kSoftCapEntry = "strata_soft_cap";
inline constexpr const char* kGegluEntry = "strata_geglu";
inline constexpr const char* kSwigluOaiEntry = "strata_swiglu_oai";
inline constexpr const char* kGatherRowsEntry = "strata_gather_rows";
inline constexpr const char* kScatterRowsEntry = "strata_scatter_rows";
inline constexpr const char* kMoeSumEntry = "strata_moe_sum";
inline constexpr const char* kAddSharedExpertEntry = "strata_add_shared_expert";
inline constexpr const char* kStoreKvEntry = "strata_store_kv";
inline constexpr const char* kStoreKvBatchEntry = "strata_store_kv_batch";
inline constexpr const char* kRopeStoreKvBatchEntry = "strata_rope_store_kv_batch";
// strata_round_rows's kinds: the activation type a matrix's weights pair
// with (reference::ops::activation_type), or none (F32 weights).
inline constexpr const char* kRoundRowsEntry = "strata_round_rows";
inline constexpr const char* kQuantizeRowsEntry = "strata_quantize_rows";
inline constexpr int kRoundNone = 0;
inline constexpr int kRoundF16 = 1;
inline constexpr int kRoundQ8_0 = 2;
inline constexpr int kRoundQ8_K = 3;
// Q8_1: Q8_0's values (strata_round_rows makes the same), and as int8 rows
// each unit's s = f16(d sum q) in place of its sum (Q4_1 and Q5_1 weights'
// offsets multiply it).
inline constexpr int kRoundQ8_1 = 4;
inline constexpr int kRoundKinds = 5;

// attention_decode: grid (n_head), block (-DTHREADS, 128 by default).
inline constexpr const char* kAttentionSource =
#include "worker/cuda/kernels/grid.cuh.inc"
#include "worker/cuda/kernels/quantize.cuh.inc"
#include "worker/cuda/kernels/attention.cuh.inc"
    ;
inline constexpr const char* kAttentionDecodeEntry = "strata_attention_decode";
inline constexpr const char* kAttentionRowsEntry = "strata_attention_rows";
inline constexpr const char* kAttentionBatchEntry = "strata_attention_batch";
inline constexpr const char* kAttentionBatchQuantizeEntry = "strata_attention_batch_quantize";
inline constexpr const char* kAttentionSplitScoresEntry = "strata_attention_split_scores";
inline constexpr const char* kAttentionSplitWeighEntry = "strata_attention_split_weigh";
inline constexpr int kAttentionThreads = 128;

// The picks: argmax: grid (1), block (-DTHREADS, 256 by default);
// argmax_rows and top_k_rows: grid (rows), the same block; a mixture's
// routing (moe_route.cuh): grid (tokens), the same block.
inline constexpr const char* kSampleSource =
#include "worker/cuda/kernels/grid.cuh.inc"
#include "worker/cuda/kernels/sample.cuh.inc"
#include "worker/cuda/kernels/moe_route.cuh.inc"
    ;
inline constexpr const char* kArgmaxEntry = "strata_argmax";
inline constexpr const char* kArgmaxRowsEntry = "strata_argmax_rows";
inline constexpr const char* kTopKRowsEntry = "strata_top_k_rows";
inline constexpr const char* kMoeRouteEntry = "strata_moe_route";
// strata_moe_route's gating argument (reference::ops::MoeGating's order).
inline constexpr int kMoeGatingSoftmax = 0;
inline constexpr int kMoeGatingSigmoid = 1;
inline constexpr int kMoeGatingSoftmaxWeight = 2;
inline constexpr int kArgmaxThreads = 256;

}  // namespace strata::worker::cuda_kernels
