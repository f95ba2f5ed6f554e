// Requests that do not decode get INVALID_ARGUMENT naming the field, not
// gRPC's INTERNAL with an empty message.
//
// gRPC (1.51) parses a request with protobuf before any handler runs; when
// parsing fails — a proto3 `string` field that is not valid UTF-8, or bytes
// that are not a message at all — it answers INTERNAL with
// InitializationErrorString(), which is empty for proto3. A server
// interceptor sees neither the bytes nor the reason, so the one place to
// answer well is the serialization trait gRPC calls to parse: this header
// specialises grpc::SerializationTraits for every request message strata
// serves (strata.v1.Inference and strata.v1.Worker). Serialize is gRPC's
// own; Deserialize parses as gRPC does (without a copy of the
// request's bytes) and, only when that fails, walks the
// wire bytes with the message's descriptor (describe_undecodable) to name
// the first field at fault:
//   INVALID_ARGUMENT "messages.messages[0].content: not valid UTF-8 (byte 4
//   of 7); a string field must be UTF-8 (strata.v1.GenerateRequest)"
//   INVALID_ARGUMENT "request: not a strata.v1.GenerateRequest: field 15 of
//   wire type 7 at byte 0 (the bytes are not protobuf)"
//
// The specialisations must be seen wherever gRPC instantiates the trait
// for these types (a file that sees gRPC's generic one instead makes its own
// copy of the reading code, and the linker may keep that one), so the
// generated *.grpc.pb.h of strata's services include this header
// (proto/CMakeLists.txt: grpc_cpp_plugin's additional_header_includes).
// The member functions are defined once, in decode.cc. The messages of a
// client stream (MicroBatch on Activations) are parsed by the handler's
// own Read, which only returns false: the handler asks take_last_error()
// why.
#pragma once

#include <grpcpp/impl/codegen/proto_utils.h>

#include <string>

#include "strata/v1/inference.pb.h"
#include "strata/v1/worker.pb.h"

namespace strata::proto_decode {

// Why `bytes` is not a message of type `type`: the first string field that
// is not UTF-8 (its path as "messages.messages[0].content"), or where the
// wire format breaks; "" when the walk finds nothing wrong.
std::string describe_undecodable(const google::protobuf::Descriptor& type,
                                 const std::string& bytes);

// gRPC's parse of `buffer` into `message`, with the failure named
// (INVALID_ARGUMENT) as above; the failure's message is also kept for
// take_last_error().
grpc::Status deserialize(grpc::ByteBuffer* buffer,
                         google::protobuf::Message* message);

// The message of this thread's last failed deserialize(), then "" until
// the next failure. For a stream's Read, which answers only false: gRPC
// parses a synchronous Read on the reading thread, so the handler can say
// why its peer's message did not decode.
std::string take_last_error();

}  // namespace strata::proto_decode

#define STRATA_DECODE_TRAITS(T)                                            \
  template <>                                                              \
  class grpc::SerializationTraits<T, void> {                               \
   public:                                                                 \
    static grpc::Status Serialize(const grpc::protobuf::MessageLite& msg,  \
                                  grpc::ByteBuffer* bb, bool* own_buffer); \
    static grpc::Status Deserialize(grpc::ByteBuffer* buffer, T* msg);     \
  };

// The generated unary handlers (and unary client calls) parse through the
// base type, MessageLite, to share one instantiation: this one covers every
// unary request (a full protobuf Message is named by its descriptor; a
// lite one gets gRPC's own parse).
STRATA_DECODE_TRAITS(grpc::protobuf::MessageLite)
// Each request type too: the server-streaming handlers (Generate, Results)
// and a stream's Read (MicroBatch) parse through the request's own type, and
// so do gRPC's async and callback APIs for every method.
STRATA_DECODE_TRAITS(strata::v1::GenerateRequest)
STRATA_DECODE_TRAITS(strata::v1::TokenizeRequest)
STRATA_DECODE_TRAITS(strata::v1::DetokenizeRequest)
STRATA_DECODE_TRAITS(strata::v1::ListModelsRequest)
STRATA_DECODE_TRAITS(strata::v1::HealthRequest)
STRATA_DECODE_TRAITS(strata::v1::ClusterStatusRequest)
STRATA_DECODE_TRAITS(strata::v1::DescribeRequest)
STRATA_DECODE_TRAITS(strata::v1::LoadShardRequest)
STRATA_DECODE_TRAITS(strata::v1::ResultsRequest)
STRATA_DECODE_TRAITS(strata::v1::MicroBatch)
STRATA_DECODE_TRAITS(strata::v1::FreeSequenceRequest)
STRATA_DECODE_TRAITS(strata::v1::WorkerHealthRequest)
