#include "proto/grpc_ops.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

namespace strata::grpc_ops {

void add_health_and_reflection(grpc::ServerBuilder&) {
  // Read when the server starts (Server::Start).
  grpc::EnableDefaultHealthCheckService(true);
  // grpc++_reflection registers its plugin for every ServerBuilder of the
  // process once loaded (a static initializer; a second registration would
  // be refused as a duplicate service), so this only makes sure it is
  // linked and registered (idempotent).
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
}

void set_serving(grpc::Server& server, bool serving,
                 std::initializer_list<std::string> services) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);  // every service known so far
  health->SetServingStatus("", serving);
  for (const std::string& s : services) health->SetServingStatus(s, serving);
}

void set_serving(grpc::Server& server, const std::string& service,
                 bool serving) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  if (health != nullptr) health->SetServingStatus(service, serving);
}

}  // namespace strata::grpc_ops
