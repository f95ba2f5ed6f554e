#include "coordinator/nccl_links.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace strata::coordinator {

absl::StatusOr<std::vector<bool>> choose_nccl_links(ActivationLinkKind kind,
                                                    const std::vector<StageWorker>& stages) {
  std::vector<bool> out(stages.size(), false);
  if (kind == ActivationLinkKind::kGrpc) return out;
  for (size_t k = 0; k + 1 < stages.size(); ++k) {
    const StageWorker& from = stages[k];
    const StageWorker& to = stages[k + 1];
    const StageWorker* lacking = nullptr;
    for (const StageWorker* w : {&from, &to}) {
      if (lacking == nullptr && !(w->described != nullptr && w->described->nccl_link())) {
        lacking = w;
      }
    }
    if (lacking != nullptr) {
      if (kind == ActivationLinkKind::kNccl) {
        return absl::FailedPreconditionError(absl::StrCat(
            "activation_link: nccl, but ", lacking->label,
            lacking->described != nullptr
                ? " makes no NCCL links (its Describe says nccl_link: false; a worker needs a "
                  "build with NCCL and backend: cuda:N)"
                : " has not described itself yet"));
      }
      continue;  // auto: gRPC between these two
    }
    // Both on one GPU: NCCL refuses two ranks on one.
    const std::string& gpu = from.described->gpu_uuid();
    if (!gpu.empty() && gpu == to.described->gpu_uuid()) {
      if (kind == ActivationLinkKind::kNccl) {
        return absl::FailedPreconditionError(absl::StrCat(
            "activation_link: nccl, but ", from.label, " and ", to.label,
            " run on the same GPU (", gpu, "), and NCCL refuses two ranks on one GPU"));
      }
      continue;  // auto: gRPC between these two
    }
    out[k] = true;
  }
  return out;
}

absl::StatusOr<std::vector<std::optional<v1::ShardInfo>>> link_over_nccl(
    const std::vector<WorkerControl*>& stages, uint64_t shard_id, const std::vector<bool>& nccl,
    absl::Duration call_deadline) {
  const size_t n = stages.size();
  if (nccl.size() != n) {
    return absl::InternalError(
        absl::StrCat("link_over_nccl: ", nccl.size(), " link choices for ", n, " stages"));
  }
  // Each id from the worker that is rank 0 of its communicator.
  std::vector<std::optional<v1::NcclLinkSetup>> setups(n);
  for (size_t k = 0; k + 1 < n; ++k) {
    if (!nccl[k]) continue;
    absl::StatusOr<std::string> forward = stages[k]->make_nccl_id(call_deadline);
    if (!forward.ok()) return forward.status();
    absl::StatusOr<std::string> results = stages[k + 1]->make_nccl_id(call_deadline);
    if (!results.ok()) return results.status();
    v1::NcclLinkSetup setup;
    setup.set_forward_id(*std::move(forward));
    setup.set_results_id(*std::move(results));
    setups[k] = std::move(setup);
  }
  std::vector<std::optional<v1::ShardInfo>> linked(n);
  for (size_t k = n; k-- > 0;) {
    const bool next = setups[k].has_value();
    const bool previous = k > 0 && setups[k - 1].has_value();
    if (!next && !previous) continue;
    v1::LinkNcclRequest req;
    req.set_shard_id(shard_id);
    if (next) *req.mutable_next() = *setups[k];
    if (previous) *req.mutable_previous() = *setups[k - 1];
    absl::StatusOr<v1::ShardInfo> shard = stages[k]->link_nccl(req, call_deadline);
    if (!shard.ok()) return shard.status();
    linked[k] = *std::move(shard);
  }
  return linked;
}

}  // namespace strata::coordinator
