// The in-process ActivationLink: the next stage lives in this process (single-
// node mode, `strata serve`, and tests). Micro-batches are handed over as
// messages, never serialised; the stage runs on the link's own thread, so
// the stages of a chain work on different micro-batches at once, like
// workers on different hosts.
//
// Usage (two stages in one process; results come back to the callback):
//   std::vector<Stage*> stages = {s0.get(), s1.get()};
//   auto link = make_in_process_chain(stages,
//       [](v1::MicroBatchResult r) { ... });
//   link->send(batch);   // runs stage 0, then stage 1, then the callback
//
// Ownership: borrows the Stage (which must outlive the link); owns the link
// to the next stage that `next` makes. Threads: as ActivationLink; the
// callback runs on this link's thread or on a later stage's thread, one
// call at a time, in order. An idle link's thread sleeps on a condition
// variable.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "worker/activation_link.h"
#include "worker/stage.h"
#include "worker/stage_relay.h"

namespace strata::worker {

struct InProcessLinkOptions {
  // Names the stage in messages and traces: "stage 1" by default.
  std::string name = "stage";
};

// A link to `stage`; `next` (empty on the last stage) makes the link from
// `stage` to the stage after it.
std::unique_ptr<ActivationLink> make_in_process_link(
    Stage& stage, LinkFactory next, ActivationLink::ResultCallback on_result,
    const InProcessLinkOptions& options = {});

// A link to stages[0], whose output goes to stages[1], and so on; stage i
// is named "stage i" in messages. stages must not be empty.
std::unique_ptr<ActivationLink> make_in_process_chain(
    std::span<Stage* const> stages, ActivationLink::ResultCallback on_result);

}  // namespace strata::worker
