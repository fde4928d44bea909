// --recovery=hybrid, coordinator side: chains as under chain replication;
// a range or sparse bucket whose every replica is lost stays "stranded" with
// its last holder (recovery/hybrid/hybrid_fallback.h, "FALLBACK
// cause=all-replicas-lost" line): workers train on their copies, and the
// server that registers with that id, or a server with another id once the
// holder has been lost for --spare_takeover_ms ("TAKEOVER" line), is seeded
// from them as under stateless (sparse rows: its checkpoint or the
// initializer plus the workers' merged row changes), or, if no worker sent a
// real copy, keeps what it loaded from its latest checkpoint plus the
// changes of workers that trained on the initializer ("FALLBACK
// cause=no-worker-copy"); then the other servers rejoin its chains as tail.
//
// This object owns the stranded holders, since when each is stranded (for
// spare takeover) and which holders each spare took over (shown in the map,
// ServerInfo.took_over, until it is seeded). The stranded holders are kept
// in the coordinator's durable state (StoredRecovery.stranded_holders).
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/shard_map.h"
#include "proto/relaxps.pb.h"
#include "recovery/chain/chain_coordinator.h"
#include "recovery/hybrid/hybrid.h"
#include "recovery/hybrid/hybrid_fallback.h"
#include "recovery/recovery_policy.h"

namespace relaxps {
namespace recovery {
namespace {

class HybridCoordinator final : public ChainCoordinatorBase {
 public:
  HybridCoordinator() : ChainCoordinatorBase("hybrid") {}

  // A move replaces one replica of a chain as under chain (docs/elastic.md
  // "Chains"). The workers' copies follow it: a range is never cut, so its
  // copy stays keyed by its first key, and each map reassigns it to the
  // range's head (HybridClientRecovery::OnMapInstalled), the survivor or the
  // joined server after a splice too. Only ranges with a live replica move
  // (the plan takes them from serving servers): a stranded range waits for
  // its seed. A move whose syncing destination is left out of a stranded
  // chain (every replica with state lost mid-move) fails.
  Status AdmitRangeMoves() const override { return Status::OK(); }

  void OnServerLost(int server, const std::string& why, CoordinatorMechanisms& m) override {
    LOG(WARNING) << why;
    m.CountRecovery("failover");
    took_over_.erase(server);  // A spare lost before its seed: stranded again.
    wire::ShardMap* map = m.mutable_map();
    const SpliceResult r = SpliceOrStrand(map, server, m.Syncing());
    map->set_epoch(map->epoch() + 1);
    m.RebuildServerList();
    LOG(WARNING) << "server " << server << " removed from " << r.changed
                 << " chain(s); epoch " << map->epoch() << ", map version " << map->version();
    if (!r.stranded.empty()) {
      Strand(server, m.NowMs());
      m.CountRecovery("fallback");
      LOG(WARNING) << "FALLBACK cause=all-replicas-lost server=" << server
                   << " ranges=" << DescribeRanges(r.stranded)
                   << " action=stateless-reseed epoch=" << map->epoch() << " (" << why
                   << "): workers train on their own copies until a server registers with id "
                   << server << " and is seeded from them";
    }
    LOG(WARNING) << RestartAdvice(server);
    m.PublishMap("server " + std::to_string(server) + " lost");
  }

  RegistrationOutcome OnServerRegistered(const ServerRegistration& r,
                                         CoordinatorMechanisms& m) override {
    RegistrationOutcome out;
    wire::ShardMap* map = m.mutable_map();
    if (r.was_live && r.has_tables) {
      // Its state is gone: what it held alone is stranded like a loss.
      if (!SpliceOrStrand(map, r.id, m.Syncing()).stranded.empty()) Strand(r.id, m.NowMs());
    }
    // A server with another id may take a stranded holder's place.
    const bool took_over = r.has_tables && TakeOverStranded(r.id, m) >= 0;
    // Only a server whose ranges are stranded is seeded; the others rejoin
    // their chains by state transfer.
    out.seed = (r.replaces || took_over) && r.has_tables && stranded_holders_.count(r.id) > 0;
    if (r.has_tables) {
      m.EndSyncing(r.id);
      int joined = JoinChains(map, r.id, job_.num_servers, job_.replicas);
      std::set<int> others = stranded_holders_;
      others.erase(r.id);
      const int kept_out = LeaveStrandedChains(map, r.id, others);
      joined -= kept_out;
      if (kept_out > 0) {
        LOG(INFO) << "server " << r.id << " joins " << kept_out
                  << " stranded chain(s) only once they are seeded";
      }
      map->set_epoch(map->epoch() + 1);
      LOG(INFO) << "server " << r.id << " joins " << joined << " chain(s) as tail; epoch "
                << map->epoch();
      out.joined_chains = joined;
    }
    out.push_map = out.joined_chains > 0 || took_over;
    return out;
  }

