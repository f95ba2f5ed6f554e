#include "coordinator/grpc_health.h"

#include "proto/grpc_ops.h"
#include "spdlog/spdlog.h"

namespace strata::coordinator {

ClusterHealthPublisher::ClusterHealthPublisher(grpc::Server& server,
                                               Cluster& cluster)
    : cluster_(cluster) {
  grpc::Server* s = &server;
  listener_ = cluster_.add_serving_listener([s](bool serving) {
    grpc_ops::set_serving(*s, serving, {"strata.v1.Inference"});
    spdlog::debug("grpc.health.v1: {}", serving ? "SERVING" : "NOT_SERVING");
  });
}

ClusterHealthPublisher::~ClusterHealthPublisher() {
  cluster_.remove_serving_listener(listener_);
}

std::unique_ptr<ClusterHealthPublisher> publish_cluster_health(
    grpc::Server& server, Cluster& cluster) {
  return std::make_unique<ClusterHealthPublisher>(server, cluster);
}

}  // namespace strata::coordinator
