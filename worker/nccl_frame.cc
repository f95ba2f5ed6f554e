#include "worker/nccl_frame.h"

#include <bit>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strata::worker {

absl::Status FrameLimits::check(const FrameHeader& h) const {
  if (h.rows > max_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame rows: ", h.rows, " exceed this link's ", max_rows));
  }
  if (h.rows > 0 && cols != 0 && h.cols != cols) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame cols: ", h.cols, ", but this link's rows are ", cols, " wide"));
  }
  if (h.meta_bytes > max_meta_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frame meta_bytes: ", h.meta_bytes, " exceed this link's ", max_meta_bytes));
  }
  return absl::OkStatus();
}
namespace {

static_assert(std::endian::native == std::endian::little,
              "the frame header and payload are little-endian");

template <typename T>
void put(uint8_t* out, size_t offset, T v) {
  std::memcpy(out + offset, &v, sizeof v);
}

template <typename T>
T get(const uint8_t* in, size_t offset) {
  T v;
  std::memcpy(&v, in + offset, sizeof v);
  return v;
}

absl::Status bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("NCCL frame: ", what));
}

// Rows of a micro-batch's slices (each slice one row per token).
uint64_t slice_rows(const v1::MicroBatch& batch) {
  uint64_t rows = 0;
  for (const v1::SequenceSlice& s : batch.slices()) rows += s.tokens_size();
  return rows;
}

}  // namespace

std::array<uint8_t, kFrameHeaderBytes> encode_frame_header(
    const FrameHeader& h) {
  std::array<uint8_t, kFrameHeaderBytes> out{};
  put<uint32_t>(out.data(), 0, kFrameMagic);
  put<uint16_t>(out.data(), 4, kFrameVersion);
  put<uint16_t>(out.data(), 6, static_cast<uint16_t>(h.kind));
  put<uint64_t>(out.data(), 8, h.batch_id);
  put<uint64_t>(out.data(), 16, h.shard_id);
  put<uint32_t>(out.data(), 24, h.meta_bytes);
  put<uint32_t>(out.data(), 28, h.rows);
  put<uint32_t>(out.data(), 32, h.cols);
  return out;
}

absl::StatusOr<FrameHeader> decode_frame_header(
    std::span<const uint8_t> bytes) {
  if (bytes.size() != kFrameHeaderBytes) {
    return bad(absl::StrCat("header: expected ", kFrameHeaderBytes,
                            " bytes, got ", bytes.size()));
  }
  const uint8_t* p = bytes.data();
  if (const uint32_t magic = get<uint32_t>(p, 0); magic != kFrameMagic) {
    return bad(
        absl::StrCat("magic: expected 0x4c434e53, got 0x", absl::Hex(magic)));
  }
  if (const uint16_t v = get<uint16_t>(p, 4); v != kFrameVersion) {
    return bad(absl::StrCat("version: expected ", kFrameVersion, ", got ", v));
  }
  const uint16_t kind = get<uint16_t>(p, 6);
  if (kind < 1 || kind > 3) {
    return bad(
        absl::StrCat("kind: expected 1 (micro-batch), 2 (result) or "
                     "3 (close), got ",
                     kind));
  }
  FrameHeader h;
  h.kind = static_cast<FrameKind>(kind);
  h.batch_id = get<uint64_t>(p, 8);
  h.shard_id = get<uint64_t>(p, 16);
  h.meta_bytes = get<uint32_t>(p, 24);
  h.rows = get<uint32_t>(p, 28);
  h.cols = get<uint32_t>(p, 32);
  for (size_t i = 36; i < kFrameHeaderBytes; ++i) {
    if (p[i] != 0) {
      return bad(absl::StrCat("reserved byte ", i, " is ",
                              static_cast<int>(p[i]), ", expected 0"));
    }
  }
  if (h.meta_bytes > kMaxFrameMetaBytes) {
    return bad(absl::StrCat("meta_bytes ", h.meta_bytes, " over the limit ",
                            kMaxFrameMetaBytes));
  }
  if (h.rows > kMaxFrameRows) {
    return bad(
        absl::StrCat("rows ", h.rows, " over the limit ", kMaxFrameRows));
  }
  if (h.cols > kMaxFrameCols) {
    return bad(
        absl::StrCat("cols ", h.cols, " over the limit ", kMaxFrameCols));
  }
  if ((h.rows == 0) != (h.cols == 0)) {
    return bad(absl::StrCat("rows ", h.rows, " and cols ", h.cols,
                            ": both zero (no payload) or neither"));
  }
  if (h.kind != FrameKind::kMicroBatch && h.rows != 0) {
    return bad(
        absl::StrCat("a ", h.kind == FrameKind::kResult ? "result" : "close",
                     " frame carries no payload, got ", h.rows, " x ", h.cols));
  }
  if (h.kind == FrameKind::kClose && h.meta_bytes > kMaxCloseReasonBytes) {
    return bad(absl::StrCat("a close frame's reason: ", h.meta_bytes,
                            " bytes over the limit ", kMaxCloseReasonBytes));
  }
  return h;
}

