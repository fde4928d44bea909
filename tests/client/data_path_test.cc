// DataPath on its own, over a real PartSender, a FakeTransport (answers
// inline, the test's replier plays the servers) and a FakeClock (no sleeps):
// a dense push split into parts on two servers completes once with both
// parts' status; a failed part fails the request with its server named; a
// dense pull is assembled from both servers' slices; rows are grouped per
// server and reassembled in the caller's order; a push with a non-finite
// value is refused before any part is sent; each acknowledged push part is
// reported with what its reply said.
#include "client/internal/data_path.h"

#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/payload_codec.h"
#include "tests/client/fake_transport.h"
#include "tests/client/test_maps.h"
#include "tests/test_util.h"

namespace relaxps {
namespace client_internal {
namespace {

const std::string kA = "tcp://127.0.0.1:1001";
const std::string kB = "tcp://127.0.0.1:1002";
constexpr int kWidth = 3;

// Servers 0 (kA) and 1 (kB); a dense table "w" of two chunks (server i holds
// chunk i) and a sparse table "e" of 8 buckets over both.
wire::ShardMap Map() {
  wire::ShardMap m = test::ServersMap(1, {kA, kB});
  test::AddDenseTable(&m, "w", 2);
  test::AddSparseTable(&m, "e", 8, kWidth);
  return m;
}

// A role that fails every lost part (the default decisions).
class FailingRole : public recovery::ClientRecovery {
 public:
  const recovery::ClientFeatures& features() const override { return features_; }
  recovery::ClientFeatures features_;
};

// A request the fake servers received.
struct Received {
  int server;
  wire::Header header;
  std::vector<uint64_t> ids;     // PUSH_ROWS / PULL_ROWS.
  std::vector<float> payload;    // Pushes (fp32).
};

class DataPathTest : public ::testing::Test, public PartSender::Host, public DataPath::Host {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(consistency_, NewConsistencyPolicy(ConsistencyOptions()));
    ASSERT_OK(router_.Install(Map()));
    PartSender::Options po;
    po.worker_id = 3;
    po.request_timeout_ms = 5000;
    po.features = role_.features_;
    sender_ = std::make_unique<PartSender>(po, &transport_, &router_, &resender_, &gate_, &role_,
                                           consistency_.get(), this, &clock_);
    MakeDataPath();
    transport_.SetReplier([this](int peer, const Message& req) { return Serve(peer, req); });
  }

  // `part_bytes` 0: parts by owner only (one per server); else a part of
  // more than `split_bytes` goes as parts of about `part_bytes`.
  void MakeDataPath(int64_t part_bytes = 0, int64_t split_bytes = 0) {
    DataPath::Options o;
    o.features = role_.features_;
    o.dense_part_bytes = part_bytes;
    o.dense_split_bytes = split_bytes;
    data_path_ = std::make_unique<DataPath>(o, &router_, sender_.get(), &role_, nullptr,
                                            nullptr, this);
  }

  // PartSender::Host and DataPath::Host.
  Status JobError() const override { return Status::OK(); }
  Status SetMap(const wire::ShardMap& proto) override { return router_.Install(proto).status(); }
  bool FirstFailoverAckIn(uint64_t) override { return true; }
  Message NewRequest(wire::MsgType type, const std::string& table, int64_t clock,
                     uint64_t map_version) const override {
    Message m;
    m.header.set_type(type);
    m.header.set_table(table);
    m.header.set_sender(3);
    m.header.set_clock(clock);
    m.header.set_shard_map_version(map_version);
    return m;
  }
  Status CheckPushFinite(const float* values, size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(values[i])) {
        ++errors_;
        return InvalidArgumentError("not finite");
      }
    }
    return Status::OK();
  }
  void CountError() override { ++errors_; }
  int64_t clock() const override { return 5; }
  void SetParamsClock(int64_t params_clock) override { params_clock_ = params_clock; }
  void PushAcked(recovery::AckedPush push) override { acked_.push_back(std::move(push)); }

  int ServerOf(int peer) { return transport_.EndpointOf(peer) == kA ? 0 : 1; }

