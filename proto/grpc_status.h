// The one conversion between absl::Status (strata's error vocabulary) and
// grpc::Status (the wire's). Both number their codes as google.rpc.Code
// does, so a code crosses unchanged; the message travels as is, with an
// optional "context: " in front when a gRPC status comes in (which worker,
// which call).
//
// Header-only: the generated-code library (strata_proto) is installed with
// the client library, and this is all it would add.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace strata {

inline grpc::Status to_grpc_status(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

// `context` (may be empty) goes in front of the message: "worker w1:
// LoadShard: <message>".
inline absl::Status to_absl_status(const grpc::Status& status,
                                   std::string_view context = {}) {
  if (status.ok()) return absl::OkStatus();
  std::string message(context);
  if (!message.empty()) message += ": ";
  message += status.error_message();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      message);
}

}  // namespace strata
