// Framing of the NCCL ActivationLink (worker/frame_link.h): what travels
// between two pipeline stages as NCCL point-to-point transfers. NCCL moves
// counted buffers, not messages, so every micro-batch (and every result
// coming back) is a fixed-size header saying how much follows, then:
//   - meta:    the MicroBatch (or MicroBatchResult) serialised WITHOUT
//              `hidden` (slices, tokens, sampling: all the next stage needs
//              besides the activations); meta_bytes bytes;
//   - payload: the activations, rows x cols f32 ([sum of slice rows][n_embd],
//              rows in slice order, as MicroBatch.hidden), sent as
//              ncclFloat32 so that from a CUDA backend they need never touch
//              the host.
//
// Header, 64 bytes, little-endian:
//   offset  0  u32  magic 0x4C434E53 ("SNCL")
//           4  u16  version (2: close frames may carry a reason; 1 before)
//           6  u16  kind (1 micro-batch, 2 result, 3 close)
//           8  u64  batch_id
//          16  u64  shard_id
//          24  u32  meta_bytes   (<= kMaxFrameMetaBytes)
//          28  u32  rows         (<= kMaxFrameRows; 0 with cols 0: no payload)
//          32  u32  cols         (<= kMaxFrameCols)
//          36..63   zero (reserved; a nonzero byte is refused)
// Results and close frames carry no payload (rows = cols = 0). A close
// frame's meta, when it has one, is why the link ends (text, at most
// kMaxCloseReasonBytes): a receiving stage that ends the link on a failure
// (a bad frame, too many results owed) says so on the results
// communicator, best effort, since NCCL never tells a rank
// that its peer aborted (the sender would otherwise learn it only when its
// oldest micro-batch is overdue). The far side is another worker of the same
// cluster, but its bytes are still checked (DESIGN.md "Bad input"): every
// field against its bound before a buffer is sized from it, and the meta
// against the header (same batch_id and shard_id, rows = the slices' rows).
//
// Thread-safety: plain functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/v1/worker.pb.h"

namespace strata::worker {

inline constexpr size_t kFrameHeaderBytes = 64;
// An ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES): LoadShardRequest's
// NcclLinkSetup ids, checked here without nccl.h.
inline constexpr size_t kNcclIdBytes = 128;
inline constexpr uint32_t kFrameMagic = 0x4C434E53;  // "SNCL" little-endian
inline constexpr uint16_t kFrameVersion = 2;
// Bounds: a micro-batch has at most 4096 rows (LoadShardRequest
// max_batch_rows); 65536 columns is past any model's n_embd; the meta of
// 4096 rows with every per-slice field is far under 16 MiB.
inline constexpr uint32_t kMaxFrameRows = 4096;
inline constexpr uint32_t kMaxFrameCols = 65536;
inline constexpr uint32_t kMaxFrameMetaBytes = 16u << 20;
inline constexpr uint32_t kMaxCloseReasonBytes = 1024;

enum class FrameKind : uint16_t { kMicroBatch = 1, kResult = 2, kClose = 3 };

struct FrameHeader {
  FrameKind kind = FrameKind::kMicroBatch;
  uint64_t batch_id = 0;
  uint64_t shard_id = 0;
  uint32_t meta_bytes = 0;
  uint32_t rows = 0;  // of the payload; 0: none
  uint32_t cols = 0;  // n_embd; 0 exactly when rows is 0

  // rows x cols (at most 2^28: both bounded above).
  size_t payload_floats() const { return size_t{rows} * cols; }
};

std::array<uint8_t, kFrameHeaderBytes> encode_frame_header(
    const FrameHeader& header);

// InvalidArgument naming the field: a size other than 64 bytes, a wrong
// magic or version, an unknown kind, a bound exceeded, rows xor cols zero,
// a payload on a result or close frame, a close frame's reason over
// kMaxCloseReasonBytes, a nonzero reserved byte.
absl::StatusOr<FrameHeader> decode_frame_header(std::span<const uint8_t> bytes);

// The largest frame a channel (worker/frame_channel.h) carries, fixed when it is joined: its
// buffers are sized once for it (NCCL: no cudaMalloc/cudaFree, which wait
// for the whole device, once frames flow), and a frame beyond it is
// refused, sent or received (InvalidArgument naming the bound, before any
// buffer is sized from a received header).
struct FrameLimits {
  uint32_t max_rows = 0;  // payload rows (a micro-batch's; 0: no payload)
  // Payload columns (n_embd) when rows > 0; 0: any width (buffers then
  // grow to the largest frame seen: the one-rank tests of nccl_channel).
  uint32_t cols = 0;
  uint32_t max_meta_bytes = kMaxFrameMetaBytes;

  // InvalidArgument when `header` exceeds these limits.
  absl::Status check(const FrameHeader& header) const;
};

// One frame as it travels: header, meta, payload (host copies; the link
// moves the payload through device memory).
struct Frame {
  FrameHeader header;
  std::string meta;            // header.meta_bytes bytes
  std::vector<float> payload;  // header.payload_floats() floats
};

// Cuts `batch` into a frame: `cols` is the model's n_embd (the width of a
// hidden row). InvalidArgument when `hidden` is not a whole number of
// cols-wide f32 rows, or its rows differ from the slices' token count, or
// a bound is exceeded. An empty `hidden` (the first stage's input) gives
// no payload.
absl::StatusOr<Frame> frame_micro_batch(v1::MicroBatch batch, uint32_t cols);

// The inverse: InvalidArgument when the header is not a micro-batch's, the
// meta does not parse as a
// MicroBatch, carries `hidden` itself, disagrees with the header (batch_id,
// shard_id, the slices' rows against header.rows), or the payload's size
// is not header.payload_floats().
absl::StatusOr<v1::MicroBatch> unframe_micro_batch(
    const FrameHeader& header, std::string_view meta,
    std::span<const float> payload);

// A result frame (no payload; batch_id and shard_id the result's).
// InvalidArgument when its serialisation is over kMaxFrameMetaBytes.
absl::StatusOr<Frame> frame_result(const v1::MicroBatchResult& result);
// InvalidArgument when the header is not a result's, the meta does not
// parse, or its batch_id / shard_id disagree with the header.
absl::StatusOr<v1::MicroBatchResult> unframe_result(const FrameHeader& header,
                                                    std::string_view meta);

// The frame that tells the far side this link is closing; `reason` (why,
// when the link ends on a failure: "" for an orderly close) is cut to
// kMaxCloseReasonBytes.
Frame close_frame(std::string_view reason = {});

// A close frame's reason as text fit for a message: every byte outside
// printable ASCII becomes '?' (the bytes are the far side's: they must not
// reach a client's JSON as invalid UTF-8). "" for an orderly close.
std::string close_reason(const Frame& frame);

}  // namespace strata::worker
