#include "proto/decode.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/stubs/common.h>
#include <google/protobuf/wire_format_lite.h>

#include <map>
#include <vector>

namespace strata::proto_decode {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;

constexpr int kMaxDepth = 64;

// Walks one message's wire bytes; false with *why set at the first fault.
// `prefix` is the path so far ("messages." inside messages); `offset` the
// bytes' position in the whole request.
bool walk(const Descriptor& type, const std::string& bytes,
          const std::string& prefix, size_t offset, int depth,
          std::string* why) {
  if (depth > kMaxDepth) {
    *why = prefix + ": nested deeper than " + std::to_string(kMaxDepth);
    return false;
  }
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t*>(bytes.data()),
      static_cast<int>(bytes.size()));
  std::map<int, int> seen;  // field number -> elements so far (repeated)
  for (;;) {
    const size_t at = offset + static_cast<size_t>(in.CurrentPosition());
    const uint32_t tag = in.ReadTag();
    if (tag == 0) {
      if (in.CurrentPosition() < static_cast<int>(bytes.size())) {
        *why = "request: byte " + std::to_string(at) + " starts no field";
        return false;
      }
      return true;
    }
    const int number = WireFormatLite::GetTagFieldNumber(tag);
    const auto wire = WireFormatLite::GetTagWireType(tag);
    const FieldDescriptor* f = type.FindFieldByNumber(number);
    std::string name =
        prefix + (f != nullptr ? f->name() : "field " + std::to_string(number));
    if (f != nullptr && f->is_repeated())
      name += "[" + std::to_string(seen[number]++) + "]";
    const auto broken = [&](const std::string& what) {
      *why = name + ": " + what + " at byte " + std::to_string(at);
      return false;
    };
    switch (wire) {
      case WireFormatLite::WIRETYPE_VARINT: {
        uint64_t v;
        if (!in.ReadVarint64(&v)) return broken("a truncated varint");
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED64: {
        uint64_t v;
        if (!in.ReadLittleEndian64(&v))
          return broken("a truncated 64-bit value");
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED32: {
        uint32_t v;
        if (!in.ReadLittleEndian32(&v))
          return broken("a truncated 32-bit value");
        break;
      }
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t n;
        if (!in.ReadVarint32(&n)) return broken("a truncated length");
        if (static_cast<int64_t>(n) > in.BytesUntilLimit()) {
          return broken("a length of " + std::to_string(n) +
                        " bytes past the message's end");
        }
        const size_t start = offset + static_cast<size_t>(in.CurrentPosition());
        std::string value;
        if (!in.ReadString(&value, static_cast<int>(n)))
          return broken("truncated bytes");
        if (f == nullptr) break;
        if (f->type() == FieldDescriptor::TYPE_STRING &&
            !google::protobuf::internal::IsStructurallyValidUTF8(
                value.data(), static_cast<int>(value.size()))) {
          // The first byte that starts no valid character, one character
          // at a time (linear; a growing prefix cut characters in two).
          size_t bad = 0;
          while (bad < value.size()) {
            int k = 1;
            while (k <= 4 && bad + k <= value.size() &&
                   !google::protobuf::internal::IsStructurallyValidUTF8(
                       value.data() + bad, k)) {
              ++k;
            }
            if (k > 4 || bad + k > value.size()) break;
            bad += static_cast<size_t>(k);
          }
          *why = name + ": not valid UTF-8 (byte " + std::to_string(bad) +
                 " of " + std::to_string(value.size()) +
                 "); a string field must be UTF-8";
          return false;
        }
        if (f->type() == FieldDescriptor::TYPE_MESSAGE &&
            !walk(*f->message_type(), value, name + ".", start, depth + 1,
                  why)) {
          return false;
        }
        break;
      }
      default:
        *why = "request: field " + std::to_string(number) + " of wire type " +
               std::to_string(static_cast<int>(wire)) + " at byte " +
               std::to_string(at) + " (the bytes are not protobuf)";
        return false;
    }
  }
}

}  // namespace

