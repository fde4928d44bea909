// --recovery=hybrid, client side: chain replication's client
// (recovery/chain/chain_client.h) while a range has a live replica; when the
// map shows a range's whole chain lost (its head dead: a dead server that
// still had another replica is spliced out), a worker trains on its own copy
// of that range as under stateless, hands the copy over for the re-seed, and
// uses the range again once the map shows its server alive (seeded, or a
// spare that took it over).
#include "recovery/chain/chain_client.h"
#include "recovery/hybrid/hybrid.h"

namespace relaxps {
namespace recovery {
namespace {

// True if `server` is dead in `m` while it still heads a chain: the ranges
// it holds have no live replica left.
bool Stranded(const ShardMap& m, int server) {
  if (server < 0 || server >= m.num_servers() || m.proto().servers(server).alive()) return false;
  for (const wire::TableShards& ts : m.proto().tables()) {
    for (const wire::DenseRange& r : ts.ranges()) {
      if (r.server() == server) return true;
    }
    for (const wire::SparseBucket& b : ts.buckets()) {
      if (b.server() == server) return true;
    }
  }
  return false;
}

class HybridClientRecovery final : public ChainClientRecovery {
 public:
  explicit HybridClientRecovery(const ClientRecoveryOptions& options)
      : ChainClientRecovery(options) {
    features_.local_copies = options.worker;
  }

  // A part routed to a head that held the last replica of its range is
  // served locally.
  PartAction BeforeSend(int server, const ShardMap& map) const override {
    return options_.worker && Stranded(map, server) ? PartAction::kServeLocally
                                                    : PartAction::kSend;
  }

  // Only a range whose every replica is lost goes local; otherwise the
  // error stands (chain routing resent it as long as it could).
  LostPartDecision OnPartLost(const FailedPart& part) override {
    LostPartDecision d;
    if (!options_.worker || part.holder < 0 || !Stranded(*part.map, part.holder)) return d;
    d.action = PartAction::kServeLocally;
    d.local_server = part.holder;
    d.endpoint = part.map->server_endpoint(part.holder);
    return d;
  }

  void OnMapInstalled(const ShardMap& m, const std::vector<int>& /*restarted*/) override {
    if (!options_.worker) return;
    ClientMechanisms* mech = mechanisms();
    // A spare took over what a local server held alone: the copies and
    // changes move to it, and it is local until it is seeded.
    for (int i = 0; i < m.num_servers(); ++i) {
      for (int holder : m.proto().servers(i).took_over()) mech->TakeOver(holder, i);
    }
    // Each range's copy belongs to the range's head in this map. A head that
    // is dead has lost every replica (a dead server that still had another
    // replica was spliced out of the chain). A live new head after a
    // failover holds it from now on, also before this worker pulled from it:
    // if that head is lost at once as well (every server killed together),
    // the copy is what the range is served from locally.
    for (const wire::TableShards& ts : m.proto().tables()) {
      for (const wire::DenseRange& r : ts.ranges()) {
        mech->Reassign(ts.table().name(), r.begin(), r.server());
      }
    }
    for (int i = 0; i < m.num_servers(); ++i) {
      const wire::ServerInfo& info = m.proto().servers(i);
      std::string lost_at;
      bool stalled = false;
      const bool local = mech->LostAt(i, &lost_at, &stalled);
      // A local server shows alive again only once seeded (restarted, a
      // fenced one registered again at the same endpoint, or a spare that
      // took over).
      if (!local && Stranded(m, i)) {
        mech->GoLocal(i, info.endpoint(), false, "every replica of its ranges is lost");
      } else if (local && info.alive()) {
        mech->Rejoin(i, false, "it was seeded");
      }
    }
  }

  void OnHeartbeatReply(const wire::HeartbeatReply& reply) override {
    if (!options_.worker) return;
    mechanisms()->SendSeedCopies(reply);
    mechanisms()->ProbeStalledServers();
  }
};

}  // namespace

std::unique_ptr<ClientRecovery> NewHybridClientRecovery(const ClientRecoveryOptions& options) {
  return std::make_unique<HybridClientRecovery>(options);
}

}  // namespace recovery
}  // namespace relaxps
