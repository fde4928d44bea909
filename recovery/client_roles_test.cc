// The client side of every registered policy (recovery/client_recovery.h),
// each role object made as the client makes it
// (NewRecoveryPolicy(name)->NewClientRecovery(options)) and driven through
// a fake of the client core's mechanisms on hand-made shard maps: the
// features it picks, what it decides for a failed or lost part and before a
// send, and what it makes the core do when a map, a heartbeat or an
// acknowledgement arrives. No process, socket or sleep; time is a FakeClock.
#include "recovery/client_recovery.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/shard_map.h"
#include "proto/relaxps.pb.h"
#include "recovery/hybrid/hybrid_fallback.h"
#include "relaxps/clock.h"
#include "relaxps/recovery_policy.h"

namespace relaxps {
namespace recovery {
namespace {

// Records every mechanism a hook drove, in order; Replay answers wait in
// `replays` until the test runs them.
class FakeClientMechanisms final : public ClientMechanisms {
 public:
  struct ReplayCall {
    int server;
    AckedPush push;
    std::function<void(const Status&, const wire::Header&)> done;
  };

  explicit FakeClientMechanisms(const FakeClock* clock) : clock_(clock) {}

  int64_t NowMs() const override { return clock_->NowMs(); }
  int64_t clock() const override { return 0; }
  std::shared_ptr<const ShardMap> map() const override { return current_map; }
  int worker_id() const override { return 0; }
  EventLog* events() const override { return nullptr; }

  void WatchMap() override { calls.push_back("watch"); }
  void RetryParkedBefore(int64_t ms) override {
    calls.push_back("retry");
    retry_before.push_back(ms);
  }

  bool IsLocal(int server) const override { return local.count(server) > 0; }
  bool LostAt(int server, std::string* endpoint, bool* stalled) const override {
    auto it = local.find(server);
    if (it == local.end()) return false;
    *endpoint = it->second.first;
    *stalled = it->second.second;
    return true;
  }
  void GoLocal(int server, const std::string& endpoint, bool stalled,
               const std::string& /*why*/) override {
    calls.push_back("local " + std::to_string(server) + " " + endpoint +
                     (stalled ? " stalled" : ""));
    local.emplace(server, std::make_pair(endpoint, stalled));
  }
  void Rejoin(int server, bool same_server, const char* /*why*/) override {
    calls.push_back("rejoin " + std::to_string(server) + (same_server ? " same" : ""));
    local.erase(server);
  }
  bool TakeOver(int holder, int spare) override {
    calls.push_back("takeover " + std::to_string(holder) + "->" + std::to_string(spare));
    return local.count(holder) > 0;
  }
  // As LocalReplica: a range's holder is recorded once, and a call is a
  // change of holder.
  void Reassign(const std::string& table, uint64_t range_begin, int server) override {
    const std::string range = table + "@" + std::to_string(range_begin);
    auto [it, first] = holders.emplace(range, server);
    if (first || it->second == server) return;
    it->second = server;
    calls.push_back("reassign " + range + "->" + std::to_string(server));
  }
  void SendSeedCopies(const wire::HeartbeatReply& /*reply*/) override { calls.push_back("seed"); }
  void ProbeStalledServers() override { calls.push_back("probe"); }

  void Replay(int server, const AckedPush& push,
              std::function<void(const Status&, const wire::Header& reply)> done) override {
    calls.push_back("replay " + std::to_string(server) + " #" + std::to_string(push.push_id));
    replays.push_back({server, push, std::move(done)});
  }
  void ReleaseServer(int server) override { calls.push_back("release " + std::to_string(server)); }

  // Answers replays[i] with `status` (and the reply's marker).
  void Answer(size_t i, const Status& status = Status::OK(), uint64_t snapshot_seq = 0,
              bool pending = false) {
    wire::Header reply;
    reply.set_snapshot_seq(snapshot_seq);
    reply.set_pending(pending);
    replays.at(i).done(status, reply);
  }
  int Count(const std::string& event) const {
    return static_cast<int>(std::count(calls.begin(), calls.end(), event));
  }

  std::shared_ptr<const ShardMap> current_map;
  std::map<int, std::pair<std::string, bool>> local;  // server -> (lost at, stalled)
  std::vector<std::string> calls;
  std::map<std::string, int> holders;  // "table@begin" -> the server its copy belongs to
  std::vector<int64_t> retry_before;
  std::vector<ReplayCall> replays;