  // The fake servers: record the request; answer with failures_[server] if
  // set, else OK (a pull: key k of "w" is k / 2, row `id` of "e" is id * 10
  // + column; params clock 4 on server 0, 2 on server 1; snapshot_seq 10 +
  // server, chain_seq 20 + server).
  std::optional<std::pair<Status, Message>> Serve(int peer, const Message& req) {
    const int server = ServerOf(peer);
    Received r;
    r.server = server;
    r.header = req.header;
    const wire::MsgType type = req.header.type();
    const bool rows = type == wire::PUSH_ROWS || type == wire::PULL_ROWS;
    size_t f = 0;
    if (rows) {
      const uint64_t* ids = req.frames[f].as<uint64_t>();
      r.ids.assign(ids, ids + req.frames[f].size() / sizeof(uint64_t));
      ++f;
    }
    if (f < req.frames.size()) {
      const float* v = req.frames[f].as<float>();
      r.payload.assign(v, v + req.frames[f].size() / sizeof(float));
    }
    received_.push_back(r);
    Message reply;
    if (auto it = failures_.find(server); it != failures_.end()) {
      return std::make_pair(it->second, std::move(reply));
    }
    reply.header.set_params_clock(server == 0 ? 4 : 2);
    reply.header.set_snapshot_seq(10 + server);
    reply.header.set_chain_seq(20 + server);
    if (type == wire::PULL || type == wire::PUSH_PULL) {
      FloatBuffer values = FloatBuffer::Uninitialized(req.header.key_count());
      for (uint64_t i = 0; i < values.size(); ++i) {
        values[i] = static_cast<float>(req.header.key_begin() + i) / 2;
      }
      reply.frames.push_back(EncodeFloats(values, wire::ENC_FP32));
    } else if (type == wire::PULL_ROWS) {
      FloatBuffer values = FloatBuffer::Uninitialized(r.ids.size() * kWidth);
      for (size_t i = 0; i < r.ids.size(); ++i) {
        for (int c = 0; c < kWidth; ++c) values[i * kWidth + c] = RowValue(r.ids[i], c);
      }
      reply.frames.push_back(EncodeFloats(values, wire::ENC_FP32));
    }
    return std::make_pair(Status::OK(), std::move(reply));
  }
  static float RowValue(uint64_t id, int column) { return static_cast<float>(id * 10 + column); }

  // Runs `send` with a callback that records every completion.
  std::vector<Status> Completions(const std::function<void(Client::Callback)>& send) {
    auto got = std::make_shared<std::vector<Status>>();
    send([got](const Status& s) { got->push_back(s); });
    return *got;
  }
  std::vector<Status> PushWhole(std::vector<float>* grads_out = nullptr) {
    FloatBuffer grads = FloatBuffer::Uninitialized(2 * kDenseChunk);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i % 7);
    if (grads_out != nullptr) grads_out->assign(grads.data(), grads.data() + grads.size());
    return Completions([&](Client::Callback done) {
      data_path_->Dense(wire::PUSH, "w", 0, grads.size(), grads, FloatBuffer(), std::move(done));
    });
  }

  FakeClock clock_;
  FakeTransport transport_;
  Router router_{&transport_};
  Resender resender_{&clock_, 10000};
  ServerGate gate_{false};
  FailingRole role_;
  std::unique_ptr<ConsistencyPolicy> consistency_;
  std::unique_ptr<PartSender> sender_;
  std::unique_ptr<DataPath> data_path_;
  std::map<int, Status> failures_;
  std::vector<Received> received_;
  int errors_ = 0;
  std::vector<recovery::AckedPush> acked_;
  int64_t params_clock_ = -1;
};

TEST_F(DataPathTest, DensePushSplitOverTwoServersCompletesOnceWhenBothAck) {
  std::vector<float> grads;
  const std::vector<Status> got = PushWhole(&grads);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_OK(got[0]);
  // One part per server, each with its own chunk of the gradient.
  ASSERT_EQ(received_.size(), 2u);
  for (const Received& r : received_) {
    EXPECT_EQ(r.header.type(), wire::PUSH);
    EXPECT_EQ(r.header.key_begin(), static_cast<uint64_t>(r.server) * kDenseChunk);
    EXPECT_EQ(r.header.key_count(), kDenseChunk);
    EXPECT_EQ(r.header.clock(), 5);
    ASSERT_EQ(r.payload.size(), kDenseChunk);
    EXPECT_EQ(r.payload, std::vector<float>(grads.begin() + r.header.key_begin(),
                                            grads.begin() + r.header.key_begin() + kDenseChunk));
  }
  EXPECT_NE(received_[0].server, received_[1].server);
  EXPECT_EQ(sender_->acked_updates(), 2u);
  EXPECT_EQ(errors_, 0);
}

