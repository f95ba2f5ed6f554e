// proto/decode.h: why a request's bytes do not decode, by field path.
#include "proto/decode.h"

#include <string>

#include "gtest/gtest.h"

namespace strata {
namespace {

std::string field(int number, const std::string& payload) {
  std::string out(1, static_cast<char>(number << 3 | 2));
  out.push_back(static_cast<char>(payload.size()));  // < 128 here
  return out + payload;
}

std::string message(const std::string& role, const std::string& content) {
  return field(1, field(1, role) + field(2, content));
}

const google::protobuf::Descriptor& generate() {
  return *v1::GenerateRequest::descriptor();
}

TEST(Decode, NamesTheFieldThatIsNotUtf8WithItsIndex) {
  const std::string bytes =
      field(4, message("user", "ok") + message("assistant", "fine") +
                   message("user", "a\xe2\x82"));
  v1::GenerateRequest r;
  EXPECT_FALSE(r.ParseFromString(bytes));
  EXPECT_EQ(proto_decode::describe_undecodable(generate(), bytes),
            "messages.messages[2].content: not valid UTF-8 (byte 1 of 3); a "
            "string field "
            "must be UTF-8");
  // A repeated string (stop) and a top-level one.
  EXPECT_EQ(
      proto_decode::describe_undecodable(
          generate(), field(2, "hi") + field(9, "x") + field(9, "\xff")),
      "stop[1]: not valid UTF-8 (byte 0 of 1); a string field must be UTF-8");
  // After multi-byte characters, the byte that starts no character ("é" is
  // bytes 0-1, "€" 2-4).
  EXPECT_EQ(proto_decode::describe_undecodable(generate(), field(9, "\xc3\xa9\xe2\x82\xac\xff!")),
            "stop[0]: not valid UTF-8 (byte 5 of 7); a string field must be UTF-8");
}

TEST(Decode, NamesWhereTheWireFormatBreaks) {
  // A length past the end, inside messages[0].
  std::string truncated =
      field(4, field(1, std::string("\x12\x50", 2) + "abc"));
  EXPECT_EQ(proto_decode::describe_undecodable(generate(), truncated),
            "messages.messages[0].content: a length of 80 bytes past the "
            "message's end at "
            "byte 4");
  EXPECT_EQ(
      proto_decode::describe_undecodable(generate(), "\x0f"),
      "request: field 1 of wire type 7 at byte 0 (the bytes are not protobuf)");
  // Valid bytes (an unknown field included): nothing to say.
  EXPECT_EQ(proto_decode::describe_undecodable(
                generate(), field(2, "hi") + std::string("\x9a\x06\x02zz")),
            "");  // field 99
}

}  // namespace
}  // namespace strata
