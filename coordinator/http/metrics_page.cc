#include "coordinator/http/metrics_page.h"

namespace strata::coordinator::http {

std::string metrics_page(Cluster& cluster) { return cluster.render_prometheus(); }

}  // namespace strata::coordinator::http