TEST_F(DataPathTest, EachAcknowledgedPushPartIsReportedWithWhatItsReplySaid) {
  role_.features_.report_acked_pushes = true;
  MakeDataPath();
  std::vector<float> grads;
  ASSERT_EQ(PushWhole(&grads).size(), 1u);
  ASSERT_EQ(acked_.size(), 2u);
  for (const recovery::AckedPush& a : acked_) {
    EXPECT_EQ(a.type, wire::PUSH);
    EXPECT_EQ(a.table, "w");
    EXPECT_EQ(a.key_begin, static_cast<uint64_t>(a.server) * kDenseChunk);
    EXPECT_EQ(a.clock, 5);
    EXPECT_EQ(a.snapshot_seq, static_cast<uint64_t>(10 + a.server));
    EXPECT_EQ(a.chain_seq, static_cast<uint64_t>(20 + a.server));
    ASSERT_EQ(a.grads.size(), kDenseChunk);
    EXPECT_EQ(a.grads[7], grads[a.key_begin + 7]);
  }
  EXPECT_NE(acked_[0].server, acked_[1].server);
}

TEST_F(DataPathTest, AFailedPartFailsTheRequestOnceWithItsServerNamed) {
  failures_[1] = InvalidArgumentError("table w is frozen");
  const std::vector<Status> got = PushWhole();
  ASSERT_EQ(got.size(), 1u);  // Once, after both parts.
  EXPECT_EQ(got[0].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(got[0].ToString().find("server 1 (" + kB + ")"), std::string::npos) << got[0];
  EXPECT_NE(got[0].ToString().find("table w is frozen"), std::string::npos) << got[0];
  EXPECT_EQ(received_.size(), 2u);  // Server 0's part was sent and acknowledged.
  EXPECT_EQ(sender_->acked_updates(), 1u);
  EXPECT_EQ(errors_, 1);
}

TEST_F(DataPathTest, ALostServerThatTheRoleFailsNamesThatServer) {
  failures_[0] = DeadlineExceededError("no reply");
  const std::vector<Status> got = PushWhole();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(got[0].ToString().find("server 0 (" + kA + ")"), std::string::npos) << got[0];
}

TEST_F(DataPathTest, DensePullIsAssembledFromBothServersAtTheOlderClock) {
  FloatBuffer out = FloatBuffer::Uninitialized(2 * kDenseChunk);
  const std::vector<Status> got = Completions([&](Client::Callback done) {
    data_path_->Dense(wire::PULL, "w", 0, out.size(), FloatBuffer(), out, std::move(done));
  });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_OK(got[0]);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i], static_cast<float>(i) / 2) << i;
  }
  EXPECT_EQ(params_clock_, 2);  // The minimum of the parts' clocks.
}

TEST_F(DataPathTest, RowsAreGroupedPerServerAndReassembledInTheCallersOrder) {
  // Ids in no particular order, a duplicate included, over both servers.
  const std::vector<uint64_t> ids_in = {907, 3, 1000003, 42, 3, 77, 123456789, 8, 64, 5};
  KeyBuffer ids = KeyBuffer::Uninitialized(ids_in.size());
  for (size_t i = 0; i < ids_in.size(); ++i) ids[i] = ids_in[i];
  FloatBuffer out = FloatBuffer::Uninitialized(ids_in.size() * kWidth);
  const std::vector<Status> got = Completions([&](Client::Callback done) {
    data_path_->Sparse(wire::PULL_ROWS, "e", ids, FloatBuffer(), out, std::move(done));
  });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_OK(got[0]);
  for (size_t i = 0; i < ids_in.size(); ++i) {
    for (int c = 0; c < kWidth; ++c) {
      EXPECT_EQ(out[i * kWidth + c], RowValue(ids_in[i], c)) << "row " << i << " column " << c;
    }
  }
  // Each server got exactly the rows it owns, in the caller's order.
  std::shared_ptr<const ShardMap> map = router_.map();
  const wire::TableShards* ts = map->FindTable("e");
  ASSERT_NE(ts, nullptr);
  std::map<int, std::vector<uint64_t>> expected;
  for (uint64_t id : ids_in) {
    expected[map->BucketServer(*ts, map->SparseBucket(*ts, id))].push_back(id);
  }
  ASSERT_EQ(expected.size(), 2u) << "the ids should cover both servers";
  std::map<int, std::vector<uint64_t>> sent;
  for (const Received& r : received_) {
    EXPECT_EQ(r.header.type(), wire::PULL_ROWS);
    EXPECT_EQ(r.header.key_count(), r.ids.size());
    std::vector<uint64_t>& s = sent[r.server];
    s.insert(s.end(), r.ids.begin(), r.ids.end());
  }
  EXPECT_EQ(sent, expected);
}

