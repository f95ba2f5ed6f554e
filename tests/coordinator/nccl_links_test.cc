// The coordinator's half of the NCCL link (coordinator/nccl_links.h): which
// pairs of neighbours NCCL links, from activation_link and the workers'
// Describe, and the RPCs that link them, over a recording WorkerControl.
// The same logic runs end to end through a Cluster in
// tests/worker/worker_nccl_test.cc (NcclClusterTest).
#include "coordinator/nccl_links.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace strata::coordinator {
namespace {

v1::DescribeResponse gpu_worker(const std::string& uuid, bool nccl = true) {
  v1::DescribeResponse d;
  d.set_nccl_link(nccl);
  d.set_gpu_uuid(uuid);
  return d;
}

std::string message(const absl::StatusOr<std::vector<bool>>& r) {
  return std::string(r.status().message());
}

TEST(NcclLinks, ChoosesNcclBetweenTwoGpusThatMakeNcclLinks) {
  const v1::DescribeResponse a = gpu_worker("GPU-a"), b = gpu_worker("GPU-b"),
                             c = gpu_worker("GPU-c");
  const std::vector<StageWorker> three = {{"worker w0", &a}, {"worker w1", &b}, {"worker w2", &c}};
  for (ActivationLinkKind kind : {ActivationLinkKind::kAuto, ActivationLinkKind::kNccl}) {
    absl::StatusOr<std::vector<bool>> r = choose_nccl_links(kind, three);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, (std::vector<bool>{true, true, false}));
  }
  absl::StatusOr<std::vector<bool>> grpc = choose_nccl_links(ActivationLinkKind::kGrpc, three);
  ASSERT_TRUE(grpc.ok());
  EXPECT_EQ(*grpc, (std::vector<bool>{false, false, false}));
  // One stage: no link at all.
  absl::StatusOr<std::vector<bool>> one =
      choose_nccl_links(ActivationLinkKind::kNccl, {{"worker w0", &a}});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, std::vector<bool>{false});
}

// A CPU worker, an undescribed one, or two workers on one GPU: gRPC for
// that pair under auto (the others stay NCCL); refused naming them under
// nccl.
TEST(NcclLinks, PairsNcclCannotLinkStayOnGrpcOrAreRefused) {
  const v1::DescribeResponse a = gpu_worker("GPU-a"), b = gpu_worker("GPU-b"),
                             cpu = gpu_worker("", /*nccl=*/false), b2 = gpu_worker("GPU-b");
  struct Case {
    std::vector<StageWorker> stages;
    std::vector<bool> under_auto;
    std::string refused;  // under nccl, in the message
  };
  const std::vector<Case> cases = {
      {{{"worker w0", &a}, {"worker w1", &b}, {"worker w2", &cpu}},
       {true, false, false},
       "worker w2 makes no NCCL links"},
      {{{"worker w0", &a}, {"worker w1", nullptr}, {"worker w2", &b}},
       {false, false, false},
       "worker w1 has not described itself yet"},
      {{{"worker w0", &a}, {"worker w1", &b}, {"worker w2", &b2}},
       {true, false, false},
       "worker w1 and worker w2 run on the same GPU (GPU-b)"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<bool>> r = choose_nccl_links(ActivationLinkKind::kAuto, c.stages);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, c.under_auto) << c.refused;
    absl::StatusOr<std::vector<bool>> refused =
        choose_nccl_links(ActivationLinkKind::kNccl, c.stages);
    ASSERT_FALSE(refused.ok()) << c.refused;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(message(refused).find(c.refused), std::string::npos) << message(refused);
  }
}