 private:
  const FakeClock* const clock_;
};

std::string Endpoint(int server, int incarnation = 1) {
  return "tcp://s" + std::to_string(server) + ":" + std::to_string(incarnation);
}

// `servers` live servers and one dense table "w" of servers * kDenseChunk
// keys in chains of `replicas` (range i headed by server i).
wire::ShardMap MapProto(int servers, int replicas) {
  wire::ShardMap m;
  m.set_version(1);
  m.set_epoch(replicas > 1 ? 1 : 0);
  for (int i = 0; i < servers; ++i) {
    wire::ServerInfo* s = m.add_servers();
    s->set_id(i);
    s->set_endpoint(Endpoint(i));
    s->set_alive(true);
    s->set_incarnation(1);
  }
  wire::TableShards* ts = m.add_tables();
  ts->mutable_table()->set_name("w");
  ts->mutable_table()->set_size(servers * kDenseChunk);
  for (const wire::DenseRange& r : ShardMap::AssignDense(servers * kDenseChunk, servers, replicas)) {
    *ts->add_ranges() = r;
  }
  return m;
}

std::shared_ptr<const ShardMap> Install(const wire::ShardMap& proto) {
  StatusOr<ShardMap> m = ShardMap::FromProto(proto);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::make_shared<const ShardMap>(std::move(*m));
}

// The map of a hybrid job of 3 servers, 2 replicas per range, after server 1
// and then server 0 were lost: server 1 was spliced out of its chains (its
// ranges live on), server 0 then held range 0 alone and is stranded with it
// (dead, still its head); server 2 lives.
wire::ShardMap ChainLostMap() {
  wire::ShardMap m = MapProto(3, 2);
  m.mutable_servers(1)->set_alive(false);
  StatusOr<int> spliced = RemoveFromChains(&m, 1, 2);
  EXPECT_TRUE(spliced.ok()) << spliced.status();
  m.mutable_servers(0)->set_alive(false);
  SpliceResult r = SpliceOrStrand(&m, 0);
  EXPECT_EQ(r.stranded.size(), 1u);
  // The premise of the tests: range 0 is on dead server 0 alone, server 1
  // heads nothing.
  EXPECT_EQ(m.tables(0).ranges(0).server(), 0);
  EXPECT_EQ(m.tables(0).ranges(0).chain_size(), 1);
  for (const wire::DenseRange& range : m.tables(0).ranges()) EXPECT_NE(range.server(), 1);
  m.set_version(3);
  return m;
}

class ClientRolesTest : public ::testing::Test {
 protected:
  std::unique_ptr<ClientRecovery> Make(const std::string& policy, bool worker = true,
                                       int64_t update_log_bytes = int64_t{1} << 30) {
    StatusOr<std::unique_ptr<RecoveryPolicy>> p = NewRecoveryPolicy(policy);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    ClientRecoveryOptions options;
    options.worker = worker;
    options.heartbeat_ms = kHeartbeatMs;
    options.local_after_ms = kLocalAfterMs;
    options.update_log_bytes = update_log_bytes;
    std::unique_ptr<ClientRecovery> r = (*p)->NewClientRecovery(options);
    EXPECT_NE(r, nullptr) << policy;
    if (r != nullptr) r->Attach(&mech_);
    return r;
  }

  // A part of `server` (sent to `endpoint`) that failed; `holder` holds its
  // range in `map`.
  static FailedPart Failed(std::shared_ptr<const ShardMap> map, int server, int holder,
                           const std::string& endpoint, bool rows = false,
                           bool can_reroute = true) {
    FailedPart p;
    p.server = server;
    p.endpoint = endpoint;
    p.holder = holder;
    p.error = UnavailableError("server " + std::to_string(server) + " closed the connection");
    p.rows = rows;
    p.can_reroute = can_reroute;
    p.map = std::move(map);
    return p;
  }

  static constexpr int kHeartbeatMs = 150;
  static constexpr int kLocalAfterMs = 321;

