// GET /metrics: the cluster's Prometheus text page (Cluster::render_prometheus,
// coordinator/metrics.h: vLLM's meanings under a `strata:` prefix, every
// sample labelled with model_name; docs/operations.md lists them).
#pragma once

#include <string>

#include "coordinator/cluster.h"

namespace strata::coordinator::http {

// text/plain; version=0.0.4
std::string metrics_page(Cluster& cluster);

}  // namespace strata::coordinator::http
