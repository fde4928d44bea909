// The wire format: what MakeReply puts on the wire, that a reply's status
// survives a round trip through ZeroMQ frames, and what SendMessage costs.
#include "common/wire.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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
  Message parsed;
  ASSERT_TRUE(ParseMessage(parts, 0, &parsed).ok());
  EXPECT_TRUE(parsed.header.is_reply());
  EXPECT_EQ(parsed.header.type(), wire::PUSH);
  EXPECT_EQ(parsed.header.request_id(), 123456789u);
  EXPECT_EQ(parsed.header.key_begin(), 4096u);
  EXPECT_TRUE(StatusFromProto(parsed.header.status()).ok());
}

// A failed request's reply still says why.
TEST(WireTest, ErrorReplyKeepsItsStatus) {
  const Message reply = MakeReply(PushRequest(), InvalidArgumentError("gradient has NaN"));
  std::vector<zmq::message_t> parts = Frames(reply);
  Message parsed;
  ASSERT_TRUE(ParseMessage(parts, 0, &parsed).ok());
  const Status s = StatusFromProto(parsed.header.status());
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
    Message parsed;
    ASSERT_TRUE(ParseMessage(parts, 0, &parsed).ok());
    EXPECT_EQ(parsed.header.SerializeAsString(), request.SerializeAsString());
  }
  EXPECT_EQ(fewest, 0) << "heap allocations on the sending thread per SendMessage";
}

