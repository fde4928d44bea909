// Tests of the Fashion-MNIST loader, the per-worker partition and the
// shuffling batch sampler.
#include "apps/trainer/mnist.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace relaxps {
namespace trainer {
namespace {

const char kDataDir[] = "/usr/share/datasets/fashion-mnist";

bool DataPresent() {
  struct stat st;
  return stat((std::string(kDataDir) + "/train-images-idx3-ubyte.gz").c_str(), &st) == 0;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/relaxps_mnist_test_XXXXXX";
    const char* dir = mkdtemp(tmpl);
    EXPECT_NE(dir, nullptr);
    path_ = dir != nullptr ? dir : "/tmp";
  }
  ~TempDir() {
    const std::string cmd = "rm -rf '" + path_ + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "cannot remove %s\n", path_.c_str());
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void Put32(std::string* s, uint32_t v) {
  s->push_back(static_cast<char>(v >> 24));
  s->push_back(static_cast<char>(v >> 16));
  s->push_back(static_cast<char>(v >> 8));
  s->push_back(static_cast<char>(v));
}

std::string ImagesIdx(uint32_t n, uint32_t rows, uint32_t cols, uint32_t magic = 0x803) {
  std::string s;
  Put32(&s, magic);
  Put32(&s, n);
  Put32(&s, rows);
  Put32(&s, cols);
  for (uint32_t i = 0; i < n * rows * cols; ++i) s.push_back(static_cast<char>(i % 256));
  return s;
}

std::string LabelsIdx(uint32_t n, uint32_t magic = 0x801) {
  std::string s;
  Put32(&s, magic);
  Put32(&s, n);
  for (uint32_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i % 10));
  return s;
}

void WriteGzip(const std::string& path, const std::string& content) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, content.data(), static_cast<unsigned>(content.size())),
            static_cast<int>(content.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// Keeps the first `keep` bytes of a file.
void Truncate(const std::string& path, long keep) { ASSERT_EQ(truncate(path.c_str(), keep), 0); }

long FileSize(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0);
  return st.st_size;
}

TEST(MnistTest, LoadsTheRealFiles) {
  if (!DataPresent()) GTEST_SKIP() << "Fashion-MNIST not installed in " << kDataDir;
  StatusOr<FashionMnist> data = LoadFashionMnist(kDataDir);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train.size(), 60000u);
  EXPECT_EQ(data->test.size(), 10000u);
  EXPECT_EQ(data->train.rows, 28);
  EXPECT_EQ(data->train.cols, 28);
  EXPECT_EQ(data->train.images.size(), 60000u * 784);
  EXPECT_EQ(data->test.images.size(), 10000u * 784);
  for (const Dataset* set : {&data->train, &data->test}) {
    std::vector<int> counts(10, 0);
    for (int32_t label : set->labels) {
      ASSERT_GE(label, 0);
      ASSERT_LE(label, 9);
      ++counts[label];
    }
    // Fashion-MNIST is balanced: 6000 / 1000 per class.
    for (int c = 0; c < 10; ++c) EXPECT_EQ(counts[c], static_cast<int>(set->size() / 10));
    const auto [lo, hi] = std::minmax_element(set->images.begin(), set->images.end());
    EXPECT_EQ(*lo, 0.0f);
    EXPECT_EQ(*hi, 1.0f);
  }
}

TEST(MnistTest, LoadsASmallGzipPair) {
  TempDir dir;
  WriteGzip(dir.file("img.gz"), ImagesIdx(5, 2, 3));
  WriteGzip(dir.file("lbl.gz"), LabelsIdx(5));
  StatusOr<Dataset> d = LoadIdxDataset(dir.file("img.gz"), dir.file("lbl.gz"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 5u);
  EXPECT_EQ(d->rows, 2);
  EXPECT_EQ(d->cols, 3);
  EXPECT_FLOAT_EQ(d->image(1)[0], 6.0f / 255.0f);
  EXPECT_EQ(d->labels[4], 4);
}

TEST(MnistTest, MissingFileIsNotFoundAndNamed) {
  TempDir dir;
  StatusOr<FashionMnist> data = LoadFashionMnist(dir.file("nowhere"));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kNotFound);
  EXPECT_NE(data.status().message().find("nowhere/train-labels-idx1-ubyte.gz"),
            std::string::npos)
      << data.status();
}

