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

FloatBuffer IntegerGradient(uint64_t size, int worker, int step) {
  FloatBuffer g(size);
  for (uint64_t i = 0; i < size; ++i) {
    g[i] = static_cast<float>(static_cast<int>((i * 3 + step * 5 + worker * 7) % 9) - 4);
  }
  return g;
}

}  // namespace test
}  // namespace relaxps