  FakeClock clock_;
  FakeClientMechanisms mech_{&clock_};
};

// ---- Features ------------------------------------------------------------

struct ExpectedFeatures {
  const char* policy;
  bool worker;
  bool exactly_once_keys, chain_routing, local_copies, probe_on_disconnect;
  int lost_after_ms;
  bool hold_restarted_servers, report_acked_pushes;
};

TEST_F(ClientRolesTest, EachPolicyPicksItsMechanisms) {
  const int L = kLocalAfterMs;
  const ExpectedFeatures table[] = {
      // policy, worker, keys, chain, local, probe, lost_after, hold, acks
      {"none", true, false, false, false, false, 0, false, false},
      {"checkpoint", true, false, false, false, false, 0, false, false},
      {"chain", true, true, true, false, false, 0, false, false},
      {"stateless", true, true, false, true, true, L, false, false},
      {"hybrid", true, true, true, true, false, 0, false, false},
      {"replay", true, true, false, false, false, 0, true, true},
      // Observers keep no copies and no log.
      {"none", false, false, false, false, false, 0, false, false},
      {"chain", false, true, true, false, false, 0, false, false},
      {"stateless", false, false, false, false, false, 0, false, false},
      {"hybrid", false, true, true, false, false, 0, false, false},
      {"replay", false, true, false, false, false, 0, true, false},
  };
  for (const ExpectedFeatures& e : table) {
    SCOPED_TRACE(std::string(e.policy) + (e.worker ? " worker" : " observer"));
    std::unique_ptr<ClientRecovery> r = Make(e.policy, e.worker);
    ASSERT_NE(r, nullptr);
    const ClientFeatures& f = r->features();
    EXPECT_EQ(f.exactly_once_keys, e.exactly_once_keys);
    EXPECT_EQ(f.chain_routing, e.chain_routing);
    EXPECT_EQ(f.local_copies, e.local_copies);
    EXPECT_EQ(f.probe_on_disconnect, e.probe_on_disconnect);
    EXPECT_EQ(f.lost_after_ms, e.lost_after_ms);
    EXPECT_EQ(f.hold_restarted_servers, e.hold_restarted_servers);
    EXPECT_EQ(f.report_acked_pushes, e.report_acked_pushes);
    // Constant over the role's life: the same object each time.
    EXPECT_EQ(&r->features(), &f);
  }
}

TEST_F(ClientRolesTest, EveryRegisteredPolicyMakesAClientRoleForWorkersAndObservers) {
  for (const std::string& name : RecoveryPolicyNames()) {
    SCOPED_TRACE(name);
    for (bool worker : {true, false}) {
      std::unique_ptr<ClientRecovery> r = Make(name, worker);
      ASSERT_NE(r, nullptr);
      const ClientFeatures& f = r->features();
      // Observers (tools) keep no copies and no log of acknowledged pushes.
      if (!worker) {
        EXPECT_FALSE(f.local_copies);
        EXPECT_FALSE(f.probe_on_disconnect);
        EXPECT_FALSE(f.report_acked_pushes);
      }
      // Local copies need a way to notice a lost server soon.
      if (f.local_copies) {
        EXPECT_TRUE(f.probe_on_disconnect || f.chain_routing);
      }
      // What is resent after a restart (a replay, a re-route) keeps its key.
      if (f.hold_restarted_servers || f.report_acked_pushes || f.chain_routing) {
        EXPECT_TRUE(f.exactly_once_keys);
      }
    }
  }
}

// ---- OnServerFailed ------------------------------------------------------

TEST_F(ClientRolesTest, OnServerFailedFailsParksOrReroutesByPolicy) {
  std::shared_ptr<const ShardMap> map = Install(MapProto(3, 2));
  const std::pair<const char*, PartAction> expected[] = {
      {"none", PartAction::kFail},          {"checkpoint", PartAction::kPark},
      {"chain", PartAction::kReroute},      {"stateless", PartAction::kFail},
      {"hybrid", PartAction::kReroute},     {"replay", PartAction::kPark},
  };
  for (const auto& [policy, action] : expected) {
    SCOPED_TRACE(policy);
    std::unique_ptr<ClientRecovery> r = Make(policy);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->OnServerFailed(Failed(map, 1, 1, Endpoint(1))), action);
    EXPECT_EQ(r->OnServerFailed(Failed(map, 0, 0, Endpoint(0), /*rows=*/true)), action);
  }
}

// ---- BeforeSend ----------------------------------------------------------

TEST_F(ClientRolesTest, HybridServesLocallyOnlyWhenTheWholeChainIsLost) {
  std::unique_ptr<ClientRecovery> r = Make("hybrid");
  ASSERT_NE(r, nullptr);
  const std::shared_ptr<const ShardMap> healthy = Install(MapProto(3, 2));
  for (int s = 0; s < 3; ++s) EXPECT_EQ(r->BeforeSend(s, *healthy), PartAction::kSend) << s;

  // Server 1 dead but spliced out (its ranges have a live replica): send.
  wire::ShardMap one_lost = MapProto(3, 2);
  one_lost.mutable_servers(1)->set_alive(false);
  ASSERT_TRUE(RemoveFromChains(&one_lost, 1, 2).ok());
  const std::shared_ptr<const ShardMap> spliced = Install(one_lost);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(r->BeforeSend(s, *spliced), PartAction::kSend) << s;

  // Server 0 dead while it still heads range 0 alone: that chain is lost.
  const std::shared_ptr<const ShardMap> lost = Install(ChainLostMap());
  EXPECT_EQ(r->BeforeSend(0, *lost), PartAction::kServeLocally);
  EXPECT_EQ(r->BeforeSend(1, *lost), PartAction::kSend);
  EXPECT_EQ(r->BeforeSend(2, *lost), PartAction::kSend);
  // A server the map does not know is not stranded.
  EXPECT_EQ(r->BeforeSend(7, *lost), PartAction::kSend);
  EXPECT_EQ(r->BeforeSend(-1, *lost), PartAction::kSend);

  // Observers have no copies: they always send.
  std::unique_ptr<ClientRecovery> observer = Make("hybrid", /*worker=*/false);
  ASSERT_NE(observer, nullptr);
  EXPECT_EQ(observer->BeforeSend(0, *lost), PartAction::kSend);
}

TEST_F(ClientRolesTest, OtherPoliciesAlwaysSend) {
  const std::shared_ptr<const ShardMap> lost = Install(ChainLostMap());
  for (const char* policy : {"none", "checkpoint", "chain", "stateless", "replay"}) {
    SCOPED_TRACE(policy);
    std::unique_ptr<ClientRecovery> r = Make(policy);
    ASSERT_NE(r, nullptr);
    for (int s = 0; s < 3; ++s) EXPECT_EQ(r->BeforeSend(s, *lost), PartAction::kSend) << s;
  }
}

// ---- OnPartLost ----------------------------------------------------------

TEST_F(ClientRolesTest, PoliciesWithoutLocalCopiesFailALostPart) {
  const std::shared_ptr<const ShardMap> lost = Install(ChainLostMap());
  for (const char* policy : {"none", "checkpoint", "chain", "replay"}) {
    SCOPED_TRACE(policy);
    std::unique_ptr<ClientRecovery> r = Make(policy);
    ASSERT_NE(r, nullptr);
    const LostPartDecision d = r->OnPartLost(Failed(lost, 0, 0, Endpoint(0)));
    EXPECT_EQ(d.action, PartAction::kFail);
    EXPECT_EQ(d.local_server, -1);
  }
  EXPECT_TRUE(mech_.calls.empty());
}

TEST_F(ClientRolesTest, HybridGoesLocalForALostPartOnlyIfItsHolderIsStranded) {
  std::unique_ptr<ClientRecovery> r = Make("hybrid");
  ASSERT_NE(r, nullptr);
  const std::shared_ptr<const ShardMap> lost = Install(ChainLostMap());

  // Range 0 has no replica left: serve it locally, holder 0 goes local at the
  // endpoint the map names for it.
  LostPartDecision d = r->OnPartLost(Failed(lost, 0, 0, Endpoint(0)));
  EXPECT_EQ(d.action, PartAction::kServeLocally);
  EXPECT_EQ(d.local_server, 0);
  EXPECT_EQ(d.endpoint, Endpoint(0));
  // The decision is on the holder (the current head), not the server the
  // part was sent to.
  d = r->OnPartLost(Failed(lost, 1, 0, Endpoint(1)));
  EXPECT_EQ(d.action, PartAction::kServeLocally);
  EXPECT_EQ(d.local_server, 0);

  // A part whose range still has a live holder keeps its error.
  EXPECT_EQ(r->OnPartLost(Failed(lost, 1, 2, Endpoint(1))).action, PartAction::kFail);
  EXPECT_EQ(r->OnPartLost(Failed(lost, 1, -1, Endpoint(1))).action, PartAction::kFail);
  const std::shared_ptr<const ShardMap> healthy = Install(MapProto(3, 2));
  EXPECT_EQ(r->OnPartLost(Failed(healthy, 0, 0, Endpoint(0))).action, PartAction::kFail);

  std::unique_ptr<ClientRecovery> observer = Make("hybrid", /*worker=*/false);
  ASSERT_NE(observer, nullptr);
  EXPECT_EQ(observer->OnPartLost(Failed(lost, 0, 0, Endpoint(0))).action, PartAction::kFail);
  // Deciding drives no mechanism.
  EXPECT_TRUE(mech_.calls.empty());
}

TEST_F(ClientRolesTest, StatelessSendsADensePartToAReplacementElseServesItLocally) {
  std::unique_ptr<ClientRecovery> r = Make("stateless");
  ASSERT_NE(r, nullptr);
  // Server 1 was replaced: alive at a new endpoint.
  wire::ShardMap replaced = MapProto(2, 1);
  replaced.mutable_servers(1)->set_endpoint(Endpoint(1, 2));
  const std::shared_ptr<const ShardMap> m = Install(replaced);

  EXPECT_EQ(r->OnPartLost(Failed(m, 1, 1, Endpoint(1))).action, PartAction::kSendToReplacement);

  // Served locally, by the holder, at the endpoint it was lost on: a row
  // part, a part out of reroutes, a part sent to the current endpoint.
  for (const FailedPart& p : {Failed(m, 1, 1, Endpoint(1), /*rows=*/true),
                              Failed(m, 1, 1, Endpoint(1), false, /*can_reroute=*/false),
                              Failed(m, 1, 1, Endpoint(1, 2))}) {
    const LostPartDecision d = r->OnPartLost(p);
    EXPECT_EQ(d.action, PartAction::kServeLocally);
    EXPECT_EQ(d.local_server, 1);
    EXPECT_EQ(d.endpoint, p.endpoint);
  }

  // A new endpoint the map shows dead is no replacement.
  wire::ShardMap dead = replaced;
  dead.mutable_servers(1)->set_alive(false);
  EXPECT_EQ(r->OnPartLost(Failed(Install(dead), 1, 1, Endpoint(1))).action,
            PartAction::kServeLocally);
  // Nor is an empty one.
  wire::ShardMap gone = MapProto(2, 1);
  gone.mutable_servers(1)->set_endpoint("");
  EXPECT_EQ(r->OnPartLost(Failed(Install(gone), 1, 1, Endpoint(1))).action,
            PartAction::kServeLocally);

  std::unique_ptr<ClientRecovery> observer = Make("stateless", /*worker=*/false);
  ASSERT_NE(observer, nullptr);
  EXPECT_EQ(observer->OnPartLost(Failed(m, 1, 1, Endpoint(1))).action, PartAction::kFail);
}

// ---- Events: chain ---------------------------------------------------------

TEST_F(ClientRolesTest, ChainWatchesTheMapAndRetriesPartsParkedForAHeartbeat) {
  for (const char* policy : {"chain", "hybrid"}) {
    SCOPED_TRACE(policy);
    mech_.calls.clear();
    mech_.retry_before.clear();
    std::unique_ptr<ClientRecovery> r = Make(policy);
    ASSERT_NE(r, nullptr);
    r->OnStarted();
    EXPECT_EQ(mech_.calls, std::vector<std::string>({"watch"}));

    r->OnHeartbeat();
    clock_.AdvanceMs(1000);
    r->OnHeartbeat();
    EXPECT_EQ(mech_.calls, std::vector<std::string>({"watch", "watch", "retry", "watch", "retry"}));
    // The parts parked at least a heartbeat period ago, on the client's clock.
    ASSERT_EQ(mech_.retry_before.size(), 2u);
    EXPECT_EQ(mech_.retry_before[1] - mech_.retry_before[0], 1000);
    EXPECT_EQ(mech_.retry_before[1], clock_.NowMs() - kHeartbeatMs);
  }
  // An observer does not watch at start.
  mech_.calls.clear();
  std::unique_ptr<ClientRecovery> observer = Make("chain", /*worker=*/false);
  ASSERT_NE(observer, nullptr);
  observer->OnStarted();
  EXPECT_TRUE(mech_.calls.empty());
}

TEST_F(ClientRolesTest, PoliciesWithoutChainsDriveNothingOnStartOrHeartbeat) {
  for (const char* policy : {"none", "checkpoint", "stateless", "replay"}) {
    SCOPED_TRACE(policy);
    std::unique_ptr<ClientRecovery> r = Make(policy);
    ASSERT_NE(r, nullptr);
    r->OnStarted();
    r->OnHeartbeat();
    clock_.AdvanceMs(kHeartbeatMs);
    r->OnHeartbeat();
    EXPECT_TRUE(mech_.calls.empty());
  }
}

// ---- Events: hybrid and stateless ------------------------------------------

TEST_F(ClientRolesTest, HybridGoesLocalOnAStrandedChainAndRejoinsOnceSeeded) {
  std::unique_ptr<ClientRecovery> r = Make("hybrid");
  ASSERT_NE(r, nullptr);
  r->OnMapInstalled(*Install(MapProto(3, 2)), {});
  EXPECT_TRUE(mech_.calls.empty());

  // Server 1 spliced out, server 0 stranded with range 0: only 0 goes local
  // (at the endpoint it was lost on). Range 4096's copy follows its new,
  // live head 2 at once: if 2 were lost too before this worker pulled from
  // it (every server killed together), the copy is what 2's range is served
  // from locally.
  const wire::ShardMap lost = ChainLostMap();
  r->OnMapInstalled(*Install(lost), {});
  EXPECT_EQ(mech_.calls,
            std::vector<std::string>({"reassign w@4096->2", "local 0 " + Endpoint(0)}));
  EXPECT_FALSE(mech_.IsLocal(1));

  // The same map again: already local, nothing new.
  mech_.calls.clear();
  r->OnMapInstalled(*Install(lost), {});
  EXPECT_TRUE(mech_.calls.empty());

  // Server 2 took over what server 0 held alone (and is seeded): the copies
  // move to it; server 0 back and alive (seeded): rejoin.
  mech_.calls.clear();
  wire::ShardMap seeded = lost;
  seeded.mutable_servers(2)->add_took_over(0);
  seeded.mutable_servers(0)->set_alive(true);
  seeded.mutable_servers(0)->set_endpoint(Endpoint(0, 2));
  seeded.set_version(4);
  r->OnMapInstalled(*Install(seeded), {0});
  EXPECT_EQ(mech_.calls, std::vector<std::string>({"takeover 0->2", "rejoin 0"}));

  // The heartbeat reply answers re-seed requests and probes stalled servers.
  mech_.calls.clear();
  r->OnHeartbeatReply(wire::HeartbeatReply());
  EXPECT_EQ(mech_.calls, std::vector<std::string>({"seed", "probe"}));

  // Observers do none of it.
  mech_.calls.clear();
  std::unique_ptr<ClientRecovery> observer = Make("hybrid", /*worker=*/false);
  ASSERT_NE(observer, nullptr);
  observer->OnMapInstalled(*Install(lost), {});
  observer->OnHeartbeatReply(wire::HeartbeatReply());
  EXPECT_TRUE(mech_.calls.empty());
}

// A range move under hybrid (docs/elastic.md "Chains") replaces one replica:
// the range keeps its keys, and its copy follows its head through the
// extended chain, the splice of the source, and later losses, onto a joined
// server (an id beyond the job's first servers) that then holds it alone.
TEST_F(ClientRolesTest, HybridCopiesFollowARangeMovedToAJoinedServer) {
  std::unique_ptr<ClientRecovery> r = Make("hybrid");
  ASSERT_NE(r, nullptr);
  wire::ShardMap m = MapProto(2, 2);  // w@0 on [0, 1], w@4096 on [1, 0].
  r->OnMapInstalled(*Install(m), {});
  EXPECT_TRUE(mech_.calls.empty());

  // Server 2 joins and the move extends range 0's chain: the head stays.
  wire::ServerInfo* joined = m.add_servers();
  joined->set_id(2);
  joined->set_endpoint(Endpoint(2));
  joined->set_alive(true);
  joined->set_incarnation(1);
  m.mutable_tables(0)->mutable_ranges(0)->add_chain(2);
  m.set_version(2);
  r->OnMapInstalled(*Install(m), {});
  EXPECT_TRUE(mech_.calls.empty());

  // The source, range 0's head, is spliced out: the copy follows server 1.
  wire::DenseRange* moved = m.mutable_tables(0)->mutable_ranges(0);
  moved->clear_chain();
  moved->add_chain(1);
  moved->add_chain(2);
  moved->set_server(1);
  m.set_version(3);
  r->OnMapInstalled(*Install(m), {});
  EXPECT_EQ(mech_.calls, std::vector<std::string>({"reassign w@0->1"}));

  // Server 1 lost: range 0 goes on on the joined server, range 4096 on 0.
  mech_.calls.clear();
  m.mutable_servers(1)->set_alive(false);
  EXPECT_TRUE(SpliceOrStrand(&m, 1).stranded.empty());
  m.set_version(4);
  r->OnMapInstalled(*Install(m), {});
  EXPECT_EQ(mech_.calls, std::vector<std::string>({"reassign w@0->2", "reassign w@4096->0"}));

  // The joined server lost too: it held range 0 alone, which is stranded with
  // it; the worker trains on the copy, as the joined server's, locally.
  mech_.calls.clear();
  m.mutable_servers(2)->set_alive(false);
  EXPECT_EQ(SpliceOrStrand(&m, 2).stranded.size(), 1u);
  m.set_version(5);
  r->OnMapInstalled(*Install(m), {});
  EXPECT_EQ(mech_.calls, std::vector<std::string>({"local 2 " + Endpoint(2)}));
  EXPECT_EQ(r->BeforeSend(2, *Install(m)), PartAction::kServeLocally);
  EXPECT_EQ(r->BeforeSend(0, *Install(m)), PartAction::kSend);
}

TEST_F(ClientRolesTest, StatelessGoesLocalOnADeadServerAndRejoinsItsReplacement) {
  std::unique_ptr<ClientRecovery> r = Make("stateless");
  ASSERT_NE(r, nullptr);
  r->OnMapInstalled(*Install(MapProto(3, 1)), {});
  EXPECT_TRUE(mech_.calls.empty());

  // The coordinator declared server 1 dead (endpoint kept) and server 2 dead
  // without an endpoint: only 1 can go local where it was.
  wire::ShardMap dead = MapProto(3, 1);
  dead.mutable_servers(1)->set_alive(false);
  dead.mutable_servers(2)->set_alive(false);
  dead.mutable_servers(2)->set_endpoint("");
  r->OnMapInstalled(*Install(dead), {});
  EXPECT_EQ(mech_.calls, std::vector<std::string>({"local 1 " + Endpoint(1)}));

  // Alive again at the same endpoint (not replaced): stays local (a probe
  // decides that, not the map).
  mech_.calls.clear();
  wire::ShardMap same = MapProto(3, 1);
  r->OnMapInstalled(*Install(same), {});
  EXPECT_TRUE(mech_.calls.empty());
  EXPECT_TRUE(mech_.IsLocal(1));

  // Replaced and seeded: alive at a new endpoint. Rejoin with raw deltas.
  wire::ShardMap replaced = MapProto(3, 1);
  replaced.mutable_servers(1)->set_endpoint(Endpoint(1, 2));
  r->OnMapInstalled(*Install(replaced), {1});
  EXPECT_EQ(mech_.calls, std::vector<std::string>({"rejoin 1"}));
  EXPECT_FALSE(mech_.IsLocal(1));

  mech_.calls.clear();
  r->OnHeartbeatReply(wire::HeartbeatReply());
  EXPECT_EQ(mech_.calls, std::vector<std::string>({"seed", "probe"}));

  mech_.calls.clear();
  std::unique_ptr<ClientRecovery> observer = Make("stateless", /*worker=*/false);
  ASSERT_NE(observer, nullptr);
  observer->OnMapInstalled(*Install(dead), {});
  observer->OnHeartbeatReply(wire::HeartbeatReply());
  EXPECT_TRUE(mech_.calls.empty());
}

TEST_F(ClientRolesTest, PoliciesThatRestartServersDoNotGoLocal) {
  const wire::ShardMap lost = ChainLostMap();
  for (const char* policy : {"none", "checkpoint", "chain"}) {
    SCOPED_TRACE(policy);
    std::unique_ptr<ClientRecovery> r = Make(policy);
    ASSERT_NE(r, nullptr);
    r->OnMapInstalled(*Install(lost), {0});
    r->OnHeartbeatReply(wire::HeartbeatReply());
    EXPECT_TRUE(mech_.calls.empty());
  }
}

// ---- Replay ----------------------------------------------------------------

class ReplayClientTest : public ClientRolesTest {
 protected:
  // A dense push part to `server` keyed `push_id`, acknowledged with the
  // marker (snapshot_seq, pending).
  static AckedPush Push(int server, uint64_t push_id, int64_t clock, std::vector<float> grads,
                        uint64_t snapshot_seq = 0, bool pending = false) {
    AckedPush p;
    p.server = server;
    p.type = wire::PUSH;
    p.table = "w";
    p.key_begin = static_cast<uint64_t>(server) * kDenseChunk;
    p.grads = FloatBuffer::CopyOf(grads);
    p.clock = clock;
    p.incarnation = 1;
    p.push_id = push_id;
    p.snapshot_seq = snapshot_seq;
    p.pending = pending;
    return p;
  }

