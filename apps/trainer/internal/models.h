// Internal to the trainer: constructors of the concrete models (defined in
// mlp.cc and cnn.cc, dispatched by NewModel in model.cc) and the workspace
// cache they share.
#ifndef RELAXPS_APPS_TRAINER_INTERNAL_MODELS_H_
#define RELAXPS_APPS_TRAINER_INTERNAL_MODELS_H_

#include <memory>
#include <utility>
#include <vector>

#include "apps/trainer/model.h"
#include "kernels/device.h"

namespace relaxps {
namespace trainer {
namespace internal {

// REQUIRES: options validated by NewModel; hidden non-empty, all > 0.
std::unique_ptr<Model> NewMlpModel(const ModelOptions& options, std::vector<int> hidden);
std::unique_ptr<Model> NewCnnModel(const ModelOptions& options);

// Keeps one workspace W per (device, capacity); W is constructed as
// W(device, capacity). A model typically holds two: its training batch size
// and its evaluation batch size.
template <typename W>
class WorkspaceCache {
 public:
  W* Get(kernels::Device* device, int capacity) {
    for (auto& entry : entries_) {
      if (entry.device == device && entry.capacity == capacity) return entry.workspace.get();
    }
    entries_.push_back({device, capacity, std::make_unique<W>(device, capacity)});
    return entries_.back().workspace.get();
  }

 private:
  struct Entry {
    kernels::Device* device;
    int capacity;
    std::unique_ptr<W> workspace;
  };
  std::vector<Entry> entries_;
};

}  // namespace internal
}  // namespace trainer
}  // namespace relaxps

#endif  // RELAXPS_APPS_TRAINER_INTERNAL_MODELS_H_
