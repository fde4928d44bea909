#include "server/internal/state_transfer.h"

#include <algorithm>
#include <utility>

namespace relaxps {
namespace server_internal {

std::unique_ptr<OutgoingTransfer> OutgoingTransfer::Dense(uint64_t seq, int successor,
                                                          wire::ChainSnapshot meta,
                                                          std::vector<FloatBuffer> frames,
                                                          size_t floats, size_t chunk_bytes) {
  std::vector<Run> whole;
  if (floats > 0) whole.push_back(Run{0, floats});
  return DenseRuns(seq, successor, std::move(meta), std::move(frames), whole, chunk_bytes, 0,
                   /*final=*/true);
}

std::unique_ptr<OutgoingTransfer> OutgoingTransfer::DenseRuns(
    uint64_t seq, int successor, wire::ChainSnapshot meta, std::vector<FloatBuffer> frames,
    const std::vector<Run>& runs, size_t chunk_bytes, uint32_t first_index, bool final,
    Payload payload) {
  std::unique_ptr<OutgoingTransfer> t(new OutgoingTransfer(seq, successor, std::move(meta)));
  const uint64_t per_piece = std::max<uint64_t>(1, chunk_bytes / sizeof(float));
  uint64_t floats = 0;
  for (const Run& run : runs) floats += run.count;
  const uint32_t num_frames = static_cast<uint32_t>(frames.size());
  if (payload != nullptr) {  // Key-major: every frame of a stretch of keys in a row.
    for (const Run& run : runs) {
      for (uint64_t off = 0; off < run.count; off += per_piece) {
        for (uint32_t f = 0; f < num_frames; ++f) {
          t->pieces_.push_back(
              Piece{f, run.offset + off, std::min<uint64_t>(per_piece, run.count - off)});
        }
      }
    }
  } else {
    for (uint32_t f = 0; f < num_frames; ++f) {
      for (const Run& run : runs) {
        for (uint64_t off = 0; off < run.count; off += per_piece) {
          t->pieces_.push_back(
              Piece{f, run.offset + off, std::min<uint64_t>(per_piece, run.count - off)});
        }
      }
    }
  }
  if (t->pieces_.empty() && final) t->pieces_.push_back(Piece{0, 0, 0});  // Metadata only.
  t->total_ = floats * frames.size();
  t->bytes_ = t->total_ * sizeof(float);
  t->frames_ = std::move(frames);
  t->first_index_ = first_index;
  t->final_ = final;
  t->payload_ = std::move(payload);
  return t;
}

std::unique_ptr<OutgoingTransfer> OutgoingTransfer::Sparse(uint64_t seq, int successor,
                                                           wire::ChainSnapshot meta, KeyBuffer ids,
                                                           FloatBuffer rows, size_t row_floats,
                                                           size_t chunk_bytes) {
  std::unique_ptr<OutgoingTransfer> t(new OutgoingTransfer(seq, successor, std::move(meta)));
  const size_t row_bytes = sizeof(uint64_t) + row_floats * sizeof(float);
  const uint64_t per_piece = std::max<uint64_t>(1, chunk_bytes / row_bytes);
  const uint64_t n = ids.size();
  for (uint64_t off = 0; off < n; off += per_piece) {
    t->pieces_.push_back(Piece{0, off, std::min<uint64_t>(per_piece, n - off)});
  }
  if (t->pieces_.empty()) t->pieces_.push_back(Piece{0, 0, 0});  // An untouched bucket.
  t->total_ = n;
  t->bytes_ = n * row_bytes;
  t->row_floats_ = std::max<size_t>(1, row_floats);
  t->ids_ = std::move(ids);
  t->frames_.push_back(std::move(rows));
  return t;
}

void OutgoingTransfer::FillPiece(size_t i, Message* msg) const {
  const Piece& p = pieces_[i];
  const bool last = final_ && i + 1 == pieces_.size();
  wire::SnapshotPiece* sp = msg->header.mutable_snapshot_piece();
  sp->set_index(first_index_ + static_cast<uint32_t>(i));
  sp->set_last(last);
  sp->set_frame(p.frame);
  sp->set_offset(p.offset);
  sp->set_total(total_);
  if (last) *msg->header.mutable_chain_snapshot() = meta_;
  if (row_floats_ == 0) {  // Dense.
    sp->set_num_frames(static_cast<uint32_t>(frames_.size()));
    if (p.count > 0 && payload_ != nullptr) {
      msg->frames.push_back(payload_(p.frame, p.offset, p.count));
    } else if (p.count > 0) {
      msg->frames.push_back(Frame::Share(frames_[p.frame].Slice(p.offset, p.count)));
    }
    return;
  }
  msg->frames.push_back(Frame::Share(ids_.Slice(p.offset, p.count)));
  msg->frames.push_back(
      Frame::Share(frames_[0].Slice(p.offset * row_floats_, p.count * row_floats_)));
}

}  // namespace server_internal
}  // namespace relaxps
