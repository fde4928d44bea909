// An in-process relaxps cluster for tests: a coordinator and N servers, each
// on its own thread, bound to OS-chosen ports on 127.0.0.1.
#ifndef RELAXPS_TESTS_SERVER_IN_PROCESS_CLUSTER_H_
#define RELAXPS_TESTS_SERVER_IN_PROCESS_CLUSTER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "coordinator/coordinator.h"
#include "server/server.h"
#include "tests/test_util.h"

namespace relaxps {

class InProcessCluster {
 public:
  // Starts a coordinator and `num_servers` memory-store servers.
  // `num_workers` > 0: the coordinator's start barrier (BSP/SSP).
  InProcessCluster(int num_servers, ConsistencyModel consistency = ConsistencyModel::kAsync,
                   int staleness = 2, int heartbeat_timeout_ms = 1000, int num_workers = 0,
                   int start_barrier_timeout_ms = 300000)
      : InProcessCluster(Options(num_servers, consistency, staleness, heartbeat_timeout_ms,
                                 num_workers, start_barrier_timeout_ms),
                         ServerOptions()) {}
  // Starts a coordinator with `co` and co.num_servers servers from `so`
  // (memory store, 100 ms heartbeats; under curve, server i gets id i and
  // the key "server-<i>").
  InProcessCluster(const CoordinatorOptions& co, ServerOptions so) {
    auto c = Coordinator::Start(co);
    CHECK(c.ok()) << c.status();
    coordinator_ = std::move(c).value();
    threads_.emplace_back([this] { coordinator_->Run(); });
    so.coordinator = coordinator_->endpoint();
    so.store.kind = "memory";
    so.heartbeat_ms = 100;
    for (int i = 0; i < co.num_servers; ++i) {
      if (so.curve.enabled()) {
        so.server_id = i;
        so.curve.name = "server-" + std::to_string(i);
      }
      auto s = Server::Start(so);
      CHECK(s.ok()) << s.status();
      servers_.push_back(std::move(s).value());
      Server* raw = servers_.back().get();
      threads_.emplace_back([raw] { raw->Run().IgnoreError(); });
    }
  }
  ~InProcessCluster() {
    for (auto& s : servers_) s->Stop();
    coordinator_->Stop();
    for (auto& t : threads_) t.join();
  }

  const std::string& coordinator() const { return coordinator_->endpoint(); }
  Server* server(int i) { return servers_[i].get(); }

 private:
  static CoordinatorOptions Options(int num_servers, ConsistencyModel consistency, int staleness,
                                    int heartbeat_timeout_ms, int num_workers,
                                    int start_barrier_timeout_ms) {
    CoordinatorOptions co;
    co.num_workers = num_workers;
    co.start_barrier_timeout_ms = start_barrier_timeout_ms;
    co.num_servers = num_servers;
    co.consistency = consistency;
    co.staleness = staleness;
    // Sanitized builds run several times slower: a worker starved for a
    // second must not be dropped from the live set (BSP rounds would close
    // without it).
    co.heartbeat_timeout_ms = heartbeat_timeout_ms * test::TimeScale();
    return co;
  }

  std::unique_ptr<Coordinator> coordinator_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::thread> threads_;
};

}  // namespace relaxps

#endif  // RELAXPS_TESTS_SERVER_IN_PROCESS_CLUSTER_H_
