// The NCCL link's framing (worker/nccl_frame.h) on the host: headers and
// micro-batches round-trip, and every malformed header or meta is refused
// naming its field. (The transfers themselves: tests/cuda/nccl_link_test.cc,
// on a GPU.)
#include "worker/nccl_frame.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/shard_plan.h"

namespace strata::worker {
namespace {

v1::MicroBatch batch_with_rows(int rows, uint32_t cols) {
  v1::MicroBatch b;
  b.set_shard_id(7);
  b.set_batch_id(42);
  v1::SequenceSlice* s = b.add_slices();
  s->set_seq_id(3);
  s->set_start_pos(5);
  for (int i = 0; i < rows; ++i) s->add_tokens(100 + i);
  s->set_sample(true);
  std::vector<float> hidden(static_cast<size_t>(rows) * cols);
  for (size_t i = 0; i < hidden.size(); ++i)
    hidden[i] = 0.25f * static_cast<float>(i) - 3.0f;
  b.set_hidden(std::string(reinterpret_cast<const char*>(hidden.data()),
                           hidden.size() * sizeof(float)));
  return b;
}

TEST(NcclFrame, HeaderRoundTrips) {
  FrameHeader h;
  h.kind = FrameKind::kMicroBatch;
  h.batch_id = 0x0102030405060708ull;
  h.shard_id = 99;
  h.meta_bytes = 1234;
  h.rows = 17;
  h.cols = 576;
  const auto bytes = encode_frame_header(h);
  ASSERT_EQ(bytes.size(), kFrameHeaderBytes);
  EXPECT_EQ(bytes[0], 'S');
  EXPECT_EQ(bytes[1], 'N');
  EXPECT_EQ(bytes[2], 'C');
  EXPECT_EQ(bytes[3], 'L');
  absl::StatusOr<FrameHeader> back = decode_frame_header(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, h.kind);
  EXPECT_EQ(back->batch_id, h.batch_id);
  EXPECT_EQ(back->shard_id, h.shard_id);
  EXPECT_EQ(back->meta_bytes, h.meta_bytes);
  EXPECT_EQ(back->rows, h.rows);
  EXPECT_EQ(back->cols, h.cols);
  EXPECT_EQ(back->payload_floats(), 17u * 576u);
}

TEST(NcclFrame, MicroBatchRoundTripsThroughMetaAndPayload) {
  const v1::MicroBatch original = batch_with_rows(5, 64);
  absl::StatusOr<Frame> f = frame_micro_batch(original, 64);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->header.rows, 5u);
  EXPECT_EQ(f->header.cols, 64u);
  EXPECT_EQ(f->payload.size(), 5u * 64u);
  EXPECT_EQ(f->header.meta_bytes, f->meta.size());
  // The activations travel as the payload, not inside the meta.
  EXPECT_LT(f->meta.size(), 5u * 64u * sizeof(float));
  absl::StatusOr<FrameHeader> h =
      decode_frame_header(encode_frame_header(f->header));
  ASSERT_TRUE(h.ok()) << h.status();
  absl::StatusOr<v1::MicroBatch> back =
      unframe_micro_batch(*h, f->meta, f->payload);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), original.SerializeAsString());
}

TEST(NcclFrame, FirstStageMicroBatchHasNoPayload) {
  v1::MicroBatch b = batch_with_rows(3, 8);
  b.clear_hidden();
  absl::StatusOr<Frame> f = frame_micro_batch(b, 8);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->header.rows, 0u);
  EXPECT_EQ(f->header.cols, 0u);
  EXPECT_TRUE(f->payload.empty());
  absl::StatusOr<v1::MicroBatch> back =
      unframe_micro_batch(f->header, f->meta, {});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->slices(0).tokens_size(), 3);
}

TEST(NcclFrame, ResultRoundTrips) {
  v1::MicroBatchResult r;
  r.set_batch_id(42);
  r.set_shard_id(7);
  v1::SampledToken* t = r.add_tokens();
  t->set_seq_id(3);
  t->set_id(1234);
  t->set_pos(9);
  absl::StatusOr<Frame> f = frame_result(r);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->header.kind, FrameKind::kResult);
  EXPECT_TRUE(f->payload.empty());
  absl::StatusOr<FrameHeader> h =
      decode_frame_header(encode_frame_header(f->header));
  ASSERT_TRUE(h.ok()) << h.status();
  absl::StatusOr<v1::MicroBatchResult> back = unframe_result(*h, f->meta);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), r.SerializeAsString());
}

