// ResultJoin: one result per micro-batch for a link whose last stage may
// answer straight to the coordinator (worker.proto, Worker.Results). Each
// micro-batch is answered twice then: by the chain, in order (the
// acknowledgement `delivered`, or the whole result or an error when the
// last stage did not take the direct path), and by the last stage, at any
// time before or after (the result with its tokens). The join hands the
// link's callback exactly one of them: the direct result as soon as it
// comes, the chain's answer when it is not an acknowledgement, and an
// error for whatever is left when the link fails.
//
// Usage (a link's reader threads):
//   ResultJoin join(on_result);
//   join.sent(batch.batch_id());          // as each micro-batch goes out
//   join.from_chain(answer);              // the Activations stream's answers
//   join.from_last_stage(result);         // the Results stream's
//   join.fail_all(code, "worker w1: ...");  // the link broke
//
// Threads: any thread may call any method; the callback runs on the
// calling thread, under the join's lock (it must only queue).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "worker/activation_link.h"

namespace strata::worker {

class ResultJoin {
 public:
  explicit ResultJoin(ActivationLink::ResultCallback deliver)
      : deliver_(std::move(deliver)) {}

  void sent(uint64_t batch_id);
  // False when the answer is for no micro-batch sent (a confused peer).
  bool from_chain(v1::MicroBatchResult answer);
  bool from_last_stage(v1::MicroBatchResult result);
  // An error result (`code`, `message`) for every micro-batch not yet
  // answered; forgets them all.
  void fail_all(int code, const std::string& message);
  // Micro-batches sent and not yet answered to the callback.
  size_t outstanding() const;

 private:
  struct Entry {
    bool acknowledged = false;  // the chain said `delivered`
    bool delivered = false;     // the last stage's result was handed on
  };
  const ActivationLink::ResultCallback deliver_;
  mutable std::mutex mu_;
  std::map<uint64_t, Entry> entries_;  // by batch_id
};

}  // namespace strata::worker