std::string describe_undecodable(const Descriptor& type,
                                 const std::string& bytes) {
  std::string why;
  walk(type, bytes, "", 0, 0, &why);
  return why;
}

namespace {
thread_local std::string last_error;  // take_last_error()
}  // namespace

std::string take_last_error() {
  std::string out;
  out.swap(last_error);
  return out;
}

grpc::Status deserialize(grpc::ByteBuffer* buffer,
                         google::protobuf::Message* message) {
  if (buffer == nullptr)
    return grpc::Status(grpc::StatusCode::INTERNAL, "No payload");
  bool parsed = false;
  {
    // As gRPC parses (no copy); the bytes are read again only on failure.
    grpc::ProtoBufferReader reader(buffer);
    if (!reader.status().ok()) return reader.status();
    parsed = message->ParseFromZeroCopyStream(&reader);
  }
  if (parsed) {
    buffer->Clear();
    return grpc::Status::OK;
  }
  std::vector<grpc::Slice> slices;
  if (grpc::Status st = buffer->Dump(&slices); !st.ok()) return st;
  std::string bytes;
  bytes.reserve(buffer->Length());
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  buffer->Clear();
  std::string why = describe_undecodable(*message->GetDescriptor(), bytes);
  if (why.empty()) why = "request: protobuf refused it";
  why += " (" + message->GetDescriptor()->full_name() + ")";
  last_error = why;
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
}

}  // namespace strata::proto_decode

#define STRATA_DECODE_TRAITS_DEFINE(T)                                     \
  grpc::Status grpc::SerializationTraits<T, void>::Serialize(              \
      const grpc::protobuf::MessageLite& msg, grpc::ByteBuffer* bb,        \
      bool* own_buffer) {                                                  \
    return grpc::GenericSerialize<grpc::ProtoBufferWriter, T>(msg, bb,     \
                                                              own_buffer); \
  }                                                                        \
  grpc::Status grpc::SerializationTraits<T, void>::Deserialize(            \
      grpc::ByteBuffer* buffer, T* msg) {                                  \
    return strata::proto_decode::deserialize(buffer, msg);                 \
  }

grpc::Status
grpc::SerializationTraits<grpc::protobuf::MessageLite, void>::Serialize(
    const grpc::protobuf::MessageLite& msg, grpc::ByteBuffer* bb,
    bool* own_buffer) {
  return grpc::GenericSerialize<grpc::ProtoBufferWriter,
                                grpc::protobuf::MessageLite>(msg, bb,
                                                             own_buffer);
}
grpc::Status
grpc::SerializationTraits<grpc::protobuf::MessageLite, void>::Deserialize(
    grpc::ByteBuffer* buffer, grpc::protobuf::MessageLite* msg) {
  if (auto* full = dynamic_cast<google::protobuf::Message*>(msg)) {
    return strata::proto_decode::deserialize(buffer, full);
  }
  return grpc::GenericDeserialize<grpc::ProtoBufferReader,
                                  grpc::protobuf::MessageLite>(buffer, msg);
}

STRATA_DECODE_TRAITS_DEFINE(strata::v1::GenerateRequest)
STRATA_DECODE_TRAITS_DEFINE(strata::v1::TokenizeRequest)
STRATA_DECODE_TRAITS_DEFINE(strata::v1::DetokenizeRequest)
STRATA_DECODE_TRAITS_DEFINE(strata::v1::ListModelsRequest)
STRATA_DECODE_TRAITS_DEFINE(strata::v1::HealthRequest)
STRATA_DECODE_TRAITS_DEFINE(strata::v1::ClusterStatusRequest)
STRATA_DECODE_TRAITS_DEFINE(strata::v1::DescribeRequest)
STRATA_DECODE_TRAITS_DEFINE(strata::v1::LoadShardRequest)
STRATA_DECODE_TRAITS_DEFINE(strata::v1::ResultsRequest)
STRATA_DECODE_TRAITS_DEFINE(strata::v1::MicroBatch)
STRATA_DECODE_TRAITS_DEFINE(strata::v1::FreeSequenceRequest)
STRATA_DECODE_TRAITS_DEFINE(strata::v1::WorkerHealthRequest)