TEST(MnistTest, TruncatedGzipIsCorruptionAndNamed) {
  TempDir dir;
  WriteGzip(dir.file("img.gz"), ImagesIdx(50, 28, 28));
  WriteGzip(dir.file("lbl.gz"), LabelsIdx(50));
  Truncate(dir.file("img.gz"), FileSize(dir.file("img.gz")) / 2);
  StatusOr<Dataset> d = LoadIdxDataset(dir.file("img.gz"), dir.file("lbl.gz"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << d.status();
  EXPECT_NE(d.status().message().find(dir.file("img.gz")), std::string::npos) << d.status();
}

TEST(MnistTest, TruncatedRealFileIsCorruptionAndNamed) {
  if (!DataPresent()) GTEST_SKIP() << "Fashion-MNIST not installed";
  TempDir dir;
  const std::string src = std::string(kDataDir) + "/t10k-labels-idx1-ubyte.gz";
  ASSERT_EQ(std::system(("cp '" + src + "' '" + dir.file("lbl.gz") + "'").c_str()), 0);
  Truncate(dir.file("lbl.gz"), 3000);
  StatusOr<Dataset> d = LoadIdxDataset(
      std::string(kDataDir) + "/t10k-images-idx3-ubyte.gz", dir.file("lbl.gz"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << d.status();
  EXPECT_NE(d.status().message().find(dir.file("lbl.gz")), std::string::npos) << d.status();
}

TEST(MnistTest, BadMagicCountMismatchAndTrailingDataAreCorruption) {
  TempDir dir;
  WriteGzip(dir.file("lbl.gz"), LabelsIdx(5));
  WriteGzip(dir.file("bad_magic.gz"), ImagesIdx(5, 2, 2, 0x801));
  WriteGzip(dir.file("six.gz"), ImagesIdx(6, 2, 2));
  WriteGzip(dir.file("extra.gz"), ImagesIdx(5, 2, 2) + "xyz");
  for (const char* name : {"bad_magic.gz", "six.gz", "extra.gz"}) {
    StatusOr<Dataset> d = LoadIdxDataset(dir.file(name), dir.file("lbl.gz"));
    ASSERT_FALSE(d.ok()) << name;
    EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << name << ": " << d.status();
    EXPECT_NE(d.status().message().find(dir.file(name)), std::string::npos) << d.status();
  }
  // Not gzip at all: the garbage is read as a (bad) header.
  FILE* f = std::fopen(dir.file("plain.gz").c_str(), "w");
  std::fputs("this is not an IDX file", f);
  std::fclose(f);
  StatusOr<Dataset> d = LoadIdxDataset(dir.file("plain.gz"), dir.file("lbl.gz"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << d.status();
}

TEST(MnistTest, PartitionIsDisjointCoveringBalancedAndDeterministic) {
  constexpr size_t kN = 1003;
  for (int workers : {1, 2, 3, 7}) {
    std::vector<int> owner(kN, -1);
    size_t smallest = kN, largest = 0;
    for (int w = 0; w < workers; ++w) {
      StatusOr<std::vector<uint32_t>> part = PartitionIndices(kN, w, workers, 42);
      ASSERT_TRUE(part.ok()) << part.status();
      smallest = std::min(smallest, part->size());
      largest = std::max(largest, part->size());
      for (uint32_t i : *part) {
        ASSERT_LT(i, kN);
        EXPECT_EQ(owner[i], -1) << "example " << i << " in two parts";
        owner[i] = w;
      }
      StatusOr<std::vector<uint32_t>> again = PartitionIndices(kN, w, workers, 42);
      EXPECT_EQ(*part, *again);
    }
    for (size_t i = 0; i < kN; ++i) EXPECT_NE(owner[i], -1) << "example " << i << " unused";
    EXPECT_LE(largest - smallest, 1u);
  }
  // The seed matters; a part is not simply a contiguous block.
  EXPECT_NE(*PartitionIndices(kN, 0, 2, 1), *PartitionIndices(kN, 0, 2, 2));
  std::vector<uint32_t> p = *PartitionIndices(kN, 0, 2, 1);
  EXPECT_GT(p.back() - p.front(), kN / 2 + 100);
  EXPECT_FALSE(PartitionIndices(kN, 2, 2, 1).ok());
  EXPECT_FALSE(PartitionIndices(kN, -1, 2, 1).ok());
  EXPECT_FALSE(PartitionIndices(3, 0, 4, 1).ok());
}

TEST(MnistTest, SamplerReshufflesEachEpochDeterministically) {
  Dataset data;
  data.rows = 1;
  data.cols = 2;
  for (int i = 0; i < 10; ++i) {
    data.images.push_back(static_cast<float>(i));
    data.images.push_back(-static_cast<float>(i));
    data.labels.push_back(i);
  }
  std::vector<uint32_t> part = {0, 2, 3, 5, 6, 7, 9};
  BatchSampler a(&data, part, 3, 17), b(&data, part, 3, 17), c(&data, part, 3, 18);
  EXPECT_EQ(a.batches_per_epoch(), 2u);
  std::vector<std::vector<int32_t>> epochs_a(3);
  std::vector<int32_t> all_b, all_c;
  for (int step = 0; step < 6; ++step) {
    float images[6];
    int32_t labels[3], labels_b[3], labels_c[3];
    EXPECT_EQ(a.epoch(), step / 2);
    a.Next(images, labels);
    b.Next(images, labels_b);
    c.Next(images, labels_c);
    for (int i = 0; i < 3; ++i) {
      // Images travel with their labels.
      EXPECT_EQ(images[2 * i], static_cast<float>(labels_c[i]));
      EXPECT_EQ(images[2 * i + 1], -static_cast<float>(labels_c[i]));
      epochs_a[step / 2].push_back(labels[i]);
      all_b.push_back(labels_b[i]);
      all_c.push_back(labels_c[i]);
    }
  }
  EXPECT_EQ(a.epoch(), 3);
  std::vector<int32_t> all_a;
  for (const auto& e : epochs_a) {
    // Within an epoch no example repeats, and only the worker's own appear.
    std::set<int32_t> unique(e.begin(), e.end());
    EXPECT_EQ(unique.size(), e.size());
    for (int32_t l : e) EXPECT_TRUE(std::count(part.begin(), part.end(), l)) << l;
    all_a.insert(all_a.end(), e.begin(), e.end());
  }
  EXPECT_EQ(all_a, all_b);  // same seed, same order
  EXPECT_NE(all_a, all_c);  // another seed, another order
  EXPECT_NE(epochs_a[0], epochs_a[1]);  // reshuffled per epoch
}

}  // namespace
}  // namespace trainer
}  // namespace relaxps
