// The forward pass of one shard on a device, written once against the
// DeviceApi seam (device_api.h): the cuda backend is this on cudart's api
// (make_cuda_backend, cuda_backend.h), and the tests run it unchanged on the
// CPU emulation (tests/cuda/emulated_device_api.h) against the cpu backend.
//
// Weights are uploaded as their GGUF bytes (the kernels dequantize as they
// read); each sequence has an f16 K and V cache per layer of the shard on
// the device, [n_ctx][n_head_kv][head_dim] as worker/kv_cache.h's. A step
// (Backend::forward) is: the embedding rows (first stage) or the previous
// stage's hidden rows uploaded; per block RMSNorm, the q/k/v matrices over
// the step's rows (worker/cuda/step_kernels.h: chunks of up to 16 columns,
// each weight read once a chunk; a prompt chunk's rows on the tensor cores,
// DeviceBackendOptions::mma_min_rows), biases, QK-norm, RoPE on an angle table
// made on the host (reference::ops::rope_angles, shared by q and k), the
// K/V rows stored at each slice's positions, attention of each row to its
// sequence's cache, the output matrix and the residual add, RMSNorm, the
// feed-forward, add; the last stage's output norm and head for the rows
// that want logits, downloaded. The host sees only activations at the
// shard's edges and the logits; a mixture routes its tokens on the device
// (moe_route.cuh), and only a step whose experts run gathered (more slots
// than a launch takes) downloads their ids to group them. A decode step
// (of a mixture too, when its expert slots run in one launch a matrix) is
// replayed from a CUDA graph of its launches (DeviceBackendOptions::graphs).
//
// Runs every family of model/architecture: the llama block (llama, qwen2's
// biases, qwen3's QK-norm, phi3's fused projections), gemma2/gemma3 (post
// norms, GeGLU, soft caps, sliding windows, two RoPE settings) and the
// mixtures of experts (mixtral, qwen2moe's shared expert, qwen3moe, olmoe,
// gpt-oss's sinks, biases and clamped SwiGLU), with F32, F16, Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, MXFP4, Q4_K, Q5_K and Q6_K matrices; another matrix type
// is refused at load, by name (Unimplemented), never run wrong.
//
// Numerics: float sums everywhere (a prompt chunk's matrices: f16 products
// on the tensor cores, summed in f32), the f16 roundings of llama.cpp's
// attention and GeGLU (worker/cuda/kernels/*.cuh); the activations are not
// quantized (the cpu backend's matmuls round them to 8 bits for quantized
// weights, as llama.cpp's CPU path does), so logits differ from the cpu
// backend's by about that rounding, and greedy ids agree but for
// near-ties. With F32 weights both agree to ~1e-4 of the largest logit
// (tests/cuda/device_backend_test.cc, device_backend_steps_test.cc).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "worker/backend.h"
#include "worker/cuda/device_api.h"

