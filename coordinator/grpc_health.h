// grpc.health.v1 on the coordinator's gRPC server (and `strata serve`'s):
// "" and "strata.v1.Inference" are SERVING exactly while the cluster serves
// (Cluster::health() is SERVING) and NOT_SERVING while it starts, loads or
// is degraded, so a Kubernetes `grpc` readiness probe follows the cluster.
// The server must have been built with grpc_ops::add_health_and_reflection
// (start_grpc_server does).
//
// Usage, right after the server started:
//   auto health = publish_cluster_health(*server, cluster);
// and keep `health` until before the server goes.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "coordinator/cluster.h"

namespace strata::coordinator {

// Follows the cluster's state until destroyed. Borrows both: each must
// outlive it.
class ClusterHealthPublisher {
 public:
  ClusterHealthPublisher(grpc::Server& server, Cluster& cluster);
  ~ClusterHealthPublisher();
  ClusterHealthPublisher(const ClusterHealthPublisher&) = delete;
  ClusterHealthPublisher& operator=(const ClusterHealthPublisher&) = delete;

 private:
  Cluster& cluster_;
  int listener_ = -1;
};

std::unique_ptr<ClusterHealthPublisher> publish_cluster_health(
    grpc::Server& server, Cluster& cluster);

}  // namespace strata::coordinator
