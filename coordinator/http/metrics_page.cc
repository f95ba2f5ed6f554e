#include "coordinator/http/metrics_page.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace strata::coordinator::http {
namespace {

void metric(std::string* page, const char* name, const char* type, const char* help,
            const std::string& labels, double value) {
  absl::StrAppend(page, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name,
                  "{", labels, "} ", value, "\n");
}

}  // namespace

std::string metrics_page(Cluster& cluster) {
  const Scheduler::Stats stats = cluster.scheduler().stats();
  const v1::HealthResponse health = cluster.health();
  // Label values escape backslash, quote and newline.
  const std::string model = absl::StrReplaceAll(
      cluster.model().info.name(), {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
  const std::string labels = absl::StrCat("model_name=\"", model, "\"");
  std::string page;
  metric(&page, "strata:num_requests_running", "gauge",
         "Requests on the workers (in a batch slot).", labels, stats.active);
  metric(&page, "strata:num_requests_waiting", "gauge",
         "Requests waiting for a batch slot.", labels, stats.queued);
  metric(&page, "strata:request_success_total", "counter",
         "Requests that finished (stop or length).", labels,
         static_cast<double>(stats.served));
  metric(&page, "strata:healthy", "gauge",
         "1 while every worker serves, else 0.", labels,
         health.state() == v1::HealthResponse::SERVING ? 1 : 0);
  return page;
}

}  // namespace strata::coordinator::http
