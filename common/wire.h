// Wire messages: a protobuf Header plus raw tensor frames.
//
// A Message is what travels over ZeroMQ: one Header frame (proto/relaxps.proto)
// followed by payload Frames. Outgoing frames can share the memory of a
// Buffer (zero-copy: ZeroMQ releases the reference when the bytes are gone);
// incoming frames own the zmq::message_t they arrived in.
//
// Thread-safety: Messages and Frames are values owned by one thread at a time.
#ifndef RELAXPS_COMMON_WIRE_H_
#define RELAXPS_COMMON_WIRE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "common/buffer.h"
#include "common/status.h"
#include "proto/relaxps.pb.h"

namespace relaxps {

// Version of the wire protocol, sent in every REGISTER. Bump it at any change
// that an older peer would misread; the coordinator refuses a mismatch.
// 2: REGISTER carries the version (builds before it send 0).
// 3: a dense request may span adjacent unreplicated ranges of its server
//    (clients send one request per server: docs/elastic.md, "One request
//    per server"); a server of version 2 refuses it "moved".
constexpr int kProtocolVersion = 3;

// Largest step a shard-map version, job epoch or live-worker-set version may
// take in one control message. A real coordinator moves them by one per
// change; a jump by more is a forged or corrupted message and is refused.
constexpr uint64_t kMaxVersionStep = uint64_t{1} << 20;

// One raw payload frame.
class Frame {
 public:
  Frame() = default;
  // Takes ownership of a received ZeroMQ message.
  explicit Frame(zmq::message_t msg) : msg_(std::move(msg)), has_msg_(true) {}
  // Shares a buffer's memory (no copy).
  template <typename T>
  static Frame Share(const Buffer<T>& buffer) {
    Frame f;
    f.data_ = buffer.data();
    f.size_ = buffer.bytes();
    f.keepalive_ = std::shared_ptr<void>(buffer.owner(), buffer.data());
    return f;
  }
  // Copies bytes.
  static Frame Copy(const void* data, size_t bytes);

  // A buffer sharing this frame's bytes, without copying: a received message
  // is first moved into shared ownership (this frame stays valid and shares
  // them too). For payloads kept after their message is sent on (a chain
  // replica's log of forwarded updates).
  Buffer<uint8_t> ShareBytes();

  Frame(Frame&&) = default;
  Frame& operator=(Frame&&) = default;

  // Whether this frame still owns the ZeroMQ message it arrived in (not
  // shared by ShareBytes, not built from a buffer).
  bool OwnsReceivedMessage() const { return has_msg_; }
  const void* data() const { return has_msg_ ? msg_.data() : data_; }
  size_t size() const { return has_msg_ ? msg_.size() : size_; }
  // Typed view; REQUIRES size() % sizeof(T) == 0 (checked by callers).
  template <typename T>
  const T* as() const { return static_cast<const T*>(data()); }

  // Converts into a zmq message for sending: zero-copy for a shared buffer
  // above kCopyFramesUpToBytes (`release`, if set, is then kept until ZeroMQ
  // frees it), a copy of a smaller one.
  zmq::message_t ToZmq(std::shared_ptr<void> release = nullptr) &&;
  // Whether ToZmq() hands this frame's bytes to ZeroMQ without a copy.
  bool SentWithoutCopy() const { return !has_msg_ && size_ > kCopyFramesUpToBytes; }
  static constexpr size_t kCopyFramesUpToBytes = 8192;

 private:
  zmq::message_t msg_;
  bool has_msg_ = false;
  const void* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<void> keepalive_;
};

struct Message {
  wire::Header header;
  std::vector<Frame> frames;

  // Total payload bytes (frames only).
  size_t PayloadBytes() const;
};

// Status <-> wire.
void StatusToProto(const Status& s, wire::StatusProto* out);
Status StatusFromProto(const wire::StatusProto& p);

// Builds a reply skeleton for a request: same type, request id and
// key_begin, with is_reply set and the given status (none when OK: an absent
// status reads as OK). The table is not repeated.
Message MakeReply(const wire::Header& request, const Status& status);

// A member's message to the coordinator (HEARTBEAT, DEREGISTER) from the
// `role` ("server", "worker") member `id` holding member token `token`
// (RegisterReply.member_token): type, sender, token and heartbeat role and id
// set; the caller adds the rest of the heartbeat.
Message MemberMessage(wire::MsgType type, const std::string& role, int id,
                      const std::string& token);

// Where the kernel starts copying the payload of `msg` from, as an offset in a
// 4 KiB page, or -1 if no frame of it is handed over that way. ZeroMQ copies
// the first 8 KiB of a message's wire bytes (ZMTP framing, the header, the
// payload's head) into one batch; once that batch is written, it hands the
// rest of a frame of at least another 8 KiB to the kernel from where it
// stands, and the kernel copies it into socket pages that start on a page
// boundary when the socket's earlier data has been read. `header_bytes` is
// the header's serialized size.
int ZeroCopyStartPageOffset(const Message& msg, size_t header_bytes);

// True when a copy starting at that page offset runs into 4K aliasing: the
// loads trail the stores of the copy by a few dozen bytes in their 4 KiB
// offsets, and the CPU takes them for dependent (include/relaxps/buffer.h).
bool CopyIs4KAliased(int page_offset);

// Pads the header (wire::Header.pad) of a message whose payload copy would
// be 4K-aliased so that it is not, and returns whether it did (the header's
// cached size is then stale). `header_bytes`: its serialized size before.
// SendMessage calls it: a payload in the caller's memory may lie anywhere (a
// numpy array or a page-locked buffer at a page boundary), and such a copy
// took 800 us per MiB instead of 300.
bool PadAgainst4KAliasing(Message* msg, size_t header_bytes);

// Sends [prefix frames...] + header + payload frames on a socket. `identity`
// is prepended when non-empty (ROUTER sockets). Non-blocking: returns
// Unavailable if the socket would block (peer gone / HWM reached).
// Takes the message's frames (a caller keeps nothing of `msg` it needs).
// `release`, when set, is kept alive until ZeroMQ has freed every frame it
// sends without a copy (UnreadReplies counts those bytes until then), or
// dropped at once if the message does not go.
Status SendMessage(zmq::socket_t& socket, const std::string& identity, Message&& msg,
                   std::shared_ptr<void> release = nullptr);

// Bytes of `msg` that SendMessage hands to ZeroMQ without a copy (frames
// larger than Frame::kCopyFramesUpToBytes not received from ZeroMQ).
size_t ZeroCopyBytes(const Message& msg);

// Parses the frames of one multipart message after any identity frame into
// `out`, taking the payload parts. `out` is overwritten, so a receive loop
// can parse every message into the same one (a Header is costly to construct
// and move). InvalidArgument if the header frame is missing or malformed, or
// names no known message kind or fields this build does not know.
Status ParseMessage(std::vector<zmq::message_t>& parts, size_t first, Message* out);

}  // namespace relaxps

#endif  // RELAXPS_COMMON_WIRE_H_