TEST(NcclFrame, CloseFrameDecodes) {
  const Frame f = close_frame();
  absl::StatusOr<FrameHeader> h =
      decode_frame_header(encode_frame_header(f.header));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->kind, FrameKind::kClose);
  EXPECT_EQ(h->meta_bytes, 0u);
  EXPECT_EQ(close_reason(f), "");
}

// A close frame may say why the link ends: the reason crosses as meta, is
// cut to kMaxCloseReasonBytes when sent, and reads back as printable ASCII
// whatever bytes the far side put there.
TEST(NcclFrame, CloseFrameCarriesItsReason) {
  const Frame f = close_frame("NCCL frame: magic: expected 0x4c434e53");
  absl::StatusOr<FrameHeader> h = decode_frame_header(encode_frame_header(f.header));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->meta_bytes, f.meta.size());
  EXPECT_EQ(close_reason(f), "NCCL frame: magic: expected 0x4c434e53");

  const Frame cut = close_frame(std::string(3 * kMaxCloseReasonBytes, 'r'));
  EXPECT_EQ(cut.meta.size(), kMaxCloseReasonBytes);
  EXPECT_EQ(cut.header.meta_bytes, kMaxCloseReasonBytes);
  EXPECT_TRUE(decode_frame_header(encode_frame_header(cut.header)).ok());

  Frame hostile = close_frame();
  hostile.meta = std::string("ok\n\xff\xfe\x00\x7f end", 11);
  hostile.header.meta_bytes = static_cast<uint32_t>(hostile.meta.size());
  EXPECT_EQ(close_reason(hostile), "ok????? end");
}

// Each malformed header is refused, the message naming the field.
TEST(NcclFrame, RejectsMalformedHeaders) {
  FrameHeader good;
  good.kind = FrameKind::kMicroBatch;
  good.meta_bytes = 10;
  good.rows = 2;
  good.cols = 4;
  auto mutate = [&](auto&& change) {
    auto bytes = encode_frame_header(good);
    change(bytes);
    return decode_frame_header(bytes);
  };
  auto expect_refused = [](const absl::StatusOr<FrameHeader>& r,
                           const char* word) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find(word), std::string::npos)
        << r.status();
  };
  const auto bytes = encode_frame_header(good);
  expect_refused(decode_frame_header(std::span(bytes).first(63)), "64 bytes");
  expect_refused(mutate([](auto& b) { b[0] = 'X'; }), "magic");
  expect_refused(mutate([](auto& b) { b[4] = 1; }), "version");  // before close reasons
  expect_refused(mutate([](auto& b) { b[4] = 3; }), "version");
  expect_refused(mutate([](auto& b) { b[6] = 9; }), "kind");
  expect_refused(mutate([](auto& b) { b[40] = 1; }), "reserved");
  auto put32 = [](auto& b, size_t off, uint32_t v) {
    std::memcpy(b.data() + off, &v, 4);
  };
  expect_refused(mutate([&](auto& b) { put32(b, 24, kMaxFrameMetaBytes + 1); }),
                 "meta_bytes");
  expect_refused(mutate([&](auto& b) { put32(b, 28, kMaxFrameRows + 1); }),
                 "rows");
  expect_refused(mutate([&](auto& b) { put32(b, 32, kMaxFrameCols + 1); }),
                 "cols");
  expect_refused(mutate([&](auto& b) { put32(b, 32, 0); }), "neither");
  expect_refused(mutate([](auto& b) { b[6] = 2; }), "no payload");
  FrameHeader close = close_frame().header;
  close.meta_bytes = kMaxCloseReasonBytes + 1;
  expect_refused(decode_frame_header(encode_frame_header(close)), "reason");
}

TEST(NcclFrame, RejectsHiddenThatIsNotWholeRows) {
  v1::MicroBatch b = batch_with_rows(2, 8);
  b.mutable_hidden()->resize(b.hidden().size() - 4);
  absl::StatusOr<Frame> f = frame_micro_batch(b, 8);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(std::string(f.status().message()).find("whole number of rows"),
            std::string::npos)
      << f.status();
  // Rows that are whole but not the slices' token count.
  v1::MicroBatch c = batch_with_rows(2, 8);
  c.mutable_slices(0)->add_tokens(5);
  f = frame_micro_batch(c, 8);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(std::string(f.status().message()).find("3 tokens"),
            std::string::npos)
      << f.status();
}

