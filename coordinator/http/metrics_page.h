// GET /metrics for now: a Prometheus text page from the scheduler's and the
// cluster's state, vLLM's meanings under a `strata:` prefix. A fuller
// registry (histograms of TTFT and latencies) replaces this one function.
#pragma once

#include <string>

#include "coordinator/cluster.h"

namespace strata::coordinator::http {

// text/plain; version=0.0.4
std::string metrics_page(Cluster& cluster);

}  // namespace strata::coordinator::http
