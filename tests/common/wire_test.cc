// The wire format's reply skeleton: what MakeReply puts on the wire, and
// that a reply's status survives a round trip through ZeroMQ frames.
#include "common/wire.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace relaxps {
namespace {

wire::Header PushRequest() {
  wire::Header h;
  h.set_type(wire::PUSH);
  h.set_request_id(123456789);
  h.set_table("a_table_name_longer_than_fifteen_bytes");
  h.set_key_begin(4096);
  h.set_key_count(1024);
  h.set_clock(17);
  return h;
}

// The header frame of `msg` and its payload frames, as a receiver sees them.
std::vector<zmq::message_t> Frames(const Message& msg) {
  std::vector<zmq::message_t> parts;
  std::string header;
  EXPECT_TRUE(msg.header.SerializeToString(&header));
  parts.emplace_back(header.data(), header.size());
  return parts;
}

// An OK reply carries neither the table nor a status sub-message: every
// reply of the data path paid for both (a string and a sub-message built,
// sent and parsed) and no reader uses them. 12 bytes: type, is_reply,
// request id, key_begin; with the table and status it was 54.
TEST(WireTest, OkReplyHeaderCarriesOnlyWhatReadersUse) {
  const Message reply = MakeReply(PushRequest(), Status::OK());
  EXPECT_LE(reply.header.ByteSizeLong(), 12u);
  std::vector<zmq::message_t> parts = Frames(reply);
  StatusOr<Message> parsed = ParseMessage(parts, 0);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->header.is_reply());
  EXPECT_EQ(parsed->header.type(), wire::PUSH);
  EXPECT_EQ(parsed->header.request_id(), 123456789u);
  EXPECT_EQ(parsed->header.key_begin(), 4096u);
  EXPECT_TRUE(StatusFromProto(parsed->header.status()).ok());
}

// A failed request's reply still says why.
TEST(WireTest, ErrorReplyKeepsItsStatus) {
  const Message reply = MakeReply(PushRequest(), InvalidArgumentError("gradient has NaN"));
  std::vector<zmq::message_t> parts = Frames(reply);
  StatusOr<Message> parsed = ParseMessage(parts, 0);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const Status s = StatusFromProto(parsed->header.status());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "gradient has NaN");
}

}  // namespace
}  // namespace relaxps