  void OnSeedWithoutWorkerCopy(SeedReport* report, CoordinatorMechanisms& m) override {
    // No live worker held a copy: the server keeps what it loaded at start
    // (a launcher restarts it with --restore_from=latest).
    const wire::CheckpointRecord* latest = m.LatestCheckpoint();
    report->source = latest != nullptr ? "checkpoint@" + std::to_string(latest->clock())
                                       : std::string("initializer");
    m.CountRecovery("fallback");
    LOG(WARNING) << "FALLBACK cause=no-worker-copy server=" << report->server
                 << " ranges=" << DescribeRanges(RangesHeldAlone(m.map(), report->server))
                 << " action=restore source=" << report->source
                 << (report->changes_only + report->buckets > 0
                         ? " plus the workers' merged changes"
                         : "")
                 << ": no live worker sent a copy of its ranges"
                 << (report->buckets > 0 ? " (sparse rows never have one)" : "");
  }

  // Once `seeded`'s stranded ranges are served again, the live servers join
  // the chains they were kept out of.
  void OnServerSeeded(int seeded, CoordinatorMechanisms& m) override {
    stranded_holders_.erase(seeded);
    stranded_since_.erase(seeded);
    took_over_.erase(seeded);
    wire::ShardMap* map = m.mutable_map();
    const std::set<int> awaiting_seed = m.LiveServersAwaitingSeed();
    int joined = 0;
    std::vector<int> joiners;
    for (int id : m.LiveServers()) {
      if (awaiting_seed.count(id) || stranded_holders_.count(id)) continue;
      const int n = JoinChains(map, id, job_.num_servers, job_.replicas) -
                    LeaveStrandedChains(map, id, stranded_holders_);
      if (n > 0) joiners.push_back(id);
      joined += n;
    }
    if (joined > 0) {
      map->set_epoch(map->epoch() + 1);
      map->set_version(map->version() + 1);
      // They hold no state of those chains until their state transfers arrive.
      for (int id : joiners) m.MarkSyncing(id);
      LOG(INFO) << joined << " replica(s) join the chains seeded on server " << seeded
                << " as tail; epoch " << map->epoch();
    }
    m.PublishMap("server " + std::to_string(seeded) + " seeded");
  }

  void DescribeServer(int id, wire::ServerInfo* info) const override {
    auto spare = took_over_.find(id);
    if (spare == took_over_.end()) return;
    for (int holder : spare->second) info->add_took_over(holder);
  }

  void SaveState(wire::StoredRecovery* state) const override {
    for (int id : stranded_holders_) state->add_stranded_holders(id);
  }

  void RestoreState(const wire::StoredRecovery& state, int64_t now_ms) override {
    // Lost since the takeover, as far as spares go.
    for (int id : state.stranded_holders()) Strand(id, now_ms);
  }

 protected:
  std::string RestartAdvice(int server) const override {
    return "restart it with --server_id=" + std::to_string(server) +
           " to rejoin its chains as tail; a range it held last is seeded from the workers' "
           "copies (or its latest checkpoint) first";
  }

 private:
  // Records `id` as a stranded holder (since `now_ms`, unless it was).
  void Strand(int id, int64_t now_ms) {
    stranded_holders_.insert(id);
    stranded_since_.emplace(id, now_ms);
  }

  // Spare takeover: if a stranded holder qualifies (PickStrandedForSpare),
  // moves what it held alone to `spare`, which is then seeded in its place.
  // Returns the holder or -1.
  int TakeOverStranded(int spare, CoordinatorMechanisms& m) {
    if (stranded_holders_.count(spare)) return -1;  // Its own restart.
    // Holders restarted and being seeded now.
    const std::set<int> busy = m.LiveServersAwaitingSeed();
    const int64_t now = m.NowMs();
    const int holder =
        PickStrandedForSpare(stranded_since_, busy, spare, now, job_.spare_takeover_ms);
    if (holder < 0) return -1;
    const std::vector<StrandedRange> moved = MoveStranded(m.mutable_map(), holder, spare);
    const int64_t since = stranded_since_[holder];
    stranded_holders_.erase(holder);
    stranded_since_.erase(holder);
    stranded_holders_.insert(spare);
    stranded_since_[spare] = since;
    took_over_[spare].push_back(holder);
    LOG(WARNING) << "TAKEOVER server=" << spare << " holder=" << holder
                 << " ranges=" << DescribeRanges(moved) << " stranded_ms=" << now - since
                 << ": server " << spare << " is seeded from the workers' copies in place of "
                 << "server " << holder;
    return holder;
  }

  // Lost servers that held ranges alone (stranded, awaiting a seed), and
  // since when (for spare takeover).
  std::set<int> stranded_holders_;
  std::map<int, int64_t> stranded_since_;
  // Spare -> the holders whose stranded ranges it took over.
  std::map<int, std::vector<int>> took_over_;
};

}  // namespace

std::unique_ptr<CoordinatorRecovery> NewHybridCoordinatorRecovery() {
  return std::make_unique<HybridCoordinator>();
}

}  // namespace recovery
}  // namespace relaxps
