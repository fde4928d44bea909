// State transfer to a replica joining a chain (--recovery=chain), in pieces.
//
// The old tail copies the state of a dense range or sparse bucket at chain
// sequence `seq` (a copy taken on its loop, so later updates do not leak
// into it) and sends it as a series of CHAIN_SNAPSHOT messages of at most
// `chunk_bytes` of payload each (SnapshotPiece in the header), one at a time:
// the next piece leaves when the previous one is answered, so neither side
// holds more than one piece in flight and no message approaches the
// peers' --max_message_mb. The joiner applies each piece as it arrives
// (dense slots and sparse rows are written in place; a dense range's few
// pending BSP rounds, one gradient per contributing worker, are staged) and
// completes the state with the last piece, which carries the ChainSnapshot
// metadata. Updates the old tail applies meanwhile are logged and sent
// behind the last piece.
//
// OutgoingTransfer: the sender's copy and its progress. IncomingTransfer: the
// joiner's progress through one transfer.
//
// Thread-safety: not synchronized; used only on the server's loop thread.
#ifndef RELAXPS_SERVER_INTERNAL_STATE_TRANSFER_H_
#define RELAXPS_SERVER_INTERNAL_STATE_TRANSFER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/buffer.h"
#include "common/wire.h"
#include "proto/relaxps.pb.h"

namespace relaxps {
namespace server_internal {

class OutgoingTransfer {
 public:
  // A dense snapshot: `frames` of `floats` floats each (SaveState's).
  static std::unique_ptr<OutgoingTransfer> Dense(uint64_t seq, int successor,
                                                 wire::ChainSnapshot meta,
                                                 std::vector<FloatBuffer> frames, size_t floats,
                                                 size_t chunk_bytes);
  // Floats [run.offset, run.offset + run.count) of each of `frames`, for
  // each of `runs` (a range move's copy and catch-up rounds and its
  // cut-over: docs/elastic.md "One move"). The pieces are numbered from
  // `first_index` on; only with `final` does the last piece end the
  // transfer (SnapshotPiece.last, with `meta`; a final transfer of no runs
  // is that piece alone). With `payload` FillPiece asks it for each piece's
  // floats as it makes the piece (the frames are live memory that the
  // server goes on writing: the payload is a copy, or the memory lent until
  // ZeroMQ sent it), else they are shared out of `frames`; the pieces then
  // go key by key, every frame of a stretch of keys in a row (a sender that
  // fills such a group at one instant sends a consistent copy of those
  // keys' slots), else frame by frame.
  struct Run {
    uint64_t offset;
    uint64_t count;
  };
  // Floats [offset, offset + count) of frame `frame` (offsets as in `runs`).
  using Payload = std::function<Frame(uint32_t frame, uint64_t offset, uint64_t count)>;
  static std::unique_ptr<OutgoingTransfer> DenseRuns(uint64_t seq, int successor,
                                                     wire::ChainSnapshot meta,
                                                     std::vector<FloatBuffer> frames,
                                                     const std::vector<Run>& runs,
                                                     size_t chunk_bytes, uint32_t first_index,
                                                     bool final, Payload payload = nullptr);
  // A sparse bucket's snapshot: `ids` and their rows of `row_floats` floats.
  static std::unique_ptr<OutgoingTransfer> Sparse(uint64_t seq, int successor,
                                                  wire::ChainSnapshot meta, KeyBuffer ids,
                                                  FloatBuffer rows, size_t row_floats,
                                                  size_t chunk_bytes);

  uint64_t seq() const { return seq_; }
  int successor() const { return successor_; }
  size_t num_pieces() const { return pieces_.size(); }
  uint64_t bytes() const { return bytes_; }

  // Piece `i`: sets header->snapshot_piece (and chain_snapshot on the last)
  // and appends its payload frames (sharing this transfer's buffers).
  void FillPiece(size_t i, Message* msg) const;

  // Progress, driven by the server: the piece to send next, whether it is
  // in flight, and when it was last sent.
  size_t next = 0;
  bool in_flight = false;
  int64_t last_send_ms = 0;

 private:
  struct Piece {
    uint32_t frame;
    uint64_t offset;  // Floats (dense) or rows (sparse).
    uint64_t count;
  };
  OutgoingTransfer(uint64_t seq, int successor, wire::ChainSnapshot meta)
      : seq_(seq), successor_(successor), meta_(std::move(meta)) {}

  const uint64_t seq_;
  const int successor_;
  const wire::ChainSnapshot meta_;
  std::vector<FloatBuffer> frames_;  // Dense frames, or the sparse rows.
  KeyBuffer ids_;                    // Sparse only.
  size_t row_floats_ = 0;            // Sparse only (0: dense).
  uint32_t first_index_ = 0;         // DenseRuns: the first piece's index.
  bool final_ = true;                // The last piece ends the transfer.
  Payload payload_;                  // DenseRuns: each piece's floats (may be null).
  uint64_t total_ = 0;
  uint64_t bytes_ = 0;
  std::vector<Piece> pieces_;
};

// The joiner's side of one transfer (keyed by its seq).
struct IncomingTransfer {
  uint64_t seq = 0;
  uint32_t next = 0;        // Index of the piece expected next.
  uint64_t received = 0;    // Floats (dense) or rows (sparse) applied so far.
  uint32_t num_frames = 0;  // Dense: of the whole snapshot.
  std::vector<std::vector<float>> staged;  // Dense: pending rounds' gradients.
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_STATE_TRANSFER_H_
