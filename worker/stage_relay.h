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
// Ownership: borrows the Stage (which must outlive the relay); owns the
// link. Threads: any thread may call any method; Stage::run is serialised
// by the relay. Results are delivered on the caller's thread (local ones)
// or on the link's thread (downstream ones).
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

namespace strata::worker {

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

  // Stage::free_sequences under the relay's lock.
  int free_sequences(const uint64_t* seq_ids, int n);
  // Live sequences after the last run or free (no lock taken).
  int live_sequences() const { return live_.load(); }

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

  std::mutex waiting_mu_;
  std::deque<Waiting> waiting_;  // sent to the next stage, not answered
};

}  // namespace strata::worker