TEST(NcclFrame, RejectsMetaThatDisagreesWithTheHeader) {
  absl::StatusOr<Frame> f = frame_micro_batch(batch_with_rows(2, 4), 4);
  ASSERT_TRUE(f.ok()) << f.status();
  // Another batch id in the header than in the meta.
  FrameHeader h = f->header;
  h.batch_id = 43;
  EXPECT_FALSE(unframe_micro_batch(h, f->meta, f->payload).ok());
  // A payload of the wrong size.
  std::vector<float> short_payload(f->payload.begin(), f->payload.end() - 1);
  EXPECT_FALSE(unframe_micro_batch(f->header, f->meta, short_payload).ok());
  // Meta that is not a MicroBatch.
  FrameHeader g = f->header;
  const std::string junk = "\xff\xff\xff\xff";
  g.meta_bytes = static_cast<uint32_t>(junk.size());
  EXPECT_FALSE(unframe_micro_batch(g, junk, f->payload).ok());
  // Meta that carries the activations itself.
  v1::MicroBatch with_hidden = batch_with_rows(2, 4);
  const std::string meta = with_hidden.SerializeAsString();
  FrameHeader m = f->header;
  m.meta_bytes = static_cast<uint32_t>(meta.size());
  absl::StatusOr<v1::MicroBatch> r = unframe_micro_batch(m, meta, f->payload);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("hidden"),
            std::string::npos);
  // A result frame is not a micro-batch.
  FrameHeader k = f->header;
  k.kind = FrameKind::kResult;
  EXPECT_FALSE(unframe_micro_batch(k, f->meta, f->payload).ok());
}

// LinkNccl's checks (check_link_nccl): the loaded shard's id, a side
// given, ids of exactly 128 bytes, a stage on that side. (Whether this
// worker makes NCCL links, and made the id it is rank 0 of, is the
// service's check: worker_nccl_test.cc.)
TEST(NcclFrame, LinkNcclChecksTheSetup) {
  v1::ShardInfo shard;
  shard.set_shard_id(5);
  shard.set_embedding(true);  // the first stage: a next, no previous
  v1::LinkNcclRequest r;
  r.set_shard_id(5);
  auto message = [&] { return std::string(check_link_nccl(r, shard).message()); };
  EXPECT_NE(message().find("neither next nor previous"), std::string::npos) << message();

  r.mutable_next()->set_forward_id(std::string(100, 'x'));
  r.mutable_next()->set_results_id(std::string(kNcclIdBytes, 'y'));
  EXPECT_EQ(check_link_nccl(r, shard).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message().find("next.forward_id: 100 bytes, expected 128"), std::string::npos)
      << message();
  r.mutable_next()->set_forward_id(std::string(kNcclIdBytes, 'x'));
  r.mutable_next()->set_results_id("");
  EXPECT_NE(message().find("next.results_id: 0 bytes"), std::string::npos) << message();
  r.mutable_next()->set_results_id(std::string(kNcclIdBytes, 'y'));
  EXPECT_TRUE(check_link_nccl(r, shard).ok()) << message();

  *r.mutable_previous() = r.next();
  EXPECT_NE(message().find("previous: given to the first stage"), std::string::npos)
      << message();
  shard.set_embedding(false);  // a middle stage: both
  EXPECT_TRUE(check_link_nccl(r, shard).ok()) << message();
  r.mutable_previous()->set_results_id("short");
  EXPECT_NE(message().find("previous.results_id: 5 bytes"), std::string::npos) << message();
  r.mutable_previous()->set_results_id(std::string(kNcclIdBytes, 'z'));
  shard.set_head(true);  // the last stage: no next
  EXPECT_NE(message().find("next: given to the last stage"), std::string::npos) << message();
  shard.set_head(false);
  r.set_shard_id(6);
  EXPECT_NE(message().find("shard_id: 6, but the loaded shard is 5"), std::string::npos)
      << message();
}

}  // namespace
}  // namespace strata::worker