absl::StatusOr<Frame> frame_micro_batch(v1::MicroBatch batch, uint32_t cols) {
  Frame f;
  f.header.kind = FrameKind::kMicroBatch;
  f.header.batch_id = batch.batch_id();
  f.header.shard_id = batch.shard_id();
  std::string hidden = std::move(*batch.mutable_hidden());
  batch.clear_hidden();
  if (!hidden.empty()) {
    if (cols == 0 || cols > kMaxFrameCols) {
      return bad(absl::StrCat("cols (n_embd) ", cols, ": expected 1 .. ",
                              kMaxFrameCols));
    }
    const size_t row_bytes = size_t{cols} * sizeof(float);
    if (hidden.size() % row_bytes != 0) {
      return bad(absl::StrCat("hidden: ", hidden.size(),
                              " bytes is not a whole number of rows of ", cols,
                              " f32"));
    }
    const uint64_t rows = hidden.size() / row_bytes;
    if (rows > kMaxFrameRows) {
      return bad(absl::StrCat("hidden: ", rows, " rows over the limit ",
                              kMaxFrameRows));
    }
    if (rows != slice_rows(batch)) {
      return bad(absl::StrCat("hidden: ", rows, " rows, but the slices hold ",
                              slice_rows(batch), " tokens"));
    }
    f.header.rows = static_cast<uint32_t>(rows);
    f.header.cols = cols;
    f.payload.resize(f.header.payload_floats());
    std::memcpy(f.payload.data(), hidden.data(), hidden.size());
  }
  if (!batch.SerializeToString(&f.meta))
    return bad("meta: serialisation failed");
  if (f.meta.size() > kMaxFrameMetaBytes) {
    return bad(absl::StrCat("meta: ", f.meta.size(), " bytes over the limit ",
                            kMaxFrameMetaBytes));
  }
  f.header.meta_bytes = static_cast<uint32_t>(f.meta.size());
  return f;
}

absl::StatusOr<v1::MicroBatch> unframe_micro_batch(
    const FrameHeader& header, std::string_view meta,
    std::span<const float> payload) {
  if (header.kind != FrameKind::kMicroBatch) {
    return bad(absl::StrCat("kind ", static_cast<int>(header.kind),
                            ": expected a micro-batch (1)"));
  }
  if (meta.size() != header.meta_bytes) {
    return bad(absl::StrCat("meta: ", meta.size(), " bytes, header says ",
                            header.meta_bytes));
  }
  if (payload.size() != header.payload_floats()) {
    return bad(absl::StrCat("payload: ", payload.size(),
                            " floats, header says ", header.rows, " x ",
                            header.cols));
  }
  v1::MicroBatch batch;
  if (!batch.ParseFromArray(meta.data(), static_cast<int>(meta.size()))) {
    return bad("meta: not a strata.v1.MicroBatch");
  }
  if (!batch.hidden().empty()) {
    return bad(
        "meta: carries hidden itself (activations travel as the payload)");
  }
  if (batch.batch_id() != header.batch_id ||
      batch.shard_id() != header.shard_id) {
    return bad(absl::StrCat("meta: batch_id ", batch.batch_id(), " shard_id ",
                            batch.shard_id(), ", header says ", header.batch_id,
                            " and ", header.shard_id));
  }
  if (header.rows != 0 && slice_rows(batch) != header.rows) {
    return bad(absl::StrCat("meta: the slices hold ", slice_rows(batch),
                            " tokens, the payload ", header.rows, " rows"));
  }
  if (!payload.empty()) {
    batch.mutable_hidden()->assign(
        reinterpret_cast<const char*>(payload.data()), payload.size_bytes());
  }
  return batch;
}

absl::StatusOr<Frame> frame_result(const v1::MicroBatchResult& result) {
  Frame f;
  f.header.kind = FrameKind::kResult;
  f.header.batch_id = result.batch_id();
  f.header.shard_id = result.shard_id();
  if (!result.SerializeToString(&f.meta))
    return bad("meta: serialisation failed");
  if (f.meta.size() > kMaxFrameMetaBytes) {
    return bad(absl::StrCat("result: ", f.meta.size(), " bytes over the limit ",
                            kMaxFrameMetaBytes));
  }
  f.header.meta_bytes = static_cast<uint32_t>(f.meta.size());
  return f;
}

absl::StatusOr<v1::MicroBatchResult> unframe_result(const FrameHeader& header,
                                                    std::string_view meta) {
  if (header.kind != FrameKind::kResult) {
    return bad(absl::StrCat("kind ", static_cast<int>(header.kind),
                            ": expected a result (2)"));
  }
  if (meta.size() != header.meta_bytes) {
    return bad(absl::StrCat("meta: ", meta.size(), " bytes, header says ",
                            header.meta_bytes));
  }
  v1::MicroBatchResult result;
  if (!result.ParseFromArray(meta.data(), static_cast<int>(meta.size()))) {
    return bad("meta: not a strata.v1.MicroBatchResult");
  }
  if (result.batch_id() != header.batch_id ||
      result.shard_id() != header.shard_id) {
    return bad(absl::StrCat("result: batch_id ", result.batch_id(),
                            " shard_id ", result.shard_id(), ", header says ",
                            header.batch_id, " and ", header.shard_id));
  }
  return result;
}

Frame close_frame(std::string_view reason) {
  Frame f;
  f.header.kind = FrameKind::kClose;
  f.meta = std::string(reason.substr(0, kMaxCloseReasonBytes));
  f.header.meta_bytes = static_cast<uint32_t>(f.meta.size());
  return f;
}

std::string close_reason(const Frame& frame) {
  std::string text = frame.meta.substr(0, kMaxCloseReasonBytes);
  for (char& c : text) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return text;
}

}  // namespace strata::worker
