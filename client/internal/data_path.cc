// DataPath (data_path.h): dense and row requests split into parts by the
// shard map, each part sent by PartSender (part_sender.h), re-routed on
// "moved" replies or as the recovery role decides, and reassembled.
#include "client/internal/data_path.h"

#include <algorithm>
#include <cstring>

#include "common/payload_codec.h"

namespace relaxps {
namespace client_internal {
namespace {

// Copies the single payload frame of a pull reply (n floats) into out.
Status DecodeReply(const Message& reply, float* out, size_t n) {
  if (reply.frames.size() != 1) {
    return InvalidArgumentError("reply has " + std::to_string(reply.frames.size()) +
                                " payload frames, expected 1");
  }
  return DecodeFloatsInto(reply.frames[0], reply.header.encoding(), out, n);
}

// A *ZeroCopy request's single reply: its payload frame (n floats) becomes
// *out when it can be read in place (fp32, aligned); false otherwise.
bool HandOver(Message* reply, size_t n, FloatBuffer* out) {
  if (reply->frames.size() != 1 || reply->header.encoding() != wire::ENC_FP32 ||
      reply->frames[0].size() != n * sizeof(float) ||
      reinterpret_cast<uintptr_t>(reply->frames[0].data()) % alignof(float) != 0) {
    return false;
  }
  Buffer<uint8_t> bytes = reply->frames[0].ShareBytes();
  *out = FloatBuffer::Wrap(reinterpret_cast<float*>(bytes.data()), n, [bytes] {});
  return true;
}

// Copies the rows of a PULL_ROWS reply (pos.size() rows of `width` floats)
// to their positions in `out`, straight from the frame when it can be read
// in place.
Status ScatterRows(const Message& reply, const std::vector<uint32_t>& pos, size_t width,
                   float* out) {
  if (reply.frames.size() != 1) {
    return InvalidArgumentError("reply has " + std::to_string(reply.frames.size()) +
                                " payload frames, expected 1");
  }
  std::vector<float> scratch;
  ASSIGN_OR_RETURN(const float* rows, DecodeFloats(reply.frames[0], pos.size() * width,
                                                   reply.header.encoding(), &scratch));
  for (size_t i = 0; i < pos.size(); ++i) {
    std::memcpy(out + pos[i] * width, rows + i * width, width * sizeof(float));
  }
  return Status::OK();
}

// An acknowledged push part as its reply's header describes it (the
// checkpoint and chain positions the role keeps); the caller adds the part.
recovery::AckedPush AckedPushOf(const wire::Header& reply) {
  recovery::AckedPush acked;
  acked.snapshot_seq = reply.snapshot_seq();
  acked.pending = reply.pending();
  acked.chain_seq = reply.chain_seq();
  acked.chain_head_since = reply.chain_head_since();
  acked.chain_head_epoch = reply.epoch();
  return acked;
}

}  // namespace

int DataPath::HolderOf(const std::string& table, uint64_t range_begin, int server) const {
  return features_.chain_routing ? router_->RangeHolder(table, range_begin, server) : server;
}

int DataPath::RowsHolderOf(const std::string& table, uint64_t bucket, int server) const {
  return features_.chain_routing ? router_->BucketHolder(table, bucket) : server;
}

std::vector<DenseSlice> DataPath::RangesOf(const ShardMap& m, const std::string& table,
                                           const DenseSlice& s) {
  if (s.range_end - s.begin >= s.count) return {s};  // One range (the common case).
  StatusOr<std::vector<DenseSlice>> ranges = m.SplitDense(table, s.begin, s.count);
  CHECK(ranges.ok()) << "a part routed by this map: " << ranges.status();
  for (DenseSlice& r : *ranges) r.offset += s.offset;
  return *std::move(ranges);
}

bool DataPath::ServeLocally(int server, const std::shared_ptr<DenseOp>& op, const ShardMap& m,
                            const DenseSlice& part, uint64_t at, uint64_t doubtful_id,
                            bool continues, Status* result) {
  const bool push = op->type != wire::PULL;
  const bool pull = op->type != wire::PUSH;
  LocalFallback::ServingPart serving(fallback_, server);
  if (!serving.local()) return false;
  *result = Status::OK();
  // The local copies are per range (a part may span several of its server).
  for (const DenseSlice& s : RangesOf(m, op->table, part)) {
    const uint64_t in = at + (s.offset - part.offset);  // Within op's buffers.
    StatusOr<int64_t> clock = fallback_->ServeDense(
        serving, op->table, s, push ? op->grads.data() + in : nullptr,
        pull ? op->out.data() + in : nullptr, &op->served_locally, doubtful_id,
        push && doubtful_id != 0 ? op->grads.Slice(in, s.count) : FloatBuffer(),
        /*continues=*/continues && s.offset == part.offset);
    if (!clock.ok()) {
      *result = clock.status();
      break;
    }
    int64_t seen = op->min_params_clock.load();
    while (*clock < seen && !op->min_params_clock.compare_exchange_weak(seen, *clock)) {
    }
  }
  return true;
}

void DataPath::Dense(wire::MsgType type, const std::string& table, uint64_t offset, size_t n,
                     FloatBuffer grads, FloatBuffer out, Client::Callback done,
                     Client::ParamsCallback hand_over) {
  // A range outside the table (or whose end wraps past 2^64) is refused
  // before the cache is asked, a buffer allocated or anything sent.
  std::shared_ptr<const ShardMap> map = router_->map();
  Status range = map != nullptr ? map->CheckDenseRange(table, offset, n) : Status::OK();
  if (!range.ok()) {
    host_->CountError();
    if (hand_over) {
      hand_over(range, FloatBuffer());
    } else {
      done(range);
    }
    return;
  }
  if (hand_over) {
    // The SSP cache answers into a buffer.
    if (type == wire::PULL && cache_ != nullptr) out = NewParams(n);
    done = [hand_over, out](const Status& st) { hand_over(st, st.ok() ? out : FloatBuffer()); };
  }
  Status err = host_->JobError();
  if (!err.ok()) {
    done(err);
    return;
  }
  if (type == wire::PULL && cache_ != nullptr) {
    int64_t params_clock = -1;
    if (cache_->Serve(table, offset, out, host_->clock(), &params_clock)) {
      host_->SetParamsClock(params_clock);
      done(Status::OK());
      return;
    }
  }
  auto op = std::make_shared<DenseOp>();
  op->type = type;
  op->table = table;
  op->grads = std::move(grads);
  op->out = out;
  op->n = n;
  op->hand_over = static_cast<bool>(hand_over);
  op->clock = host_->clock();
  // Parts report the clock their shard reflects; the request reflects the
  // minimum, published when the last part completes.
  if (type != wire::PUSH) {
    done = [this, op, offset, done = std::move(done),
            hand_over = std::move(hand_over)](const Status& st) {
      if (st.ok()) {
        host_->SetParamsClock(op->min_params_clock.load());
        if (cache_ != nullptr) cache_->Fill(op->table, offset, op->out, op->min_params_clock.load());
      }
      if (hand_over) {
        hand_over(st, st.ok() ? op->out : FloatBuffer());
      } else {
        done(st);
      }
    };
  }
  // The map the range was checked with (a second read was a lock and a
  // reference per request), unless none was installed then.
  SendDense(op, map != nullptr ? std::move(map) : router_->map(), offset, 0, n, 0,
            std::move(done));
}

void DataPath::SplitLargeParts(std::vector<DenseSlice>* slices,
                               std::vector<bool>* continues) const {
  continues->clear();
  if (!SplitsParts()) return;
  SplitDenseParts(static_cast<uint64_t>(options_.dense_split_bytes) / sizeof(float),
                  static_cast<uint64_t>(options_.dense_part_bytes) / sizeof(float), slices,
                  continues);
}

void DataPath::SendDense(const std::shared_ptr<DenseOp>& op, std::shared_ptr<const ShardMap> m,
                         uint64_t begin, uint64_t offset, uint64_t count, int reroutes,
                         Client::Callback done, uint64_t push_id, bool continues) {
  StatusOr<std::vector<DenseSlice>> slices = m->SplitDense(op->table, begin, count);
  if (!slices.ok()) {
    host_->CountError();
    done(slices.status());
    return;
  }
  // One request per server: its adjacent ranges' slices as one part (a
  // chained range goes to its own chain's head).
  if (!features_.chain_routing) CoalesceByServer(&*slices);
  std::vector<bool> later;  // Split parts after the first (push_continues).
  if (reroutes == 0) SplitLargeParts(&*slices, &later);
  if (op->type != wire::PULL && reroutes == 0 && slices->size() > 1) {
    Status finite = host_->CheckPushFinite(op->grads.data() + offset, count);
    if (!finite.ok()) {
      done(finite);
      return;
    }
  }
  if (slices->size() != 1 || ServedHere((*slices)[0].server)) {
    EnsureOut(op.get());  // Assembled from parts, or answered here.
  }
  auto join = std::make_shared<Join>(static_cast<int>(slices->size()), std::move(done));
  for (size_t i = 0; i < slices->size(); ++i) {
    const DenseSlice& s = (*slices)[i];
    const bool push_continues =
        op->type != wire::PULL && (!later.empty() ? later[i] : continues && s.offset == 0);
    const uint64_t at = offset + s.offset;  // Position within the request's buffers.
    const bool with_payload = op->type != wire::PULL;
    const FloatBuffer payload = with_payload ? op->grads.Slice(at, s.count) : FloatBuffer();
    // Exactly-once key of the part (ClientFeatures::exactly_once_keys): kept
    // by resends and by a re-route of the same range.
    const uint64_t part_id = with_payload && features_.exactly_once_keys
                                 ? (push_id != 0 ? push_id : next_push_id_.fetch_add(1))
                                 : 0;
    auto make = [this, op, begin = s.begin, count = s.count, payload, version = m->version(),
                 part_id, push_continues] {
      Message req = host_->NewRequest(op->type, op->table, op->clock, version);
      req.header.set_push_id(part_id);
      req.header.set_push_continues(push_continues);
      req.header.set_key_begin(begin);
      req.header.set_key_count(count);
      if (op->type != wire::PULL) req.frames.push_back(EncodeFloats(payload, options_.encoding));
      return req;
    };
    if (ServedHere(s.server)) {
      Status served;
      if (ServeLocally(s.server, op, *m, s, at, 0, push_continues, &served)) {
        join->PartDone(served);
        continue;
      }  // Else it rejoined since the map was read: the part goes to it.
    }
    // The callback keeps the map the part was routed with, not strings made
    // from it: the server's endpoint is only read on failure paths, and two
    // strings per part were a fifth of a dense push's heap allocations.
    parts_->Send(s.server, std::move(make),
               [this, op, join, s, at, reroutes, part_id, push_continues, m](const Status& st,
                                                                             Message&& reply) {
                 const uint64_t version = m->version();
                 const std::string& endpoint = m->server_endpoint(s.server);
                 if (parts_->Rerouted(st, reply, version, reroutes)) {
                   SendDense(op, router_->map(), s.begin, at, s.count, reroutes + 1,
                             [join](const Status& r) { join->PartDone(r); }, part_id,
                             push_continues);
                   return;
                 }
                 if (host_->JobError().ok() && Resender::IsServerLoss(st)) {
                   // The role decides: fail, serve from this worker's copy
                   // (the server goes local), or send to the server that
                   // replaced it.
                   const recovery::LostPartDecision d = role_->OnPartLost(parts_->NewFailedPart(
                       s.server, endpoint, HolderOf(op->table, s.range_begin, s.server), st,
                       false, reroutes));
                   if (d.action == recovery::PartAction::kSendToReplacement &&
                       reroutes < PartSender::kMaxReroutes) {
                     SendDense(op, router_->map(), s.begin, at, s.count, reroutes + 1,
                               [join](const Status& r) { join->PartDone(r); }, 0,
                               push_continues);
                     return;
                   }
                   if (d.action == recovery::PartAction::kServeLocally && fallback_ != nullptr) {
                     fallback_->GoLocal(d.local_server, d.endpoint, LocalFallback::IsStall(st),
                                        st.ToString());
                     // The part was sent: the server may still apply it.
                     EnsureOut(op.get());
                     Status served;
                     if (ServeLocally(d.local_server, op, *m, s, at, part_id, push_continues,
                                      &served)) {
                       join->PartDone(served);
                       return;
                     }
                     // The server is back already (a stall that a probe
                     // answered): the part goes to it again, under its key.
                     if (reroutes < PartSender::kMaxReroutes) {
                       SendDense(op, router_->map(), s.begin, at, s.count, reroutes + 1,
                                 [join](const Status& r) { join->PartDone(r); }, part_id,
                                 push_continues);
                       return;
                     }
                   }
                 }
                 Status result = st;
                 if (result.ok() && op->type != wire::PUSH) {
                   if (op->hand_over && op->out.empty() && HandOver(&reply, s.count, &op->out)) {
                     replies_handed_over_.fetch_add(1);
                   } else {
                     EnsureOut(op.get());  // Its only part: nothing else in flight.
                     result = DecodeReply(reply, op->out.data() + at, s.count);
                   }
                   int64_t seen = op->min_params_clock.load();
                   const int64_t mine = reply.header.params_clock();
                   while (mine < seen && !op->min_params_clock.compare_exchange_weak(seen, mine)) {
                   }
                   if (result.ok() && fallback_ != nullptr) {
                     for (const DenseSlice& r : RangesOf(*m, op->table, s)) {
                       fallback_->RememberDense(op->table, r, op->out.data() + at + (r.offset - s.offset),
                                                mine);
                     }
                   }
                 }
                 if (result.ok() && op->type != wire::PULL && features_.report_acked_pushes) {
                   recovery::AckedPush acked = AckedPushOf(reply.header);
                   acked.server = s.server;
                   acked.type = op->type;
                   acked.table = op->table;
                   acked.key_begin = s.begin;
                   acked.grads = op->grads.Slice(at, s.count);
                   acked.clock = op->clock;
                   acked.push_id = part_id;
                   acked.push_continues = push_continues;
                   host_->PushAcked(std::move(acked));
                 }
                 if (!result.ok()) {
                   host_->CountError();
                   result = result.WithPrefix("server " + std::to_string(s.server) + " (" +
                                              endpoint + ")");
                 }
                 join->PartDone(result);
               });
  }
}

void DataPath::Sparse(wire::MsgType type, const std::string& table, KeyBuffer ids,
                      FloatBuffer grads, FloatBuffer out, Client::Callback done) {
  Status err = host_->JobError();
  if (!err.ok()) {
    done(err);
    return;
  }
  std::shared_ptr<const ShardMap> m = router_->map();
  const wire::TableShards* ts = m->FindTable(table);
  if (ts == nullptr || ts->table().type() != static_cast<int>(TableType::kSparse)) {
    done(ts == nullptr ? NotFoundError("unknown table '" + table + "'")
                       : InvalidArgumentError("table '" + table + "' is not sparse"));
    return;
  }
  const size_t width = ts->table().row_width();
  const size_t n = ids.size();
  if (n == 0) {
    done(Status::OK());
    return;
  }
  const FloatBuffer& values = type == wire::PUSH_ROWS ? grads : out;
  if (values.size() != n * width) {
    done(InvalidArgumentError("expected " + std::to_string(n * width) + " floats for " +
                              std::to_string(n) + " rows of width " + std::to_string(width) +
                              ", got " + std::to_string(values.size())));
    return;
  }
  std::vector<uint32_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = static_cast<uint32_t>(i);
  SendRows(type, table, ids, grads, out, width, host_->clock(), all, std::move(m), 0,
           std::move(done), 0);
}

std::vector<DataPath::RowsPart> DataPath::GroupRows(wire::MsgType type, const KeyBuffer& ids,
                                                   const std::vector<uint32_t>& positions,
                                                   const ShardMap& map,
                                                   const wire::TableShards& shards,
                                                   bool by_bucket) const {
  std::vector<RowsPart> groups(by_bucket ? map.NumBuckets(shards) : map.num_servers());
  for (size_t g = 0; g < groups.size(); ++g) groups[g].group = static_cast<int>(g);
  if (groups.size() == 1) {
    groups[0].positions = positions;  // One owner: nothing to hash.
  } else {
    for (uint32_t p : positions) {
      const int bucket = map.SparseBucket(shards, ids[p]);
      groups[by_bucket ? bucket : map.BucketServer(shards, bucket)].positions.push_back(p);
    }
  }
  const uint64_t part_rows = options_.pull_rows_part > 0 ? options_.pull_rows_part : 0;
  const uint64_t split_rows = static_cast<uint64_t>(std::max<int64_t>(options_.pull_rows_split, 0));
  std::vector<RowsPart> parts;
  for (RowsPart& g : groups) {
    const uint64_t rows = g.positions.size();
    if (rows == 0) continue;
    // Row pushes are never split (one push, one optimizer step).
    const uint64_t n = type == wire::PULL_ROWS ? NumSplitParts(rows, split_rows, part_rows) : 1;
    if (n == 1) {
      parts.push_back(std::move(g));
      continue;
    }
    for (uint64_t i = 0; i < n; ++i) {
      RowsPart p;
      p.group = g.group;
      p.positions.assign(g.positions.begin() + rows * i / n, g.positions.begin() + rows * (i + 1) / n);
      parts.push_back(std::move(p));
    }
  }
  return parts;
}

void DataPath::SendRows(wire::MsgType type, const std::string& table, const KeyBuffer& ids,
                        const FloatBuffer& grads, const FloatBuffer& out, size_t width,
                        int64_t clock, const std::vector<uint32_t>& positions,
                        std::shared_ptr<const ShardMap> m, int reroutes, Client::Callback done,
                        uint64_t push_id, std::shared_ptr<std::atomic<bool>> served_locally) {
  if (served_locally == nullptr) served_locally = std::make_shared<std::atomic<bool>>(false);
  const wire::TableShards* ts = m->FindTable(table);
  if (ts == nullptr) {
    done(NotFoundError("unknown table '" + table + "'"));
    return;
  }
  // Under chain routing each bucket has its own chain, head and exactly-once
  // record.
  const bool by_bucket = features_.chain_routing && ts->buckets_size() > 0;
  std::vector<RowsPart> parts = GroupRows(type, ids, positions, *m, *ts, by_bucket);
  if (type == wire::PUSH_ROWS && reroutes == 0 && parts.size() > 1) {
    Status finite = host_->CheckPushFinite(grads.data(), grads.size());
    if (!finite.ok()) {
      done(finite);
      return;
    }
  }
  auto join = std::make_shared<Join>(static_cast<int>(parts.size()), std::move(done));
  for (RowsPart& rp : parts) {
    const int g = rp.group;
    auto pos = std::make_shared<const std::vector<uint32_t>>(std::move(rp.positions));
    const int s = by_bucket ? m->BucketServer(*ts, g) : g;
    const uint64_t bucket = by_bucket ? static_cast<uint64_t>(g) : 0;
    // Exactly-once key of the part (ClientFeatures::exactly_once_keys), kept
    // by resends and by a re-route of the same bucket; with local copies the
    // key of a row push that may be resent (see DoubtfulRowPush). Under
    // chain routing a table without buckets (a map of an older version) has
    // no exactly-once record: its parts carry none.
    const bool keyed = features_.exactly_once_keys &&
                       (by_bucket || !features_.chain_routing || features_.local_copies);
    const uint64_t part_id = type == wire::PUSH_ROWS && keyed
                                 ? (push_id != 0 ? push_id : next_push_id_.fetch_add(1))
                                 : 0;
    // Positions are distinct and in order: consecutive ones (all of them,
    // or a split pull's part of one server's) are sent and filled straight
    // from and into the caller's buffers.
    const uint32_t first = pos->front();
    const bool consecutive = pos->back() - first + 1 == pos->size();
    KeyBuffer part_ids =
        consecutive ? ids.Slice(first, pos->size()) : KeyBuffer::Uninitialized(pos->size());
    if (!consecutive) {
      for (size_t i = 0; i < pos->size(); ++i) part_ids[i] = ids[(*pos)[i]];
    }
    FloatBuffer part;
    if (type == wire::PUSH_ROWS) {
      part = consecutive ? grads.Slice(first * width, pos->size() * width)
                         : FloatBuffer::Uninitialized(pos->size() * width);
      for (size_t i = 0; !consecutive && i < pos->size(); ++i) {
        std::memcpy(part.data() + i * width, grads.data() + (*pos)[i] * width,
                    width * sizeof(float));
      }
    }
    auto make = [this, type, table, part_ids, part, clock, bucket, part_id,
                 version = m->version()] {
      Message req = host_->NewRequest(type, table, clock, version);
      req.header.set_key_begin(bucket);
      req.header.set_push_id(part_id);
      req.header.set_key_count(part_ids.size());
      req.frames.push_back(Frame::Share(part_ids));
      if (type == wire::PUSH_ROWS) req.frames.push_back(EncodeFloats(part, options_.encoding));
      return req;
    };
    // Local copies: the rows of a local server are served from this
    // worker's row copies (without chains the row owner is that server;
    // under chain routing the head of a bucket whose every replica is lost,
    // which the role took local).
    if (ServedHere(s)) {
      Status served;
      if (fallback_->ServeRows(s, type, table, width, part_ids, part, out, *pos,
                               served_locally.get(), 0, &served)) {
        join->PartDone(served);
        continue;
      }  // Else it rejoined since the map was read: the part goes to it.
    }
    const std::string endpoint = m->server_endpoint(s);
    parts_->Send(s, std::move(make),
               [this, type, table, ids, grads, out, width, clock, join, pos, s, reroutes, part_id,
                part_ids, part, endpoint, consecutive, first, bucket, served_locally, by_bucket,
                version = m->version()](const Status& st, Message&& reply) {
                 if (parts_->Rerouted(st, reply, version, reroutes)) {
                   // Without chains a server's rows of a table share one
                   // exactly-once record, and a "moved" row push was never
                   // applied there (the server checks the record first):
                   // the parts it is split into get keys of their own, so a
                   // later part of it never meets the key of an earlier one
                   // on the server both reach (bucket moves, docs/elastic.md).
                   SendRows(type, table, ids, grads, out, width, clock, *pos, router_->map(),
                            reroutes + 1, [join](const Status& r) { join->PartDone(r); },
                            by_bucket ? part_id : 0, served_locally);
                   return;
                 }
                 if (host_->JobError().ok() && Resender::IsServerLoss(st)) {
                   // The role decides: fail (e.g. a bucket that still has a
                   // live replica: chain routing resent it as long as it
                   // could), or serve from this worker's copy.
                   const recovery::LostPartDecision d = role_->OnPartLost(parts_->NewFailedPart(
                       s, endpoint, RowsHolderOf(table, bucket, s), st, true, reroutes));
                   if (d.action == recovery::PartAction::kServeLocally && fallback_ != nullptr &&
                       d.local_server >= 0) {
                     fallback_->GoLocal(d.local_server, d.endpoint, LocalFallback::IsStall(st),
                                        st.ToString());
                     // The part was sent: the server may still apply it.
                     Status served;
                     if (fallback_->ServeRows(d.local_server, type, table, width, part_ids, part,
                                              out, *pos, served_locally.get(), part_id,
                                              &served)) {
                       join->PartDone(served);
                       return;
                     }
                     // The server is back already: the part goes to it
                     // again, under its key.
                     if (reroutes < PartSender::kMaxReroutes) {
                       SendRows(type, table, ids, grads, out, width, clock, *pos,
                                router_->map(), reroutes + 1,
                                [join](const Status& r) { join->PartDone(r); }, part_id,
                                served_locally);
                       return;
                     }
                   }
                 }
                 Status result = st;
                 if (result.ok() && type == wire::PUSH_ROWS && features_.report_acked_pushes) {
                   recovery::AckedPush acked = AckedPushOf(reply.header);
                   acked.server = s;
                   acked.type = type;
                   acked.table = table;
                   acked.key_begin = bucket;
                   acked.ids = part_ids;
                   acked.grads = part;
                   acked.clock = clock;
                   acked.push_id = part_id;
                   host_->PushAcked(std::move(acked));
                 }
                 if (result.ok() && type == wire::PULL_ROWS) {
                   result = consecutive ? DecodeReply(reply, out.data() + first * width,
                                                      pos->size() * width)
                                        : ScatterRows(reply, *pos, width, out.data());
                   if (result.ok() && fallback_ != nullptr) {  // Keep the rows.
                     for (size_t i = 0; i < pos->size(); ++i) {
                       fallback_->RememberRows(table, width, part_ids.data() + i,
                                               out.data() + (*pos)[i] * width, 1);
                     }
                   }
                 }
                 if (!result.ok()) {
                   host_->CountError();
                   result = result.WithPrefix("server " + std::to_string(s));
                 }
                 join->PartDone(result);
               });
  }
}

}  // namespace client_internal
}  // namespace relaxps
