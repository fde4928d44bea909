// ChainReplication on its own, as the tail of a chain (it forwards nothing,
// so no successor is needed), over a fake ChainHost that holds one dense
// range and records replies and rejections. Checks the rules of
// chain_replication.h: only the head takes workers' writes; a resent write
// is applied once; a follower applies forwarded updates in sequence order
// and refuses a gap, an older epoch, or anything once fenced; a promotion
// makes it take writes. Nothing here waits: the loop never runs (no
// successor), and no clock is read but to stamp the log.
#include "server/internal/chain_replication.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/optimizer_options.h"
#include "common/payload_codec.h"
#include "consistency/consistency_policy.h"
#include "kernels/optimizer.h"
#include "server/internal/request_codec.h"
#include "tests/test_util.h"

namespace relaxps {
namespace server_internal {
namespace {

constexpr size_t kKeys = 16;
constexpr float kLr = 0.5f;

class FakeHost final : public ChainHost {
 public:
  FakeHost() {
    ConsistencyOptions co;
    co.model = ConsistencyModel::kAsync;
    policy_ = NewConsistencyPolicy(co).value();
    device_ = kernels::NewDevice(kernels::DeviceOptions{}).value();
    DenseShardSpec spec;
    spec.table = "w@0";
    spec.end = kKeys;
    DenseShard* shard = store_->CreateDense(spec).value();
    OptimizerOptions o;
    o.name = "sgd";
    o.lr = kLr;
    range_.table = "w";
    range_.key = 0;
    range_.shard = std::make_unique<DenseShardState>(shard, kernels::NewOptimizer(o).value(),
                                                     policy_.get(), device_.get(), store_.get());
  }

  int id() const override { return 0; }
  uint64_t epoch() const override { return epoch_; }
  const wire::ShardMap& map() const override { return map_; }
  bool registered() const override { return true; }
  WireToken wire_token() const override { return {}; }
  wire::ServerStats* mutable_stats() override { return &stats_; }
  RangeState* DenseRange(const std::string& table, uint64_t key) override {
    return table == "w" && key < kKeys ? &range_ : nullptr;
  }
  void ForEachDenseRange(const std::function<void(RangeState*)>& fn) override { fn(&range_); }
  void Reject(const Request& /*req*/, const Status& status) override {
    rejected.push_back(status);
  }
  void ReplyWith(const Request& /*req*/, Message&& reply) override {
    replies.push_back(std::move(reply));
  }
  bool CheckFrameCount(const Request& req, size_t expected) override {
    return req.msg.frames.size() == expected;
  }
  const float* DecodeGradient(const Request& req, const Frame& frame, size_t n,
                              bool /*check_finite*/) override {
    StatusOr<const float*> v = DecodeFloats(frame, n, req.msg.header.encoding(), &scratch_);
    if (!v.ok()) rejected.push_back(v.status());
    return v.ok() ? *v : nullptr;
  }
  Status ServePull(RangeState* /*range*/, std::shared_ptr<Request> /*req*/,
                   const float* /*push_grads*/) override {
    return InternalError("no pulls in this test");
  }
  void MaybeFlush() override {}
  void ReportStateArrived() override { ++state_reports; }
  ParamStore* store() override { return store_.get(); }
  kernels::Device* device() override { return device_.get(); }
  kernels::Device* update_device() override { return nullptr; }
  BufferPool* buffer_pool() override { return &pool_; }

  // A map at `epoch` whose one range of "w" has the chain `members`.
  void SetMap(uint64_t epoch, const std::vector<int>& members) {
    epoch_ = epoch;
    map_.Clear();
    map_.set_version(epoch);
    map_.set_epoch(epoch);
    for (int i = 0; i < 3; ++i) {
      wire::ServerInfo* s = map_.add_servers();
      s->set_id(i);
      s->set_alive(true);
    }
    wire::TableShards* ts = map_.add_tables();
    ts->mutable_table()->set_name("w");
    ts->mutable_table()->set_size(kKeys);
    wire::DenseRange* r = ts->add_ranges();
    r->set_begin(0);
    r->set_end(kKeys);
    r->set_server(members.front());
    for (int m : members) r->add_chain(m);
  }
  float param(size_t key) { return range_.shard->CopySlot(0, 0, kKeys).data()[key]; }

  RangeState range_;
  std::vector<Status> rejected;
  std::vector<Message> replies;
  wire::ServerStats stats_;
  int state_reports = 0;

