// Test helper: the big published models' header-only GGUFs
// (model/published_models.h) written as gguf-split parts, for placement and
// `strata plan` tests of split files at no disk cost.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "model/published_models.h"

namespace strata::testing {

// Writes `model` as gguf-split parts PREFIX-0000i-of-0000N.gguf (N = parts):
// the tensors cut into N runs of about equal count, the first part with
// every key, each part with split.no / split.count / split.tensors.count,
// each part header-only. Returns the first part's path.
absl::StatusOr<std::string> write_sparse_split(
    const std::string& prefix, const synth::PublishedModel& model, int parts);

}  // namespace strata::testing