TEST_F(DataPathTest, RowPushSendsEachServerItsRowsAndFailsWithTheFailedServer) {
  const std::vector<uint64_t> ids_in = {11, 12, 13, 14, 15, 16, 17, 18};
  KeyBuffer ids = KeyBuffer::Uninitialized(ids_in.size());
  FloatBuffer grads = FloatBuffer::Uninitialized(ids_in.size() * kWidth);
  for (size_t i = 0; i < ids_in.size(); ++i) {
    ids[i] = ids_in[i];
    for (int c = 0; c < kWidth; ++c) grads[i * kWidth + c] = RowValue(ids_in[i], c);
  }
  failures_[0] = InvalidArgumentError("refused");
  const std::vector<Status> got = Completions([&](Client::Callback done) {
    data_path_->Sparse(wire::PUSH_ROWS, "e", ids, grads, FloatBuffer(), std::move(done));
  });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(got[0].ToString().find("server 0"), std::string::npos) << got[0];
  ASSERT_EQ(received_.size(), 2u);
  for (const Received& r : received_) {
    ASSERT_EQ(r.payload.size(), r.ids.size() * kWidth);
    for (size_t i = 0; i < r.ids.size(); ++i) {
      EXPECT_EQ(r.payload[i * kWidth], RowValue(r.ids[i], 0));  // Each row with its own values.
    }
  }
}

TEST_F(DataPathTest, ANonFinitePushSplitOverServersSendsNothing) {
  FloatBuffer grads = FloatBuffer::Uninitialized(2 * kDenseChunk);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 1;
  grads[kDenseChunk + 5] = NAN;
  const std::vector<Status> got = Completions([&](Client::Callback done) {
    data_path_->Dense(wire::PUSH, "w", 0, grads.size(), grads, FloatBuffer(), std::move(done));
  });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(received_.empty());
}

TEST_F(DataPathTest, ARangeOutsideTheTableIsRefusedBeforeAnythingIsSent) {
  FloatBuffer grads = FloatBuffer::Uninitialized(8);
  const std::vector<Status> got = Completions([&](Client::Callback done) {
    data_path_->Dense(wire::PUSH, "w", 2 * kDenseChunk - 4, grads.size(), grads, FloatBuffer(),
                      std::move(done));
  });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(got[0].ok());
  EXPECT_TRUE(received_.empty());
  EXPECT_EQ(errors_, 1);
}

// Server 0 holds ranges [0, 2 chunks) as two ranges and [3, 4 chunks),
// server 1 holds [2, 3 chunks): a request for the whole table has 3 runs.
wire::ShardMap RunsMap() {
  wire::ShardMap m = test::ServersMap(2, {kA, kB});
  wire::TableShards* t = m.add_tables();
  t->mutable_table()->set_name("w");
  t->mutable_table()->set_size(4 * kDenseChunk);
  const int owner[] = {0, 0, 1, 0};
  for (int i = 0; i < 4; ++i) {
    wire::DenseRange* r = t->add_ranges();
    r->set_begin(i * kDenseChunk);
    r->set_end((i + 1) * kDenseChunk);
    r->set_server(owner[i]);
  }
  return m;
}

TEST_F(DataPathTest, APushSendsOneRequestPerRunOfAdjacentRangesOfAServer) {
  ASSERT_OK(router_.Install(RunsMap()));
  FloatBuffer grads = FloatBuffer::Uninitialized(4 * kDenseChunk);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i % 11);
  const std::vector<Status> got = Completions([&](Client::Callback done) {
    data_path_->Dense(wire::PUSH, "w", 0, grads.size(), grads, FloatBuffer(), std::move(done));
  });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_OK(got[0]);
  // Ranges 0 and 1 of server 0 go as one request; range 3, not adjacent to
  // them, as another.
  ASSERT_EQ(received_.size(), 3u);
  std::map<uint64_t, Received> by_begin;
  for (const Received& r : received_) by_begin[r.header.key_begin()] = r;
  ASSERT_EQ(by_begin.count(0), 1u);
  EXPECT_EQ(by_begin[0].server, 0);
  EXPECT_EQ(by_begin[0].header.key_count(), 2 * kDenseChunk);
  EXPECT_FALSE(by_begin[0].header.push_continues());
  ASSERT_EQ(by_begin[0].payload.size(), 2 * kDenseChunk);
  EXPECT_EQ(by_begin[0].payload[kDenseChunk + 5], grads[kDenseChunk + 5]);
  EXPECT_EQ(by_begin[2 * kDenseChunk].server, 1);
  EXPECT_EQ(by_begin[3 * kDenseChunk].server, 0);
  EXPECT_EQ(by_begin[3 * kDenseChunk].header.key_count(), kDenseChunk);
  // One update per request the servers acknowledged.
  EXPECT_EQ(sender_->acked_updates(), 3u);
}

