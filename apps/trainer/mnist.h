// Fashion-MNIST (and MNIST) data for the trainer: an IDX gzip loader, a
// deterministic per-worker partition of the training set and a seeded,
// per-epoch shuffling batch sampler.
//
// Everything here is a pure function of its inputs (files, seed, worker
// index), so two runs with the same flags see the same batches in the same
// order, and N workers with the same partition seed get disjoint parts that
// together cover the training set.
//
// Thread-safety: Dataset is an immutable value after loading and may be read
// from several threads. A BatchSampler is used by one thread.
#ifndef RELAXPS_APPS_TRAINER_MNIST_H_
#define RELAXPS_APPS_TRAINER_MNIST_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace relaxps {
namespace trainer {

// Images as row-major floats in [0, 1] (pixel / 255) and int32 labels.
struct Dataset {
  int rows = 0;
  int cols = 0;
  // size() * rows * cols floats.
  std::vector<float> images;
  std::vector<int32_t> labels;

  size_t size() const { return labels.size(); }
  size_t image_size() const { return static_cast<size_t>(rows) * cols; }
  const float* image(size_t i) const { return images.data() + i * image_size(); }
};

// Loads a pair of gzip-compressed IDX files (idx3 images, idx1 labels).
// Returns NotFound when a file is missing, Corruption on a bad magic number,
// an image/label count mismatch, a truncated file or trailing garbage, and
// IOError when zlib fails to read; every message names the file.
StatusOr<Dataset> LoadIdxDataset(const std::string& images_path, const std::string& labels_path);

struct FashionMnist {
  Dataset train;  // 60000 images
  Dataset test;   // 10000 images
};

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz from `dir`.
StatusOr<FashionMnist> LoadFashionMnist(const std::string& dir);

// The indices of the examples that worker `worker_index` of `num_workers`
// trains on: a seeded permutation of [0, n) cut into num_workers contiguous
// parts whose sizes differ by at most one. The same (n, num_workers, seed)
// gives disjoint parts that cover [0, n) exactly. Returned sorted.
// Returns InvalidArgument unless 0 <= worker_index < num_workers <= n.
StatusOr<std::vector<uint32_t>> PartitionIndices(size_t n, int worker_index, int num_workers,
                                                 uint64_t seed);

// A deterministic pseudo-random generator (splitmix64) for shuffles: the
// standard library's distributions differ between implementations, this does
// not.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, bound). REQUIRES: bound > 0.
  uint64_t Below(uint64_t bound);

 private:
  uint64_t state_;
};

// In-place Fisher-Yates shuffle driven by SplitMix64(seed).
void DeterministicShuffle(std::vector<uint32_t>* v, uint64_t seed);

// Hands out fixed-size mini-batches of a worker's examples. Each epoch visits
// the examples in a fresh order, a pure function of (seed, epoch); the last
// size() % batch_size examples of an epoch's order are skipped (they are
// covered in other epochs, since every epoch reshuffles).
class BatchSampler {
 public:
  // REQUIRES: data outlives the sampler; 0 < batch_size <= indices.size().
  BatchSampler(const Dataset* data, std::vector<uint32_t> indices, int batch_size,
               uint64_t seed);
  BatchSampler(const BatchSampler&) = delete;
  BatchSampler& operator=(const BatchSampler&) = delete;

  // Copies the next batch into host arrays of batch_size * image_size floats
  // and batch_size labels.
  void Next(float* images, int32_t* labels);

  // Completed epochs: incremented by the Next() call that takes an epoch's
  // last full batch.
  int64_t epoch() const { return epoch_; }
  int batch_size() const { return batch_size_; }
  size_t batches_per_epoch() const { return indices_.size() / batch_size_; }
  // The current epoch's order (for tests).
  const std::vector<uint32_t>& order() const { return order_; }

 private:
  void Reshuffle();

  // Constant after construction.
  const Dataset* const data_;
  const std::vector<uint32_t> indices_;
  const int batch_size_;
  const uint64_t seed_;

  std::vector<uint32_t> order_;
  size_t position_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace trainer
}  // namespace relaxps

#endif  // RELAXPS_APPS_TRAINER_MNIST_H_