 private:
  std::unique_ptr<ParamStore> store_ = NewMemoryStore();
  std::unique_ptr<ConsistencyPolicy> policy_;
  std::unique_ptr<kernels::Device> device_;
  BufferPool pool_;
  uint64_t epoch_ = 1;
  wire::ShardMap map_;
  std::vector<float> scratch_;
};

// A push of `g` on every key of "w" by worker 1 under `push_id`, at `epoch`.
Request Push(float g, uint64_t push_id, uint64_t epoch) {
  Request r;
  wire::Header& h = r.msg.header;
  h.set_type(wire::PUSH);
  h.set_table("w");
  h.set_key_begin(0);
  h.set_key_count(kKeys);
  h.set_sender(1);
  h.set_incarnation(7);
  h.set_push_id(push_id);
  h.set_epoch(epoch);
  std::vector<float> grads(kKeys, g);
  r.msg.frames.push_back(EncodeFloats(FloatBuffer::CopyOf(grads.data(), grads.size()),
                                      wire::ENC_FP32));
  return r;
}

// The same push as forwarded by the predecessor at chain sequence `seq`.
Request Forwarded(float g, uint64_t seq, uint64_t epoch) {
  Request r = Push(g, seq, epoch);
  r.msg.header.set_forwarded(true);
  r.msg.header.set_chain_seq(seq);
  return r;
}

class ChainReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RpcServerOptions ro;
    ro.bind = "tcp://127.0.0.1:*";
    ASSERT_OK_AND_ASSIGN(rpc_, RpcServer::Bind(ro));
    MakeWithLag(0);
  }
  // (Re)makes the replication object, on a fresh replica, with
  // Options::replication_lag `lag` (0: synchronous replication).
  void MakeWithLag(uint64_t lag) {
    ChainReplication::Options options;
    options.replication_lag = lag;
    chain_ = std::make_unique<ChainReplication>(&host_, rpc_.get(), RpcClientOptions(),
                                                RealClock(), options);
    ChainReplication::MakeReplica(&host_.range_, /*has_state=*/true);
  }
  void Install(uint64_t epoch, const std::vector<int>& members) {
    host_.SetMap(epoch, members);
    chain_->FenceIfPending();
    chain_->ApplyRoles(host_.map());
  }

