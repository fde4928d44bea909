// The wire format: what MakeReply puts on the wire, that a reply's status
// survives a round trip through ZeroMQ frames, and what SendMessage costs.
#include "common/wire.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <zmq_addon.hpp>

#include "tests/allocation_counter.h"

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

// SendMessage serializes the header straight into the ZeroMQ frame: no
// string of its own per message (a request header of a data-path push is
// 40-60 bytes, past std::string's inline capacity, so that string was a
// heap allocation and a copy per request). The receiver gets the same
// header. The fewest of 20 sends is counted.
TEST(WireTest, SendMessageAllocatesNoHeaderString) {
  zmq::context_t context(1);
  zmq::socket_t in(context, zmq::socket_type::pair), out(context, zmq::socket_type::pair);
  in.bind("inproc://wire-test");
  out.connect("inproc://wire-test");
  wire::Header request = PushRequest();
  request.set_deadline_unix_ms(1767225600000);
  request.set_sender(3);
  request.set_shard_map_version(9);
  ASSERT_GT(request.ByteSizeLong(), 40u);
  int64_t fewest = INT64_MAX;
  for (int i = 0; i < 20; ++i) {
    Message msg;
    msg.header = request;
    test::StartCountingAllocations();
    const Status sent = SendMessage(out, "", std::move(msg));
    fewest = std::min(fewest, test::StopCountingAllocations());
    ASSERT_TRUE(sent.ok()) << sent;
    std::vector<zmq::message_t> parts;
    ASSERT_TRUE(zmq::recv_multipart(in, std::back_inserter(parts)));
    StatusOr<Message> parsed = ParseMessage(parts, 0);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->header.SerializeAsString(), request.SerializeAsString());
  }
  EXPECT_EQ(fewest, 0) << "heap allocations on the sending thread per SendMessage";
}

}  // namespace
}  // namespace relaxps
