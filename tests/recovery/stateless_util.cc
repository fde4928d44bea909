#include "tests/recovery/stateless_util.h"

namespace relaxps {
namespace test {

TableOptions SgdTable(uint64_t size, float lr, float init) {
  TableOptions t;
  t.name = "w";
  t.type = TableType::kDense;
  t.size = size;
  t.optimizer.name = "sgd";
  t.optimizer.lr = lr;
  t.init.segments.push_back(InitSegment{0, size, InitKind::kConstant, init, 0.0f});
  return t;
}

TableOptions SparseSgdTable(size_t width, float lr, float init) {
  TableOptions t;
  t.name = "s";
  t.type = TableType::kSparse;
  t.row_width = width;
  t.optimizer.name = "sgd";
  t.optimizer.lr = lr;
  t.init.segments.push_back(InitSegment{0, width, InitKind::kConstant, init, 0.0f});
  return t;
}

std::vector<std::string> StatelessServerFlags() { return {"--store=memory", "--heartbeat_ms=100"}; }

StatusOr<std::unique_ptr<RecoveryCluster>> StartStatelessCluster(const std::string& dir,
                                                                 int heartbeat_timeout_ms,
                                                                 int reseed_timeout_ms) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<RecoveryCluster> cluster,
      RecoveryCluster::Start(dir, 1,
                             {"--recovery=stateless",
                              "--heartbeat_timeout_ms=" + std::to_string(heartbeat_timeout_ms),
                              "--reseed_timeout_ms=" + std::to_string(reseed_timeout_ms)}));
  RETURN_IF_ERROR(cluster->StartServer(0, StatelessServerFlags()));
  return cluster;
}

FloatBuffer IntegerGradient(uint64_t size, int worker, int step) {
  FloatBuffer g(size);
  for (uint64_t i = 0; i < size; ++i) {
    g[i] = static_cast<float>(static_cast<int>((i * 3 + step * 5 + worker * 7) % 9) - 4);
  }
  return g;
}

}  // namespace test
}  // namespace relaxps