TEST_F(DataPathTest, APullSpanningTwoRangesOfAServerIsAssembledFromOneReply) {
  ASSERT_OK(router_.Install(RunsMap()));
  FloatBuffer out = FloatBuffer::Uninitialized(3 * kDenseChunk);
  const std::vector<Status> got = Completions([&](Client::Callback done) {
    data_path_->Dense(wire::PULL, "w", 100, out.size(), FloatBuffer(), out, std::move(done));
  });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_OK(got[0]);
  // [100, 2 chunks) from server 0 in one request, [2, 3 chunks) from 1, and
  // the first 100 keys of chunk 3 from 0.
  ASSERT_EQ(received_.size(), 3u);
  EXPECT_EQ(received_[0].server, 0);
  EXPECT_EQ(received_[0].header.key_begin(), 100u);
  EXPECT_EQ(received_[0].header.key_count(), 2 * kDenseChunk - 100);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i], static_cast<float>(100 + i) / 2) << i;
  }
}

TEST_F(DataPathTest, UnderChainRoutingEachRangeKeepsARequestOfItsOwn) {
  // A chained range forwards on its own chain: never merged with another.
  role_.features_.chain_routing = true;
  MakeDataPath();
  ASSERT_OK(router_.Install(RunsMap()));
  FloatBuffer grads = FloatBuffer::Uninitialized(4 * kDenseChunk);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 1.0f;
  const std::vector<Status> got = Completions([&](Client::Callback done) {
    data_path_->Dense(wire::PUSH, "w", 0, grads.size(), grads, FloatBuffer(), std::move(done));
  });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_OK(got[0]);
  ASSERT_EQ(received_.size(), 4u);
  for (const Received& r : received_) EXPECT_EQ(r.header.key_count(), kDenseChunk);
}

// Issue 41: under a policy with exactly-once keys (chain, stateless, hybrid,
// replay) a large part is split as under any other: each part its own key,
// the later parts marked push_continues (one optimizer step and one counted
// update per server), each acknowledged part reported with its mark for the
// update log.
TEST_F(DataPathTest, UnderExactlyOnceKeysALargePushGoesAsPartsEachWithItsOwnKey) {
  role_.features_.exactly_once_keys = true;
  role_.features_.chain_routing = true;
  role_.features_.report_acked_pushes = true;
  MakeDataPath(/*part_bytes=*/1024 * sizeof(float), /*split_bytes=*/2048 * sizeof(float));
  std::vector<float> grads;
  const std::vector<Status> got = PushWhole(&grads);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_OK(got[0]);
  // Each server's chunk (4096 keys) as 4 parts of 1024.
  ASSERT_EQ(received_.size(), 8u);
  std::set<uint64_t> ids;
  std::map<int, int> firsts;  // Server -> parts without push_continues.
  for (const Received& r : received_) {
    EXPECT_EQ(r.header.key_count(), 1024u);
    EXPECT_GT(r.header.push_id(), 0u);
    ids.insert(r.header.push_id());
    const bool first = r.header.key_begin() % kDenseChunk == 0;
    EXPECT_EQ(r.header.push_continues(), !first) << r.header.key_begin();
    if (!r.header.push_continues()) ++firsts[r.server];
    ASSERT_EQ(r.payload.size(), 1024u);
    EXPECT_EQ(r.payload[3], grads[r.header.key_begin() + 3]);
  }
  EXPECT_EQ(ids.size(), 8u) << "a key shared by two parts";
  EXPECT_EQ(firsts, (std::map<int, int>{{0, 1}, {1, 1}}));
  // One update per server, and every part in the log with its key and mark.
  EXPECT_EQ(sender_->acked_updates(), 2u);
  ASSERT_EQ(acked_.size(), 8u);
  for (const recovery::AckedPush& a : acked_) {
    EXPECT_TRUE(ids.count(a.push_id)) << a.push_id;
    EXPECT_EQ(a.push_continues, a.key_begin % kDenseChunk != 0) << a.key_begin;
    EXPECT_EQ(a.grads.size(), 1024u);
  }
}

}  // namespace
}  // namespace client_internal
}  // namespace relaxps