  FakeHost host_;
  std::unique_ptr<RpcServer> rpc_;
  std::unique_ptr<ChainReplication> chain_;
};

TEST_F(ChainReplicationTest, ASoleReplicaAppliesAResentWriteOnce) {
  Install(1, {0});
  chain_->HandleDense(&host_.range_, Push(1.0f, 42, 1));
  chain_->HandleDense(&host_.range_, Push(1.0f, 42, 1));  // The same key again.
  EXPECT_TRUE(host_.rejected.empty());
  ASSERT_EQ(host_.replies.size(), 2u);
  EXPECT_EQ(host_.stats_.duplicates_skipped(), 1u);
  EXPECT_EQ(host_.param(0), -kLr);  // One SGD step, not two.
  EXPECT_EQ(host_.range_.ledger()->Find(1, 7, 42), 1u);
}

TEST_F(ChainReplicationTest, AFollowerRefusesWorkersWritesAndAppliesInOrder) {
  Install(1, {2, 0});  // Server 2 heads; this one (0) is the tail.
  chain_->HandleDense(&host_.range_, Push(1.0f, 1, 1));
  ASSERT_EQ(host_.rejected.size(), 1u);
  EXPECT_EQ(host_.rejected[0].code(), StatusCode::kWrongShard);

  chain_->HandleForwarded(Forwarded(1.0f, 1, 1));
  EXPECT_EQ(host_.replies.size(), 1u);  // The tail acknowledges at once.
  chain_->HandleForwarded(Forwarded(1.0f, 1, 1));  // A resend: acknowledged, not applied.
  EXPECT_EQ(host_.replies.size(), 2u);
  EXPECT_EQ(host_.param(0), -kLr);
  chain_->HandleForwarded(Forwarded(1.0f, 3, 1));  // A gap.
  ASSERT_EQ(host_.rejected.size(), 2u);
  EXPECT_EQ(host_.rejected[1].code(), StatusCode::kInternal);
  EXPECT_EQ(host_.param(0), -kLr);
}

TEST_F(ChainReplicationTest, AnUpdateOfAnOlderEpochIsRefused) {
  Install(2, {2, 0});
  chain_->HandleForwarded(Forwarded(1.0f, 1, 1));
  ASSERT_EQ(host_.rejected.size(), 1u);
  EXPECT_EQ(host_.rejected[0].code(), StatusCode::kAborted);
  EXPECT_EQ(host_.stats_.stale_epoch_refused(), 1u);
  EXPECT_EQ(host_.param(0), 0.0f);
}

TEST_F(ChainReplicationTest, AFencedReplicaHoldsNothingUntilItsStateArrives) {
  Install(1, {2, 0});
  chain_->MarkFencePending();
  EXPECT_FALSE(chain_->awaiting_state());
  Install(2, {2, 0});
  EXPECT_TRUE(chain_->awaiting_state());
  chain_->HandleForwarded(Forwarded(1.0f, 1, 2));
  ASSERT_EQ(host_.rejected.size(), 1u);
  EXPECT_EQ(host_.rejected[0].code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(host_.param(0), 0.0f);
}

TEST_F(ChainReplicationTest, APromotedFollowerTakesWrites) {
  Install(1, {2, 0});
  chain_->HandleForwarded(Forwarded(1.0f, 1, 1));
  Install(2, {0});  // Server 2 died: this one heads (and ends) the chain.
  chain_->HandleDense(&host_.range_, Push(1.0f, 9, 2));
  EXPECT_TRUE(host_.rejected.empty());
  EXPECT_EQ(host_.replies.size(), 2u);
  EXPECT_EQ(host_.param(0), -2 * kLr);
  EXPECT_EQ(host_.range_.chain->applied_seq(), 2u);
}

// Synchronous replication (lag 0): a head whose successor has not
// acknowledged (the map names no endpoint for it, so nothing reaches it)
// answers no push; the successor's acknowledgement releases them.
TEST_F(ChainReplicationTest, SyncHeadAnswersOnlyWhatTheTailHas) {
  Install(1, {0, 1});
  chain_->HandleDense(&host_.range_, Push(1.0f, 1, 1));
  chain_->HandleDense(&host_.range_, Push(1.0f, 2, 1));
  EXPECT_TRUE(host_.rejected.empty());
  EXPECT_TRUE(host_.replies.empty());
  EXPECT_EQ(host_.param(0), -2 * kLr);  // Applied at the head all the same.
  host_.range_.chain->OnAcked(2);
  ASSERT_EQ(host_.replies.size(), 2u);
  // No sequence numbers on a synchronous head's replies.
  EXPECT_EQ(host_.replies[0].header.chain_seq(), 0u);
}

// --replication=async with a lag of 2: a push is answered once update
// seq - 2 is on every replica, so at most two answered updates are missing
// from the successor; replies carry what a worker counts losses by.
TEST_F(ChainReplicationTest, AsyncHeadAnswersAtMostLagUpdatesAheadOfTheTail) {
  MakeWithLag(2);
  Install(1, {0, 1});
  for (uint64_t id = 1; id <= 4; ++id) chain_->HandleDense(&host_.range_, Push(1.0f, id, 1));
  EXPECT_TRUE(host_.rejected.empty());
  // 1 and 2 at once; 3 waits for 1, 4 for 2.
  ASSERT_EQ(host_.replies.size(), 2u);
  EXPECT_EQ(host_.replies[0].header.chain_seq(), 1u);
  EXPECT_EQ(host_.replies[1].header.chain_seq(), 2u);
  EXPECT_EQ(host_.replies[1].header.chain_head_since(), 0u);  // The chain's first head.
  EXPECT_EQ(host_.replies[1].header.epoch(), 1u);
  host_.range_.chain->OnAcked(1);
  ASSERT_EQ(host_.replies.size(), 3u);
  EXPECT_EQ(host_.replies[2].header.chain_seq(), 3u);
  // A resend of an answered push is answered at once with its number.
  chain_->HandleDense(&host_.range_, Push(1.0f, 2, 1));
  ASSERT_EQ(host_.replies.size(), 4u);
  EXPECT_EQ(host_.replies[3].header.chain_seq(), 2u);
  EXPECT_EQ(host_.param(0), -4 * kLr);
  host_.range_.chain->OnAcked(2);
  ASSERT_EQ(host_.replies.size(), 5u);
  EXPECT_EQ(host_.replies[4].header.chain_seq(), 4u);
}

// A follower promoted to head names what it had applied when it took over
// and the epoch at which it did: a worker's pushes the old head answered
// above that number are lost.
TEST_F(ChainReplicationTest, APromotedAsyncHeadNamesWhereItTookOver) {
  MakeWithLag(8);
  Install(1, {2, 0});
  chain_->HandleForwarded(Forwarded(1.0f, 1, 1));
  chain_->HandleForwarded(Forwarded(1.0f, 2, 1));
  host_.replies.clear();
  Install(3, {0});  // Server 2 died; updates it answered after 2 never came.
  chain_->HandleDense(&host_.range_, Push(1.0f, 9, 3));
  ASSERT_EQ(host_.replies.size(), 1u);
  EXPECT_EQ(host_.replies[0].header.chain_seq(), 3u);
  EXPECT_EQ(host_.replies[0].header.chain_head_since(), 2u);
  EXPECT_EQ(host_.replies[0].header.epoch(), 3u);
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
