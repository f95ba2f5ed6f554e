// The standard services every strata gRPC server carries beside its own
// (the coordinator's strata.v1.Inference, a worker's strata.v1.Worker):
//
//   grpc.health.v1.Health   gRPC's implementation (Check and Watch); its
//                           statuses are set by the owner of the server:
//                           "" (the server as a whole) and named services.
//                           Kubernetes `grpc` probes and grpc_health_probe
//                           ask it.
//   server reflection       grpc.reflection.v1alpha.ServerReflection
//                           (grpc++_reflection), so `grpcurl -plaintext
//                           HOST:PORT list` and `describe` work.
//
// Usage:
//   grpc::ServerBuilder builder;  ...
//   grpc_ops::add_health_and_reflection(builder);
//   std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
//   grpc_ops::set_serving(*server, true, {"strata.v1.Worker"});
//
// Threads: any thread may call set_serving while the server lives.
#pragma once

#include <grpcpp/grpcpp.h>

#include <initializer_list>
#include <string>

namespace strata::grpc_ops {

// Adds both services to the server `builder` will build. The health
// service starts with "" SERVING (gRPC's default) until set_serving says
// otherwise; call set_serving right after BuildAndStart. (gRPC turns both
// on for the whole process: every server built afterwards carries them.)
void add_health_and_reflection(grpc::ServerBuilder& builder);

// Sets the status of "" and of each of `services`. No-op on a server built
// without add_health_and_reflection.
void set_serving(grpc::Server& server, bool serving,
                 std::initializer_list<std::string> services = {});
void set_serving(grpc::Server& server, const std::string& service,
                 bool serving);

}  // namespace strata::grpc_ops