// Records the NCCL calls a worker gets, in one log shared by all.
class RecordingWorker final : public WorkerControl {
 public:
  RecordingWorker(std::string name, std::vector<std::string>* log) : name_(std::move(name)), log_(log) {}
  const std::string& address() const override { return name_; }
  absl::StatusOr<v1::DescribeResponse> describe(absl::Duration) override {
    return absl::UnimplementedError("not used");
  }
  absl::StatusOr<v1::ShardInfo> load_shard(const v1::LoadShardRequest&, absl::Duration) override {
    return absl::UnimplementedError("not used");
  }
  absl::StatusOr<std::string> make_nccl_id(absl::Duration) override {
    log_->push_back(absl::StrCat(name_, " make"));
    if (fail_make) return absl::UnavailableError(absl::StrCat(name_, ": gone"));
    return absl::StrCat("id-of-", name_, "-", ++made_);
  }
  absl::StatusOr<v1::ShardInfo> link_nccl(const v1::LinkNcclRequest& r, absl::Duration) override {
    log_->push_back(absl::StrCat(name_, " link shard ", r.shard_id(), " next ",
                                 r.has_next() ? r.next().forward_id() + "/" + r.next().results_id() : "-",
                                 " previous ",
                                 r.has_previous() ? r.previous().forward_id() + "/" + r.previous().results_id()
                                                  : "-"));
    v1::ShardInfo info;
    info.set_shard_id(r.shard_id());
    info.set_next_link(r.has_next() ? "nccl" : "grpc");
    return info;
  }
  absl::StatusOr<int> free_sequences(uint64_t, std::span<const uint64_t>, absl::Duration) override {
    return absl::UnimplementedError("not used");
  }
  absl::StatusOr<v1::WorkerHealthResponse> health(absl::Duration) override {
    return absl::UnimplementedError("not used");
  }
  bool fail_make = false;

 private:
  const std::string name_;
  std::vector<std::string>* log_;
  int made_ = 0;
};

// Four stages, NCCL between w0-w1 and w2-w3, gRPC between w1-w2: each
// communicator's id comes from its rank 0 (forward: the sender; results:
// the receiver), every stage with an NCCL neighbour is linked, last first,
// with the ids of its own links and no others.
TEST(NcclLinks, EachIdComesFromItsRankZeroAndEveryStageGetsItsOwn) {
  std::vector<std::string> log;
  RecordingWorker w0("w0", &log), w1("w1", &log), w2("w2", &log), w3("w3", &log);
  absl::StatusOr<std::vector<std::optional<v1::ShardInfo>>> linked =
      link_over_nccl({&w0, &w1, &w2, &w3}, 9, {true, false, true, false}, absl::Seconds(5));
  ASSERT_TRUE(linked.ok()) << linked.status();
  const std::vector<std::string> want = {
      "w0 make",
      "w1 make",
      "w2 make",
      "w3 make",
      "w3 link shard 9 next - previous id-of-w2-1/id-of-w3-1",
      "w2 link shard 9 next id-of-w2-1/id-of-w3-1 previous -",
      "w1 link shard 9 next - previous id-of-w0-1/id-of-w1-1",
      "w0 link shard 9 next id-of-w0-1/id-of-w1-1 previous -",
  };
  EXPECT_EQ(log, want);
  ASSERT_EQ(linked->size(), 4u);
  for (const auto& info : *linked) {
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->shard_id(), 9u);
  }
  EXPECT_EQ((*linked)[0]->next_link(), "nccl");
  EXPECT_EQ((*linked)[1]->next_link(), "grpc");

  // No NCCL pair: no RPC at all, nothing linked.
  log.clear();
  linked = link_over_nccl({&w0, &w1}, 10, {false, false}, absl::Seconds(5));
  ASSERT_TRUE(linked.ok());
  EXPECT_TRUE(log.empty());
  EXPECT_FALSE((*linked)[0].has_value());
  EXPECT_FALSE((*linked)[1].has_value());
}

// A worker whose MakeNcclId fails: its error comes back, and no stage is
// linked with half a setup.
TEST(NcclLinks, AFailedIdLinksNothing) {
  std::vector<std::string> log;
  RecordingWorker w0("w0", &log), w1("w1", &log);
  w1.fail_make = true;
  absl::StatusOr<std::vector<std::optional<v1::ShardInfo>>> linked =
      link_over_nccl({&w0, &w1}, 3, {true, false}, absl::Seconds(5));
  ASSERT_FALSE(linked.ok());
  EXPECT_EQ(linked.status().message(), "w1: gone");
  EXPECT_EQ(log, (std::vector<std::string>{"w0 make", "w1 make"}));
  // Choices that do not match the stages are a caller's bug, said so.
  EXPECT_EQ(link_over_nccl({&w0, &w1}, 3, {true}, absl::Seconds(5)).status().code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace strata::coordinator