// Receive loops parse every message into the same Message (a Header is
// costly to construct and move, several times per request). Nothing of the
// message before may show through: not a field the new header lacks, not a
// payload frame; and a malformed header is an error, not the old one.
TEST(WireTest, ParseIntoAReusedMessageKeepsNothingOfThePreviousOne) {
  Message msg;
  std::vector<zmq::message_t> parts = Frames(
      MakeReply(PushRequest(), InvalidArgumentError("the first reply failed")));
  parts.emplace_back(std::string(64, 'x'));
  ASSERT_TRUE(ParseMessage(parts, 0, &msg).ok());
  ASSERT_TRUE(msg.header.has_status());
  ASSERT_EQ(msg.frames.size(), 1u);

  wire::Header pull;
  pull.set_type(wire::PULL);
  pull.set_request_id(7);
  Message fresh;
  fresh.header = pull;
  parts = Frames(fresh);
  ASSERT_TRUE(ParseMessage(parts, 0, &msg).ok());
  EXPECT_EQ(msg.header.SerializeAsString(), pull.SerializeAsString());
  EXPECT_FALSE(msg.header.has_status());
  EXPECT_TRUE(msg.frames.empty());

  parts.clear();
  parts.emplace_back(std::string("\xff\xff\xff", 3));
  parts.emplace_back(std::string(8, 'y'));
  EXPECT_EQ(ParseMessage(parts, 0, &msg).code(), StatusCode::kInvalidArgument);
  parts.clear();
  EXPECT_EQ(ParseMessage(parts, 0, &msg).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(msg.frames.empty());
}

// A small shared payload is copied when it is sent (two allocations and a
// reference released from ZeroMQ's I/O thread cost more than copying a few
// KiB): what is sent is the buffer as it was at SendMessage, and the buffer
// is the caller's again at once. A large one still goes without a copy.
TEST(WireTest, SmallSharedFramesAreCopiedAtSendLargeOnesAreNot) {
  zmq::context_t context(1);
  zmq::socket_t in(context, zmq::socket_type::pair), out(context, zmq::socket_type::pair);
  in.bind("inproc://wire-copy-test");
  out.connect("inproc://wire-copy-test");
  for (const size_t bytes : {size_t{4096}, Frame::kCopyFramesUpToBytes, size_t{1} << 20}) {
    SCOPED_TRACE(bytes);
    Buffer<float> payload = Buffer<float>::CopyOf(std::vector<float>(bytes / sizeof(float), 1.0f));
    Message msg;
    msg.header = PushRequest();
    msg.frames.push_back(Frame::Share(payload));
    ASSERT_TRUE(SendMessage(out, "", std::move(msg)).ok());
    const bool copied = bytes <= Frame::kCopyFramesUpToBytes;
    // Over inproc ZeroMQ hands the receiver the sender's message as is.
    EXPECT_EQ(payload.owner().use_count(), copied ? 1 : 2);
    payload.data()[0] = 2.0f;
    std::vector<zmq::message_t> parts;
    ASSERT_TRUE(zmq::recv_multipart(in, std::back_inserter(parts)));
    ASSERT_EQ(parts.size(), 2u);
    ASSERT_EQ(parts[1].size(), bytes);
    EXPECT_EQ(parts[1].data<float>()[0], copied ? 1.0f : 2.0f);
    EXPECT_EQ(parts[1].data() == payload.data(), !copied);
  }
}

// A payload whose zero-copy remainder would start just below a 4 KiB
// boundary (a page-aligned buffer: numpy's, page-locked memory) gets a padded
// header that moves it clear; one that starts clear, or is too small to go
// zero-copy, is sent as it is. The model: ZeroMQ's first 8 KiB batch holds
// the framed header and the payload's head, the rest goes from where it
// stands (page offsets measured with strace on 1 MiB requests and replies).
TEST(WireTest, PayloadsWhoseCopyWouldBe4KAliasedGetAPaddedHeader) {
  constexpr size_t kPage = 4096, kBytes = size_t{1} << 20;
  void* block = std::aligned_alloc(kPage, kBytes + 2 * kPage);
  ASSERT_NE(block, nullptr);
  const auto at = [block](size_t offset) {
    return Buffer<uint8_t>::Wrap(static_cast<uint8_t*>(block) + offset, kBytes, nullptr);
  };
  const auto message = [](const Buffer<uint8_t>& payload) {
    Message msg;
    msg.header = PushRequest();
    msg.frames.push_back(Frame::Share(payload));
    return msg;
  };
  const size_t header_bytes = PushRequest().ByteSizeLong();
  // Framed header, then the payload frame's flags and 8-byte length.
  const size_t before = 2 + header_bytes + 9;
  for (size_t offset : {size_t{0}, size_t{16}, size_t{64}, kPage - 64}) {
    SCOPED_TRACE(offset);
    Message msg = message(at(offset));
    const int from = ZeroCopyStartPageOffset(msg, header_bytes);
    EXPECT_EQ(from, static_cast<int>((offset + 8192 - before) % kPage));
    EXPECT_TRUE(CopyIs4KAliased(from));
    ASSERT_TRUE(PadAgainst4KAliasing(&msg, header_bytes));
    const size_t padded = msg.header.ByteSizeLong();
    EXPECT_GT(padded, header_bytes + 500);
    EXPECT_FALSE(CopyIs4KAliased(ZeroCopyStartPageOffset(msg, padded)))
        << ZeroCopyStartPageOffset(msg, padded);
  }
  for (size_t offset : {size_t{256}, kLargeBufferPageOffset, kPage - 512}) {
    SCOPED_TRACE(offset);
    Message msg = message(at(offset));
    EXPECT_FALSE(PadAgainst4KAliasing(&msg, header_bytes));
    EXPECT_FALSE(msg.header.has_pad());
  }
  // Too small for ZeroMQ to send any of it from where it stands.
  Message small = message(at(0).Slice(0, 12000));
  EXPECT_EQ(ZeroCopyStartPageOffset(small, header_bytes), -1);
  EXPECT_FALSE(PadAgainst4KAliasing(&small, header_bytes));
  // A small frame first (a sparse request's ids) moves the large one along.
  Message two = message(at(0).Slice(0, 1000));
  two.frames.push_back(Frame::Share(at(0)));
  EXPECT_EQ(ZeroCopyStartPageOffset(two, header_bytes),
            static_cast<int>((8192 - (before + 1000 + 9)) % kPage));
  std::free(block);
}

// The padding reaches the receiver as an ignored header field: the rest of
// the header and the payload arrive as sent.
TEST(WireTest, APaddedMessageParsesAsSent) {
  zmq::context_t context(1);
  zmq::socket_t in(context, zmq::socket_type::pair), out(context, zmq::socket_type::pair);
  in.bind("inproc://wire-pad-test");
  out.connect("inproc://wire-pad-test");
  constexpr size_t kFloats = size_t{1} << 18;
  float* block = static_cast<float*>(std::aligned_alloc(4096, kFloats * sizeof(float)));
  ASSERT_NE(block, nullptr);
  for (size_t i = 0; i < kFloats; ++i) block[i] = static_cast<float>(i);
  Message msg;
  msg.header = PushRequest();
  msg.frames.push_back(Frame::Share(FloatBuffer::Wrap(block, kFloats, nullptr)));
  ASSERT_TRUE(SendMessage(out, "", std::move(msg)).ok());
  std::vector<zmq::message_t> parts;
  ASSERT_TRUE(zmq::recv_multipart(in, std::back_inserter(parts)));
  Message got;
  ASSERT_TRUE(ParseMessage(parts, 0, &got).ok());
  EXPECT_EQ(got.header.pad().zeros().size(), 512u) << "a page-aligned payload was sent unpadded";
  got.header.clear_pad();
  EXPECT_EQ(got.header.SerializeAsString(), PushRequest().SerializeAsString());
  ASSERT_EQ(got.frames.size(), 1u);
  ASSERT_EQ(got.frames[0].size(), kFloats * sizeof(float));
  EXPECT_EQ(std::memcmp(got.frames[0].data(), block, kFloats * sizeof(float)), 0);
  std::free(block);
}

}  // namespace
}  // namespace relaxps