namespace strata::worker {

struct DeviceBackendOptions {
  int max_batch = 512;  // rows per forward(), 1 .. 65536
  // The matrix kernel's split-K and block (worker/cuda/kernel_tuner.h):
  // tune = true measures each matrix shape's choice at load unless
  // `tuner_path` ("": default_tuner_path(); "-": none kept) already holds
  // it; false: one warp a row, blocks of 128. row_warps 1, 2 or 4 forces
  // that split on every matrix, with blocks of matvec_threads (64, 128 or
  // 256 holding whole rows of it; 0: 128) (tests); row_warps 0: as above.
  bool tune = true;
  std::string tuner_path;
  int row_warps = 0;
  int matvec_threads = 0;
  // A slice of at least this many rows (a prompt chunk) runs its block
  // matrices on the tensor-core kernel (worker/cuda/kernels/mma_source.h:
  // activations rounded to f16) and attends with flash attention
  // (flash_attention_source.h; for head sizes it is built for); smaller
  // ones, the experts of a mixture and the head on the matvec kernel. By the slice's own rows, so a
  // sequence's numbers never depend on what else is in the step. 0: never
  // (every row on the matvec kernel). F32 and F16 matrices always take the
  // matvec kernel.
  int mma_min_rows = 64;
  // Those slices' block-type matrices (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4,
  // Q4_K, Q5_K, Q6_K) on the
  // int8 tensor cores (mma3_i8_entry: the rows' Q8 values times the
  // weights' q exactly, the cpu backend's numbers up to float summation
  // order); false: on the f16 ones
  // (the weights and rows rounded to f16).
  bool mma_int8 = true;
  // On a device of compute capability 9.0 (DeviceApi::compute_capability)
  // the f16 tensor-core slices (mma_int8 false) take the kernel on sm_90's
  // warpgroup instructions (wgmma_source.h: 128 x 128 tiles, asynchronous);
  // false: mma.sync's (mma_source.h) there too. The same formula and bound;
  // not necessarily the same bits, so a device's choice is fixed for the
  // process (batch invariance holds either way).
  bool wgmma = true;
  // With tune, each matrix shape's tensor-core form among those these
  // switches allow (kernel_tuner.h PrefillForm: int8 mma.sync, f16 wgmma on
  // 9.0, f16 mma.sync) is the fastest on a chunk of min(prefill_tune_rows,
  // max_batch) zero rows, measured once and kept in the tuner's file;
  // without tune (or with one form allowed), the first of them.
  int prefill_tune_rows = 512;
  // Every other product of those types (decode and small slices, experts,
  // the head) on the matvec kernel's int8 form (matvec3_i8_entry: the
  // rows' Q8 values times the weights' q with dp4a, exactly); false: its
  // float form (the weights dequantized, times the rows' rounded values).
  bool matvec_int8 = true;
  // That form's chunks of 8 and 16 columns (batched decode) on the tensor
  // cores (matvec3_mma_entry: mma.sync for each unit's integer sums, the
  // dp4a kernel's bits); false: on dp4a.
  bool matvec_mma = true;
  // A step of decode rows only quantizes o's int8 rows in its attention
  // launch (strata_attention_batch_quantize: the row's last block to finish
  // quantizes it); false: a launch of its own after attention.
  bool attention_quantizes = true;
  // Decode rows whose context (their keys within the window) is longer
  // than attention_split_keys attend split over up to attention_splits
  // blocks a head (strata_attention_split_scores and _weigh in
  // kernels/attention.cuh: chunks of max(attention_split_keys, keys /
  // splits) keys, flash-decoding's split with the reference's numbers up to
  // the order of the softmax's sum); shorter ones give
  // strata_attention_batch's bits either way. A row's numbers depend on its
  // own keys and these two values only. attention_splits 0: 4 blocks a
  // multiprocessor over the heads (DeviceApi::multiprocessors / n_head x 4,
  // 1 .. 32); 1: never split. 0 .. 64; attention_split_keys at least 1.
  int attention_splits = 0;
  int attention_split_keys = 256;
  // A mixture-of-experts step of few rows (a decode step: rows x
  // n_expert_used <= max(n_expert, 16) and max_batch) multiplies every
  // (row, expert) slot of each expert matrix in one launch
  // (ck::matvec_ids_entry) instead of one launch an expert used over its
  // gathered rows; the same bits either way. false: always gathered.
  bool moe_slots = true;
  // A regrouped matrix (weight_layout.h) goes up this many bytes of device
  // rows at a time (at least a row): the host's copy of them at load.
  int64_t upload_chunk_bytes = int64_t{64} << 20;
  // Those slices attend with flash attention (f16 probabilities, ~1e-3 of
  // the largest logit) where the head size has a build; false: with the
  // attention.cuh kernels, as decode rows do (tests that isolate the
  // matrices' numbers; comparisons on a GPU).
  bool flash_attention = true;
  // Decode steps (every slice one row; of a mixture, when its expert slots
  // run in one launch a matrix) replayed from a captured graph of their
  // launches, one a row count (DeviceApi::capture), where the api has
  // graphs; false: launched one by one.
  bool graphs = true;
  // Diagnostics: when set, every launch after the load is timed on the
  // device (DeviceApi::set_profiling: the host waits for each, graphs are
  // off) and, when the backend is destroyed, the kernels' totals are written
  // here as JSON ({"device", "kernels": [{"program", "entry", "launches",
  // "ms", "us_per_launch"}] most time first, "total_ms"}). The load fails
  // where the api cannot time launches.
  std::string kernel_profile_path;
};

// Loads the shard's weights onto `api`'s device and loads every kernel the
// step launches (compiling them at first use). Errors: InvalidArgument for
// a null model or api, a bad range or max_batch, or the tensor checks of
// worker/shard_tensors.h ("blk.3.attn_q.weight: missing"); Unimplemented
// for a matrix type the kernels do not read ("blk.0.ffn_down.weight: Q3_K
// has no cuda kernel yet (...)"); the device's errors (ResourceExhausted
// when its memory is short).
absl::StatusOr<std::unique_ptr<Backend>> make_device_backend(
    std::shared_ptr<const gguf::GgufModel> model, const arch::Hyperparameters& hp,
    BlockRange range, const DeviceBackendOptions& options, std::unique_ptr<DeviceApi> api);

}  // namespace strata::worker
