// StageRelay: one pipeline stage at work. It runs micro-batches through a
// Stage and, on a stage that is not the last, sends the Stage's output over
// an ActivationLink to the next stage; every result (a local error, the
// last stage's tokens, or what the next stage answered) reaches the
// OrderedResults of the upstream the micro-batch came from, in order.
// The worker service (one relay, many upstream streams) and the in-process
// link (one upstream) are both built on it.
//
// The link to the next stage is made by a factory, at the first micro-batch
// and again whenever the last one broke (the next worker was restarted):
// micro-batches pending on a broken link get its UNAVAILABLE /
// DEADLINE_EXCEEDED results, naming that stage, before any later one.
//
// On the last stage a direct sink (set_direct_sink: the coordinator's
// Results stream) may take each successful result instead; the upstream
// then gets an acknowledgement (MicroBatchResult.delivered, no tokens) in
// its place. Errors, and micro-batches that ask for traces, always go
// upstream.
//
// Ownership: borrows the Stage (which must outlive the relay); owns the
// link. Threads: any thread may call any method; Stage::run is serialised
// by the relay. Results are delivered on the caller's thread (local ones)
// or on the link's thread (downstream ones); the direct sink is called on
// the stage's thread, in the order the micro-batches ran.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "strata/v1/worker.pb.h"
#include "worker/activation_link.h"
#include "worker/ordered_results.h"
#include "worker/stage.h"
#include "worker/step_totals.h"

namespace strata::worker {

// Takes a last stage's result for the coordinator; false when it cannot
// (the stream is gone): the result then goes upstream.
using DirectSink = std::function<bool(const v1::MicroBatchResult& result)>;

// Makes the link to the next stage, whose results go to `on_result`.
using LinkFactory =
    std::function<absl::StatusOr<std::unique_ptr<ActivationLink>>(
        ActivationLink::ResultCallback on_result)>;

class StageRelay {
 public:
  // `label` prefixes error messages ("worker w1" gives "worker w1:
  // slices[0]..."); `make_next` is empty on the last stage.
  StageRelay(Stage& stage, std::string label, LinkFactory make_next);
  ~StageRelay();
  StageRelay(const StageRelay&) = delete;
  StageRelay& operator=(const StageRelay&) = delete;

  // Runs `batch` and sees that `upstream` gets its result: reserves a
  // ticket, runs the stage, then completes the ticket (error or last stage)
  // or hands the output to the next stage (which completes it later).
  void process(const std::shared_ptr<OrderedResults>& upstream,
               const v1::MicroBatch& batch);

  // Makes the link to the next stage now rather than at the first
  // micro-batch (it connects in the background). No-op on the last stage.
  void connect();
  // From now on the link to the next stage comes from `make_next` (the
  // NCCL link replacing the gRPC one): the current link is closed (its
  // pending micro-batches answered UNAVAILABLE) and the new one made.
  // FailedPrecondition on the last stage or a closed relay.
  absl::Status relink(LinkFactory make_next);

  // The last stage's direct sink (replacing any earlier one); returns a
  // token for clear_direct_sink. No-op (returns 0) on other stages.
  uint64_t set_direct_sink(DirectSink sink);
  // Removes the sink set with `token` if it is still the current one.
  void clear_direct_sink(uint64_t token);
  // Whether the sink set with `token` is still the current one.
  bool has_direct_sink(uint64_t token);

  // Stage::free_sequences under the relay's lock.
  int free_sequences(const uint64_t* seq_ids, int n);
  // Live sequences after the last run or free (no lock taken).
  int live_sequences() const { return live_.load(); }
  // Time in Stage::run and the count of runs (no lock taken).
  const StepTotals& step_totals() const { return steps_; }

  // Closes the link to the next stage (its pending micro-batches get
  // UNAVAILABLE results, delivered before close() returns); later
  // micro-batches get UNAVAILABLE at once. Waits for a running batch.
  // `reason` ends the pending batches' messages (ActivationLink::close).
  void close(const std::string& reason = kLinkClosed);

 private:
  struct Waiting {
    std::shared_ptr<OrderedResults> upstream;
    uint64_t ticket = 0;
    uint64_t batch_id = 0;
    google::protobuf::RepeatedPtrField<v1::BlockTrace> traces;  // this stage's
  };

  void on_next_result(v1::MicroBatchResult result);
  // Hands a last-stage result to the direct sink; false when there is none
  // or it refused.
  bool deliver_direct(const v1::MicroBatchResult& result);
  // Makes the link when there is none or the last one broke; false (with
  // the reason in *error) when it cannot be made.
  bool ensure_link(std::string* error);

  Stage& stage_;
  const std::string name_;
  LinkFactory make_next_;

  std::mutex run_mu_;  // one run() at a time; guards link_ and closed_
  std::unique_ptr<ActivationLink> link_;
  bool closed_ = false;
  std::atomic<int> live_{0};
  StepTotals steps_;

  std::mutex direct_mu_;  // guards direct_ and direct_token_
  DirectSink direct_;
  uint64_t direct_token_ = 0;

  std::mutex waiting_mu_;
  std::deque<Waiting> waiting_;  // sent to the next stage, not answered
};

}  // namespace strata::worker
