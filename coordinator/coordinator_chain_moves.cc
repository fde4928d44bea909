// CoordinatorImpl: moves of ranges replicated on chains (docs/elastic.md
// "Chains"). A move replaces one replica: the destination joins the range's
// chain as tail and receives the state from its predecessor (chain
// replication's state transfer), then the source is asked to leave (a head
// first lets everything it forwarded be acknowledged and holds what comes
// next) and is spliced out. Loop thread.

#include <algorithm>

#include "common/member_token.h"
#include "coordinator/internal/coordinator_impl.h"
#include "coordinator/range_plan.h"

namespace relaxps {
namespace coordinator_internal {

namespace {
bool Member(const std::vector<int>& chain, int server) {
  return std::find(chain.begin(), chain.end(), server) != chain.end();
}
}  // namespace

void CoordinatorImpl::StartChainMove() {
  wire::RangeMove& m = moves_.front();
  const std::vector<int> chain = ChainOf(map_, m);
  const auto dst = members_.servers().find(m.destination());
  Status s;
  if (dst == members_.servers().end() || !dst->second.alive) {
    s = UnavailableError("the destination server is not live");
  } else if (!Member(chain, m.source()) && !Member(chain, m.destination())) {
    s = FailedPreconditionError("server " + std::to_string(m.source()) +
                                " holds no replica of the range any more");
  } else if (Member(chain, m.destination()) && Member(chain, m.source()) && !m.started()) {
    s = FailedPreconditionError("server " + std::to_string(m.destination()) +
                                " holds a replica of the range already");
  }
  if (!s.ok()) {
    FailMoves(m, s);
    return;
  }
  const bool resumed = MarkMoveRunning(&m, dst->second.endpoint);
  chain_source_asked_ = false;
  LOG(INFO) << "range move " << m.id() << ": the replica of keys [" << m.begin() << ", "
            << m.end() << ") of table '" << m.table() << "' on server " << m.source()
            << " goes to server " << m.destination() << (resumed ? " (resumed)" : "");
  EmitMoveStarted(m, resumed);
  if (!Member(chain, m.destination())) {
    // It joins as tail: its predecessor streams it the state, and it counts
    // as no copy until it reports the transfer done (Syncing).
    if (Status e = ExtendChain(&map_, m); !e.ok()) {
      move_running_ = false;
      FailMoves(m, e);
      return;
    }
    map_.set_epoch(map_.epoch() + 1);
    RebuildServerList();
    MarkSyncing(m.destination());
    PublishMap("range move " + std::to_string(m.id()) + ": server " +
               std::to_string(m.destination()) + " joins the chain");
  } else if (!Persist()) {
    return;
  }
  ContinueChainMove();
}

void CoordinatorImpl::ContinueChainMove() {
  if (!move_running_ || moves_.empty() || !IsChainMove(map_, moves_.front())) return;
  const wire::RangeMove& m = moves_.front();
  if (syncing_.count(m.destination()) > 0) return;  // The state is on its way.
  if (!Member(ChainOf(map_, m), m.source())) {
    FinishChainMove();  // The source was lost and spliced out: nothing to ask.
    return;
  }
  if (chain_source_asked_) return;
  chain_source_asked_ = true;
  SendMoveStep(m, /*incoming=*/false, kMoveSourceAttempts);
}

void CoordinatorImpl::FinishChainMove() {
  const wire::RangeMove m = moves_.front();
  move_running_ = false;
  chain_source_asked_ = false;
  if (Member(ChainOf(map_, m), m.source())) {
    if (Status s = SpliceSource(&map_, m); !s.ok()) {
      FailMoves(m, s);
      return;
    }
    map_.set_epoch(map_.epoch() + 1);
  }
  moves_.pop_front();
  RebuildServerList();
  PublishMap("range move " + std::to_string(m.id()));
  EventFields fields = MoveFields(m);
  fields.push_back({"map_version", map_.version()});
  fields.push_back({"ms", clock_->NowMs() - move_started_ms_});
  Emit("range_move_done", fields);
  LOG(INFO) << "range move " << m.id() << " done in " << (clock_->NowMs() - move_started_ms_)
            << " ms: chain of keys [" << m.begin() << ", " << m.end() << ") now ends at server "
            << m.destination() << ", map version " << map_.version();
  RunNextMove();
}

void CoordinatorImpl::RetractChainMove(const wire::RangeMove& m) {
  chain_source_asked_ = false;
  const std::vector<int> chain = ChainOf(map_, m);
  if (!Member(chain, m.destination()) || !Member(chain, m.source())) return;
  // Only a source that still holds its replica (it was not lost) lets the
  // destination go: otherwise the destination is the range's new replica.
  if (!RetractDestination(&map_, m).ok()) return;
  EndSyncing(m.destination());
  map_.set_epoch(map_.epoch() + 1);
  RebuildServerList();
  PublishMap("range move " + std::to_string(m.id()) + " failed: server " +
             std::to_string(m.destination()) + " leaves the chain");
}

void CoordinatorImpl::OnChainMoveServerLost(int server) {
  if (!move_running_ || moves_.empty() || !IsChainMove(map_, moves_.front())) return;
  const wire::RangeMove m = moves_.front();
  if (server == m.destination()) {
    move_running_ = false;
    FailMoves(m, UnavailableError("the destination server " + std::to_string(server) +
                                  " was lost during the move; the policy removed it from the "
                                  "chain, which holds its other replicas as before"));
  } else if (!Member(ChainOf(map_, m), m.destination())) {
    // The policy left the chain without the destination: every replica with
    // the state was lost while it was still syncing (hybrid strands such a
    // range with its last holder; chain fails the job).
    move_running_ = false;
    FailMoves(m, UnavailableError("server " + std::to_string(server) +
                                  " was lost during the move and no replica that holds the "
                                  "range's state is left; the policy took the destination " +
                                  std::to_string(m.destination()) + " out of the chain"));
  } else if (server == m.source()) {
    ContinueChainMove();
  }
}

}  // namespace coordinator_internal
}  // namespace relaxps
