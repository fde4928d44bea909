#include "common/wire.h"

#include "common/member_token.h"

#include <climits>
#include <cstdint>
#include <cstring>
#include <string>

namespace relaxps {
namespace {

// What a zero-copy frame keeps alive until ZeroMQ frees it: its bytes, and
// what else the sender asked for (SendMessage's `release`).
struct Keepalive {
  std::shared_ptr<void> bytes;
  std::shared_ptr<void> release;
};

void ReleaseShared(void* /*data*/, void* hint) { delete static_cast<Keepalive*>(hint); }

}  // namespace

Frame Frame::Copy(const void* data, size_t bytes) {
  return Frame(zmq::message_t(data, bytes));
}

Buffer<uint8_t> Frame::ShareBytes() {
  if (has_msg_) {
    auto owned = std::make_shared<zmq::message_t>(std::move(msg_));
    has_msg_ = false;
    data_ = owned->data();
    size_ = owned->size();
    keepalive_ = std::move(owned);
  }
  if (size_ == 0) return Buffer<uint8_t>();
  return Buffer<uint8_t>::Wrap(static_cast<uint8_t*>(const_cast<void*>(data_)), size_,
                               [keep = keepalive_] {});
}

zmq::message_t Frame::ToZmq(std::shared_ptr<void> release) && {
  if (has_msg_) return std::move(msg_);
  if (size_ == 0) return zmq::message_t();
  // A small frame is copied into the message: cheaper than the two
  // allocations of a shared one (the hint and ZeroMQ's own record) and the
  // release of the reference from ZeroMQ's I/O thread, and ZeroMQ copies a
  // message of up to its 8 KiB batch into the batch in any case.
  if (size_ <= kCopyFramesUpToBytes) {
    zmq::message_t copy(data_, size_);
    keepalive_.reset();
    return copy;
  }
  auto* hint = new Keepalive{std::move(keepalive_), std::move(release)};
  return zmq::message_t(const_cast<void*>(data_), size_, &ReleaseShared, hint);
}

size_t Message::PayloadBytes() const {
  size_t n = 0;
  for (const Frame& f : frames) n += f.size();
  return n;
}

void StatusToProto(const Status& s, wire::StatusProto* out) {
  out->set_code(static_cast<int>(s.code()));
  out->set_message(s.message());
}

Status StatusFromProto(const wire::StatusProto& p) {
  if (p.code() == 0) return Status::OK();
  if (p.code() < 0 || p.code() > static_cast<int>(StatusCode::kMaxCode)) {
    return InternalError("unknown status code " + std::to_string(p.code()) + ": " + p.message());
  }
  return Status(static_cast<StatusCode>(p.code()), p.message());
}

Message MemberMessage(wire::MsgType type, const std::string& role, int id,
                      const std::string& token) {
  Message m;
  m.header.set_type(type);
  m.header.set_sender(id);
  SetMemberToken(token, &m.header);
  wire::HeartbeatRequest* h = m.header.mutable_heartbeat();
  h->set_role(role);
  h->set_id(id);
  return m;
}

Message MakeReply(const wire::Header& request, const Status& status) {
  Message reply;
  wire::Header& h = reply.header;
  h.set_type(request.type());
  h.set_is_reply(true);
  h.set_request_id(request.request_id());
  h.set_key_begin(request.key_begin());
  // An absent status reads as OK (code 0), and no reader looks at a reply's
  // table (the request id names the request): leaving both out spares every
  // reply a string and a sub-message on each side, three of the two dozen
  // heap allocations of a 4 KiB push.
  if (!status.ok()) StatusToProto(status, h.mutable_status());
  return reply;
}

namespace {

constexpr size_t kZmqBatchBytes = 8192;  // ZMQ_OUT_BATCH_SIZE's default.
constexpr size_t kAliasingPadBytes = 512;

// A frame's bytes on the wire (ZMTP 3): a flags byte, a one- or eight-byte
// length, the body.
size_t FramedBytes(size_t body) { return 1 + (body > 255 ? 8 : 1) + body; }

// The cheap test before PadAgainst4KAliasing: most messages carry nothing
// that ZeroMQ would hand to the kernel from where it stands.
bool HasFrameOfAtLeast(const Message& msg, size_t bytes) {
  for (const Frame& f : msg.frames) {
    if (f.size() >= bytes) return true;
  }
  return false;
}

}  // namespace

int ZeroCopyStartPageOffset(const Message& msg, size_t header_bytes) {
  size_t at = FramedBytes(header_bytes);  // Wire bytes before the frame's body.
  for (const Frame& f : msg.frames) {
    at += FramedBytes(f.size()) - f.size();
    // A frame starting in a later batch starts wherever the one before left
    // the batch: not modelled.
    if (at >= kZmqBatchBytes) return -1;
    if (at + f.size() >= 2 * kZmqBatchBytes) {
      const uintptr_t from = reinterpret_cast<uintptr_t>(f.data()) + (kZmqBatchBytes - at);
      return static_cast<int>(from % kAliasingPeriodBytes);
    }
    at += f.size();
  }
  return -1;
}

bool CopyIs4KAliased(int page_offset) {
  // Measured with 1 MiB replies: starts at 4,075 and 4,091 ran at half speed,
  // 43 at two thirds, 107 and up at full speed; the margins are doubled.
  return page_offset >= 0 &&
         (page_offset >= static_cast<int>(kAliasingPeriodBytes) - 256 || page_offset < 128);
}

bool PadAgainst4KAliasing(Message* msg, size_t header_bytes) {
  const int from = ZeroCopyStartPageOffset(*msg, header_bytes);
  if (!CopyIs4KAliased(from)) return false;
  // 512 bytes more before the payload move the start down by a little more
  // than that (the field's tag and length), clear of the window on both sides.
  msg->header.mutable_pad()->set_zeros(std::string(kAliasingPadBytes, '\0'));
  return true;
}

namespace {

Status SendFrames(zmq::socket_t& socket, const std::string& identity, Message& msg,
                  std::shared_ptr<void>& release) {
  // Serialized straight into the frame ZeroMQ sends, not into a string that
  // zmq_send then copies: one heap allocation and one copy fewer per message
  // (and none at all for a header of up to 33 bytes, which ZeroMQ keeps
  // inside the message itself).
  size_t header_bytes = msg.header.ByteSizeLong();
  if (HasFrameOfAtLeast(msg, kZmqBatchBytes) && PadAgainst4KAliasing(&msg, header_bytes)) {
    header_bytes = msg.header.ByteSizeLong();
  }
  if (header_bytes > static_cast<size_t>(INT_MAX)) return InternalError("header too large");
  zmq::message_t header(header_bytes);
  msg.header.SerializeWithCachedSizesToArray(static_cast<uint8_t*>(header.data()));
  try {
    const auto more = zmq::send_flags::sndmore | zmq::send_flags::dontwait;
    const auto last = zmq::send_flags::dontwait;
    if (!identity.empty()) {
      if (!socket.send(zmq::buffer(identity), more)) return UnavailableError("peer would block");
    }
    const bool has_payload = !msg.frames.empty();
    if (!socket.send(header, has_payload ? more : last)) {
      return UnavailableError("peer would block");
    }
    for (size_t i = 0; i < msg.frames.size(); ++i) {
      zmq::message_t m = std::move(msg.frames[i]).ToZmq(release);
      // Once the first frame is queued the rest of a multipart message is
      // accepted atomically by ZeroMQ.
      socket.send(m, i + 1 < msg.frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  } catch (const zmq::error_t& e) {
    return UnavailableError(std::string("zmq send: ") + e.what());
  }
  return Status::OK();
}

}  // namespace

size_t ZeroCopyBytes(const Message& msg) {
  size_t n = 0;
  for (const Frame& f : msg.frames) n += f.SentWithoutCopy() ? f.size() : 0;
  return n;
}

Status SendMessage(zmq::socket_t& socket, const std::string& identity, Message&& msg,
                   std::shared_ptr<void> release) {
  Status s = SendFrames(socket, identity, msg, release);
  // The frames are consumed whether or not they went: a shared buffer is
  // released here, not when the caller's moved-from Message goes.
  msg.frames.clear();
  return s;
}

Status ParseMessage(std::vector<zmq::message_t>& parts, size_t first, Message* out) {
  out->frames.clear();
  if (parts.size() <= first) {
    out->header.Clear();
    return InvalidArgumentError("message has no header frame");
  }
  const zmq::message_t& h = parts[first];
  if (!out->header.ParseFromArray(h.data(), static_cast<int>(h.size()))) {
    out->header.Clear();
    return InvalidArgumentError("malformed header frame (" + std::to_string(h.size()) + " bytes)");
  }
  // Damaged bytes that still parse: a kind no build sends, or fields this
  // build does not know (a newer peer of the same protocol version sends
  // none), are never taken for a valid request.
  // (An error reply to a request that was not understood has no kind.)
  if (!wire::MsgType_IsValid(out->header.type()) ||
      (out->header.type() == wire::MSG_UNKNOWN && !out->header.is_reply())) {
    const int type = out->header.type();
    const uint64_t id = out->header.request_id();
    out->header.Clear();
    out->header.set_request_id(id);  // The error reply can say which request.
    return InvalidArgumentError("header frame of unknown message kind " + std::to_string(type));
  }
  if (!out->header.GetReflection()->GetUnknownFields(out->header).empty()) {
    const uint64_t id = out->header.request_id();
    out->header.Clear();
    out->header.set_request_id(id);
    return InvalidArgumentError("header frame with fields of no known kind (damaged?)");
  }
  out->frames.reserve(parts.size() - first - 1);
  for (size_t i = first + 1; i < parts.size(); ++i) out->frames.emplace_back(std::move(parts[i]));
  return Status::OK();
}

}  // namespace relaxps
