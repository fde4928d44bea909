// --recovery=stateless, client side: a worker never waits for a lost server.
// It keeps copies of the ranges and rows it pulls (local_copies); a server
// that does not answer within local_after_ms (pushes, clocks; pulls under
// async), whose connection closed and does not answer a probe, or that the
// map shows dead goes "local": its parts are served from the worker's copy.
// The coordinator asks the workers for their copies to seed the replacement
// (SEED_COPY, answered on the heartbeat thread); once the map shows the
// server alive at a new endpoint the worker hands back what it changed since
// as raw deltas. A server lost by a stall that answers a probe again was
// slow, not lost: the worker rejoins it and resends the pushes it may have
// applied with their exactly-once keys.
#include "recovery/stateless/stateless.h"

namespace relaxps {
namespace recovery {
namespace {

class StatelessClientRecovery final : public ClientRecovery {
 public:
  explicit StatelessClientRecovery(const ClientRecoveryOptions& options) : options_(options) {
    // Observers keep no copies and send plain requests.
    features_.exactly_once_keys = options.worker;
    features_.local_copies = options.worker;
    features_.probe_on_disconnect = options.worker;
    features_.lost_after_ms = options.worker ? options.local_after_ms : 0;
  }

  const ClientFeatures& features() const override { return features_; }

  LostPartDecision OnPartLost(const FailedPart& part) override {
    LostPartDecision d;
    if (!options_.worker) return d;
    // A dense part sent to an endpoint the map has replaced since goes to
    // the new server (which holds nothing of the old one's state).
    const std::string current = part.map->server_endpoint(part.server);
    if (!part.rows && part.can_reroute && current != part.endpoint && !current.empty() &&
        part.map->proto().servers(part.server).alive()) {
      d.action = PartAction::kSendToReplacement;
      return d;
    }
    // Otherwise the server goes local and the part is served from this
    // worker's copy (the server may still apply it: it was sent).
    d.action = PartAction::kServeLocally;
    d.local_server = part.holder;
    d.endpoint = part.endpoint;
    return d;
  }

  // Whether `server` holds a dense range or a sparse bucket in `m`.
  static bool HoldsKeys(const ShardMap& m, int server) {
    for (const wire::TableShards& ts : m.proto().tables()) {
      // A sparse table without buckets (an older map) has rows on every server.
      if (ts.table().type() == 1 && ts.buckets_size() == 0) return true;
      for (const wire::DenseRange& r : ts.ranges()) {
        if (r.server() == server) return true;
      }
      for (const wire::SparseBucket& b : ts.buckets()) {
        if (b.server() == server) return true;
      }
    }
    return false;
  }

  void OnMapInstalled(const ShardMap& m, const std::vector<int>& /*restarted*/) override {
    if (!options_.worker) return;
    ClientMechanisms* mech = mechanisms();
    for (int i = 0; i < m.num_servers(); ++i) {
      const wire::ServerInfo& info = m.proto().servers(i);
      std::string lost_at;
      bool stalled = false;
      if (!mech->LostAt(i, &lost_at, &stalled)) {
        // A dead server that holds nothing (drained: its ranges moved away
        // before it left) is no loss: nothing to train locally or re-seed.
        if (!info.alive() && !info.endpoint().empty() && HoldsKeys(m, i)) {
          mech->GoLocal(i, info.endpoint(), false, "the coordinator declared it dead");
        }
      } else if (info.alive() && !info.endpoint().empty() && info.endpoint() != lost_at) {
        mech->Rejoin(i, false, "it was replaced and seeded");
      }
    }
  }

  void OnHeartbeatReply(const wire::HeartbeatReply& reply) override {
    if (!options_.worker) return;
    mechanisms()->SendSeedCopies(reply);
    mechanisms()->ProbeStalledServers();
  }

 private:
  // Constant after construction.
  const ClientRecoveryOptions options_;
  ClientFeatures features_;
};

}  // namespace

std::unique_ptr<ClientRecovery> NewStatelessClientRecovery(const ClientRecoveryOptions& options) {
  return std::make_unique<StatelessClientRecovery>(options);
}

}  // namespace recovery
}  // namespace relaxps