  // The map after `server` restarted at a new endpoint; `restored_seq` > 0:
  // it says it restored that checkpoint.
  static std::shared_ptr<const ShardMap> Restarted(int server, uint64_t restored_seq = 0,
                                                   int incarnation = 2) {
    wire::ShardMap m = MapProto(2, 1);
    m.set_version(2 + incarnation);
    m.mutable_servers(server)->set_endpoint(Endpoint(server, incarnation));
    if (restored_seq > 0) m.mutable_servers(server)->mutable_restored_from()->set_seq(restored_seq);
    return Install(m);
  }

  static wire::HeartbeatReply Checkpoint(uint64_t seq) {
    wire::HeartbeatReply reply;
    reply.mutable_latest_checkpoint()->set_seq(seq);
    return reply;
  }

  static std::map<std::string, uint64_t> Counters(const ClientRecovery& r) {
    std::map<std::string, uint64_t> c;
    r.AddCounters(&c);
    return c;
  }

  std::vector<uint64_t> ReplayedIds() const {
    std::vector<uint64_t> ids;
    for (const auto& call : mech_.replays) ids.push_back(call.push.push_id);
    return ids;
  }
};

TEST_F(ReplayClientTest, ReplaysAcknowledgedPushesInOrderThenReleasesTheServer) {
  std::unique_ptr<ClientRecovery> r = Make("replay");
  ASSERT_NE(r, nullptr);
  std::vector<float> g1 = {1.0f, 2.0f}, g3 = {3.0f, 4.0f, 5.0f};
  AckedPush p1 = Push(0, 1, 0, g1);
  r->OnPushAcked(p1);
  r->OnPushAcked(Push(1, 2, 0, {9.0f}));
  r->OnPushAcked(Push(0, 3, 1, g3));
  r->OnPushAcked(Push(0, 4, 2, {6.0f}));
  // The caller may reuse its buffers once the request completed: the log
  // kept a copy.
  p1.grads[0] = -100.0f;

  r->OnMapInstalled(*Restarted(0), {0});
  // Only server 0's entries, oldest first, and nothing released yet.
  EXPECT_EQ(mech_.calls,
            std::vector<std::string>({"replay 0 #1", "replay 0 #3", "replay 0 #4"}));
  ASSERT_EQ(mech_.replays.size(), 3u);
  const AckedPush& first = mech_.replays[0].push;
  EXPECT_EQ(mech_.replays[0].server, 0);
  EXPECT_EQ(first.server, 0);
  EXPECT_EQ(first.type, wire::PUSH);
  EXPECT_EQ(first.table, "w");
  EXPECT_EQ(first.key_begin, 0u);
  EXPECT_EQ(first.incarnation, 1u);
  EXPECT_EQ(first.clock, 0);
  ASSERT_EQ(first.grads.size(), 2u);
  EXPECT_EQ(first.grads[0], 1.0f);
  EXPECT_EQ(first.grads[1], 2.0f);
  EXPECT_EQ(mech_.replays[1].push.clock, 1);
  ASSERT_EQ(mech_.replays[1].push.grads.size(), 3u);
  EXPECT_EQ(mech_.replays[1].push.grads[2], 5.0f);

  // Answers in any order: the release follows the last one, once.
  mech_.Answer(2);
  mech_.Answer(0);
  EXPECT_EQ(mech_.Count("release 0"), 0);
  mech_.Answer(1);
  EXPECT_EQ(mech_.calls.back(), "release 0");
  EXPECT_EQ(mech_.Count("release 0"), 1);
  EXPECT_EQ(mech_.Count("release 1"), 0);

  std::map<std::string, uint64_t> c = Counters(*r);
  EXPECT_EQ(c["replayed"], 3u);
  EXPECT_EQ(c["replay_failed"], 0u);
  // The entries stay in the log until a checkpoint contains them.
  EXPECT_EQ(c["replay_log_entries"], 4u);
}

TEST_F(ReplayClientTest, AServerWithNothingLoggedIsReleasedAtOnce) {
  std::unique_ptr<ClientRecovery> r = Make("replay");
  ASSERT_NE(r, nullptr);
  r->OnPushAcked(Push(0, 1, 0, {1.0f}));
  r->OnMapInstalled(*Restarted(1), {1});
  EXPECT_EQ(mech_.calls, std::vector<std::string>({"release 1"}));
  // A map with no restarted server replays and releases nothing.
  mech_.calls.clear();
  r->OnMapInstalled(*Restarted(0), {});
  EXPECT_TRUE(mech_.calls.empty());
}

TEST_F(ReplayClientTest, AFailedReplayStillReleasesTheServerAndIsCounted) {
  std::unique_ptr<ClientRecovery> r = Make("replay");
  ASSERT_NE(r, nullptr);
  r->OnPushAcked(Push(0, 1, 0, {1.0f}));
  r->OnPushAcked(Push(0, 2, 0, {2.0f}));
  r->OnMapInstalled(*Restarted(0), {0});
  ASSERT_EQ(mech_.replays.size(), 2u);
  mech_.Answer(0, UnavailableError("server 0 lost again"));
  mech_.Answer(1);
  EXPECT_EQ(mech_.Count("release 0"), 1);
  std::map<std::string, uint64_t> c = Counters(*r);
  EXPECT_EQ(c["replayed"], 1u);
  EXPECT_EQ(c["replay_failed"], 1u);
}

TEST_F(ReplayClientTest, ASecondRestartDuringAReplayStartsANewOneAndOnlyItReleases) {
  std::unique_ptr<ClientRecovery> r = Make("replay");
  ASSERT_NE(r, nullptr);
  r->OnPushAcked(Push(0, 1, 0, {1.0f}));
  r->OnPushAcked(Push(0, 2, 1, {2.0f}));
  r->OnMapInstalled(*Restarted(0, 0, 2), {0});
  r->OnMapInstalled(*Restarted(0, 0, 3), {0});
  EXPECT_EQ(ReplayedIds(), std::vector<uint64_t>({1, 2, 1, 2}));

  // The first replay (to the incarnation that died) completes: no release.
  mech_.Answer(0, UnavailableError("server 0 restarted"));
  mech_.Answer(1, UnavailableError("server 0 restarted"));
  EXPECT_EQ(mech_.Count("release 0"), 0);
  // The second completes: released once.
  mech_.Answer(2);
  mech_.Answer(3);
  EXPECT_EQ(mech_.Count("release 0"), 1);
}

TEST_F(ReplayClientTest, ANewerCheckpointTrimsWhatItContains) {
  std::unique_ptr<ClientRecovery> r = Make("replay");
  ASSERT_NE(r, nullptr);
  // Reflected before checkpoint 1 was captured: contained in checkpoint 1.
  r->OnPushAcked(Push(0, 1, 0, {1.0f}, /*snapshot_seq=*/0));
  r->OnPushAcked(Push(1, 2, 0, {1.0f}, /*snapshot_seq=*/0));
  // Reflected after checkpoint 1 was captured: only in checkpoint 2 on.
  r->OnPushAcked(Push(0, 3, 1, {1.0f}, /*snapshot_seq=*/1));
  // A BSP push waiting for its round (pending): in no checkpoint yet.
  r->OnPushAcked(Push(1, 4, 5, {1.0f}, /*snapshot_seq=*/1, /*pending=*/true));
  EXPECT_EQ(Counters(*r)["replay_log_entries"], 4u);

  r->OnHeartbeatReply(wire::HeartbeatReply());  // No checkpoint announced.
  EXPECT_EQ(Counters(*r)["replay_log_entries"], 4u);

  r->OnHeartbeatReply(Checkpoint(1));
  std::map<std::string, uint64_t> c = Counters(*r);
  EXPECT_EQ(c["replay_trimmed"], 2u);
  EXPECT_EQ(c["replay_log_entries"], 2u);
  EXPECT_EQ(c["replay_log_bytes"], 2 * sizeof(float));

  // A restart replays only what checkpoint 1 lacks.
  r->OnMapInstalled(*Restarted(0, 1), {0});
  r->OnMapInstalled(*Restarted(1, 1), {1});
  EXPECT_EQ(ReplayedIds(), std::vector<uint64_t>({3, 4}));

  // Checkpoint 2 contains push 3; the pending push stays until a reflected
  // push of a clock at least its own vouches for it.
  r->OnHeartbeatReply(Checkpoint(2));
  EXPECT_EQ(Counters(*r)["replay_log_entries"], 1u);
  r->OnPushAcked(Push(1, 5, 5, {1.0f}, /*snapshot_seq=*/2));
  r->OnHeartbeatReply(Checkpoint(3));
  c = Counters(*r);
  EXPECT_EQ(c["replay_log_entries"], 0u);
  EXPECT_EQ(c["replay_log_bytes"], 0u);
  EXPECT_EQ(c["replay_trimmed"], 5u);
}

TEST_F(ReplayClientTest, AReplayAnswerMovesTheEntryToTheCheckpointsAfterIt) {
  std::unique_ptr<ClientRecovery> r = Make("replay");
  ASSERT_NE(r, nullptr);
  r->OnPushAcked(Push(0, 1, 0, {1.0f}, /*snapshot_seq=*/0));
  // Server 0 restored checkpoint 0 (none): the push is replayed and the
  // restored server reflects it after its checkpoint 4 was captured.
  r->OnMapInstalled(*Restarted(0), {0});
  ASSERT_EQ(mech_.replays.size(), 1u);
  mech_.Answer(0, Status::OK(), /*snapshot_seq=*/4);
  // Checkpoint 1 would have contained the original push, not the replayed
  // one; nor does checkpoint 4 (captured before the replay was applied).
  r->OnHeartbeatReply(Checkpoint(1));
  EXPECT_EQ(Counters(*r)["replay_log_entries"], 1u);
  r->OnHeartbeatReply(Checkpoint(4));
  EXPECT_EQ(Counters(*r)["replay_log_entries"], 1u);
  r->OnHeartbeatReply(Checkpoint(5));
  EXPECT_EQ(Counters(*r)["replay_log_entries"], 0u);
}

TEST_F(ReplayClientTest, AFullLogDropsTheOldestAndCountsThoseARestartLoses) {
  // Room for two one-float pushes.
  std::unique_ptr<ClientRecovery> r = Make("replay", true, 2 * sizeof(float));
  ASSERT_NE(r, nullptr);
  r->OnPushAcked(Push(0, 1, 0, {1.0f}, /*snapshot_seq=*/2));  // Dropped; in checkpoint 3.
  r->OnPushAcked(Push(1, 2, 0, {1.0f}, /*snapshot_seq=*/2));  // Dropped; in checkpoint 3.
  r->OnPushAcked(Push(0, 3, 1, {1.0f}, /*snapshot_seq=*/2));
  r->OnPushAcked(Push(1, 4, 1, {1.0f}, /*snapshot_seq=*/2));
  std::map<std::string, uint64_t> c = Counters(*r);
  EXPECT_EQ(c["replay_dropped"], 2u);
  EXPECT_EQ(c["replay_dropped_bytes"], 2 * sizeof(float));
  EXPECT_EQ(c["replay_uncovered"], 2u);
  EXPECT_EQ(c["replay_log_entries"], 2u);
  EXPECT_EQ(c["replay_lost"], 0u);

  // Server 0 restored checkpoint 3: it holds its dropped push; server 1
  // restored checkpoint 2: its dropped push is lost, and counted.
  r->OnMapInstalled(*Restarted(0, 3), {0});
  EXPECT_EQ(Counters(*r)["replay_lost"], 0u);
  r->OnMapInstalled(*Restarted(1, 2), {1});
  c = Counters(*r);
  EXPECT_EQ(c["replay_lost"], 1u);
  EXPECT_EQ(c["replay_uncovered"], 0u);
  // What the log still has is replayed.
  EXPECT_EQ(ReplayedIds(), std::vector<uint64_t>({3, 4}));
}

TEST_F(ReplayClientTest, AddCountersReportsEveryCounter) {
  std::unique_ptr<ClientRecovery> r = Make("replay");
  ASSERT_NE(r, nullptr);
  AckedPush rows = Push(1, 7, 0, {1.0f, 2.0f, 3.0f, 4.0f});
  rows.type = wire::PUSH_ROWS;
  rows.ids = KeyBuffer::CopyOf(std::vector<uint64_t>{11, 12});
  r->OnPushAcked(rows);
  r->OnPushAcked(Push(0, 8, 0, {1.0f}));
  std::map<std::string, uint64_t> c;
  c["unrelated"] = 42;  // Added to, not replaced.
  r->AddCounters(&c);
  EXPECT_EQ(c["unrelated"], 42u);
  for (const char* key : {"replay_log_bytes", "replay_log_entries", "replay_trimmed",
                          "replay_dropped", "replay_dropped_bytes", "replay_uncovered",
                          "replay_lost", "replayed", "replay_failed"}) {
    EXPECT_EQ(c.count(key), 1u) << key;
  }
  EXPECT_EQ(c["replay_log_entries"], 2u);
  EXPECT_EQ(c["replay_log_bytes"], 5 * sizeof(float) + 2 * sizeof(uint64_t));

  // A replayed row part keeps its ids.
  r->OnMapInstalled(*Restarted(1), {1});
  ASSERT_EQ(mech_.replays.size(), 1u);
  EXPECT_EQ(mech_.replays[0].push.type, wire::PUSH_ROWS);
  ASSERT_EQ(mech_.replays[0].push.ids.size(), 2u);
  EXPECT_EQ(mech_.replays[0].push.ids[1], 12u);

  // Other policies keep no counters.
  for (const char* policy : {"none", "checkpoint", "chain", "stateless", "hybrid"}) {
    std::unique_ptr<ClientRecovery> other = Make(policy);
    ASSERT_NE(other, nullptr);
    std::map<std::string, uint64_t> none;
    other->AddCounters(&none);
    EXPECT_TRUE(none.empty()) << policy;
  }
}

}  // namespace
}  // namespace recovery
}  // namespace relaxps
