#include "apps/trainer/mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>

namespace relaxps {
namespace trainer {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension
// Refuse headers that promise more than this many bytes (a corrupt header
// must not trigger a huge allocation).
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 32;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Reads a gzip (or plain) file through zlib.
class GzReader {
 public:
  static StatusOr<GzReader> Open(const std::string& path) {
    errno = 0;
    gzFile f = gzopen(path.c_str(), "rb");
    if (f == nullptr) {
      if (errno == ENOENT) return NotFoundError(path + ": no such file");
      return IOError(path + ": cannot open: " + (errno ? std::strerror(errno) : "zlib error"));
    }
    gzbuffer(f, 1 << 17);
    return GzReader(path, GzHandle(f));
  }

  // Reads exactly n bytes; Corruption if the stream ends first.
  Status ReadExactly(void* out, size_t n, const char* what) {
    auto* dst = static_cast<unsigned char*>(out);
    size_t done = 0;
    while (done < n) {
      const unsigned chunk =
          static_cast<unsigned>(std::min<size_t>(n - done, std::numeric_limits<int>::max()));
      const int got = gzread(file_.get(), dst + done, chunk);
      if (got < 0) return ZlibError(what);
      if (got == 0) {
        // gzread reports a truncated gzip member as an error on some zlib
        // versions and as a short read on others; both mean corrupt input.
        int errnum = Z_OK;
        const char* msg = gzerror(file_.get(), &errnum);
        std::string detail = (errnum != Z_OK && msg != nullptr) ? std::string(": ") + msg : "";
        return CorruptionError(path_ + ": truncated while reading " + what + " (got " +
                               std::to_string(done) + " of " + std::to_string(n) + " bytes)" +
                               detail);
      }
      done += static_cast<size_t>(got);
    }
    return Status::OK();
  }

  // OK if the stream has no more data.
  Status ExpectEnd() {
    unsigned char extra;
    const int got = gzread(file_.get(), &extra, 1);
    if (got < 0) return ZlibError("the end of the file");
    if (got > 0) return CorruptionError(path_ + ": unexpected data after the last record");
    return Status::OK();
  }

  Status ReadBigEndian32(uint32_t* v, const char* what) {
    unsigned char b[4];
    RETURN_IF_ERROR(ReadExactly(b, 4, what));
    *v = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    return Status::OK();
  }

 private:
  GzReader(std::string path, GzHandle file) : path_(std::move(path)), file_(std::move(file)) {}

  Status ZlibError(const char* what) {
    int errnum = Z_OK;
    const char* msg = gzerror(file_.get(), &errnum);
    std::string text = msg != nullptr ? msg : "unknown zlib error";
    // Z_DATA_ERROR / Z_BUF_ERROR: the compressed stream itself is damaged.
    if (errnum == Z_DATA_ERROR || errnum == Z_BUF_ERROR) {
      return CorruptionError(path_ + ": corrupt gzip data while reading " + what + ": " + text);
    }
    return IOError(path_ + ": read error while reading " + what + ": " + text);
  }

  std::string path_;
  GzHandle file_;
};

Status ReadMagic(GzReader* reader, const std::string& path, uint32_t expected) {
  uint32_t magic = 0;
  RETURN_IF_ERROR(reader->ReadBigEndian32(&magic, "the IDX header"));
  if (magic != expected) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), ": bad IDX magic number 0x%08x (expected 0x%08x)", magic,
                  expected);
    return CorruptionError(path + buf);
  }
  return Status::OK();
}

}  // namespace

StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                 const std::string& labels_path) {
  Dataset data;

  // ---- Labels ----
  ASSIGN_OR_RETURN(GzReader labels, GzReader::Open(labels_path));
  RETURN_IF_ERROR(ReadMagic(&labels, labels_path, kLabelsMagic));
  uint32_t num_labels = 0;
  RETURN_IF_ERROR(labels.ReadBigEndian32(&num_labels, "the IDX header"));
  if (num_labels == 0) {  // A uint32 count is always within kMaxPayloadBytes.
    return CorruptionError(labels_path + ": implausible label count " +
                           std::to_string(num_labels));
  }
  std::vector<uint8_t> raw_labels(num_labels);
  RETURN_IF_ERROR(labels.ReadExactly(raw_labels.data(), raw_labels.size(), "the labels"));
  RETURN_IF_ERROR(labels.ExpectEnd());

  // ---- Images ----
  ASSIGN_OR_RETURN(GzReader images, GzReader::Open(images_path));
  RETURN_IF_ERROR(ReadMagic(&images, images_path, kImagesMagic));
  uint32_t num_images = 0, rows = 0, cols = 0;
  RETURN_IF_ERROR(images.ReadBigEndian32(&num_images, "the IDX header"));
  RETURN_IF_ERROR(images.ReadBigEndian32(&rows, "the IDX header"));
  RETURN_IF_ERROR(images.ReadBigEndian32(&cols, "the IDX header"));
  const uint64_t payload = uint64_t{num_images} * rows * cols;
  if (num_images == 0 || rows == 0 || cols == 0 || rows > 4096 || cols > 4096 ||
      payload > kMaxPayloadBytes) {
    return CorruptionError(images_path + ": implausible image dimensions " +
                           std::to_string(num_images) + "x" + std::to_string(rows) + "x" +
                           std::to_string(cols));
  }
  if (num_images != num_labels) {
    return CorruptionError(images_path + " has " + std::to_string(num_images) +
                           " images but " + labels_path + " has " +
                           std::to_string(num_labels) + " labels");
  }
  std::vector<uint8_t> pixels(payload);
  RETURN_IF_ERROR(images.ReadExactly(pixels.data(), pixels.size(), "the pixels"));
  RETURN_IF_ERROR(images.ExpectEnd());

  data.rows = static_cast<int>(rows);
  data.cols = static_cast<int>(cols);
  data.images.resize(payload);
  constexpr float kScale = 1.0f / 255.0f;
  for (size_t i = 0; i < payload; ++i) data.images[i] = pixels[i] * kScale;
  data.labels.assign(raw_labels.begin(), raw_labels.end());
  return data;
}

StatusOr<FashionMnist> LoadFashionMnist(const std::string& dir) {
  const std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  FashionMnist out;
  ASSIGN_OR_RETURN(out.train, LoadIdxDataset(prefix + "train-images-idx3-ubyte.gz",
                                             prefix + "train-labels-idx1-ubyte.gz"));
  ASSIGN_OR_RETURN(out.test, LoadIdxDataset(prefix + "t10k-images-idx3-ubyte.gz",
                                            prefix + "t10k-labels-idx1-ubyte.gz"));
  if (out.train.rows != out.test.rows || out.train.cols != out.test.cols) {
    return CorruptionError(dir + ": training and test images differ in size");
  }
  return out;
}

uint64_t SplitMix64::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::Below(uint64_t bound) {
  CHECK_GT(bound, 0u);
  // Rejection sampling: unbiased for every bound.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() -
                         std::numeric_limits<uint64_t>::max() % bound;
  uint64_t x;
  do {
    x = Next();
  } while (x >= limit);
  return x % bound;
}

void DeterministicShuffle(std::vector<uint32_t>* v, uint64_t seed) {
  SplitMix64 rng(seed);
  for (size_t i = v->size(); i > 1; --i) {
    const size_t j = rng.Below(i);
    std::swap((*v)[i - 1], (*v)[j]);
  }
}

StatusOr<std::vector<uint32_t>> PartitionIndices(size_t n, int worker_index, int num_workers,
                                                 uint64_t seed) {
  if (num_workers <= 0 || worker_index < 0 || worker_index >= num_workers ||
      static_cast<size_t>(num_workers) > n || n > std::numeric_limits<uint32_t>::max()) {
    return InvalidArgumentError("cannot give worker " + std::to_string(worker_index) + " of " +
                                std::to_string(num_workers) + " a part of " +
                                std::to_string(n) + " examples");
  }
  std::vector<uint32_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = static_cast<uint32_t>(i);
  // Shuffle first so every part has the same class mix in expectation.
  DeterministicShuffle(&all, seed ^ 0x70617274ULL /* "part" */);
  const size_t w = static_cast<size_t>(worker_index);
  const size_t k = static_cast<size_t>(num_workers);
  const size_t begin = w * n / k;
  const size_t end = (w + 1) * n / k;
  std::vector<uint32_t> part(all.begin() + begin, all.begin() + end);
  std::sort(part.begin(), part.end());
  return part;
}

BatchSampler::BatchSampler(const Dataset* data, std::vector<uint32_t> indices, int batch_size,
                           uint64_t seed)
    : data_(data), indices_(std::move(indices)), batch_size_(batch_size), seed_(seed) {
  CHECK(data_ != nullptr);
  CHECK_GT(batch_size_, 0);
  CHECK_LE(static_cast<size_t>(batch_size_), indices_.size())
      << "batch size larger than this worker's part of the data";
  Reshuffle();
}

void BatchSampler::Reshuffle() {
  order_ = indices_;
  SplitMix64 mix(seed_);
  DeterministicShuffle(&order_, mix.Next() ^ (static_cast<uint64_t>(epoch_) * 0x9e3779b97f4a7c15ULL));
  position_ = 0;
}

void BatchSampler::Next(float* images, int32_t* labels) {
  const size_t stride = data_->image_size();
  for (int i = 0; i < batch_size_; ++i) {
    const uint32_t idx = order_[position_ + i];
    std::memcpy(images + i * stride, data_->image(idx), stride * sizeof(float));
    labels[i] = data_->labels[idx];
  }
  position_ += batch_size_;
  if (position_ + batch_size_ > order_.size()) {
    // Too few examples left for another batch: this epoch is complete.
    ++epoch_;
    Reshuffle();
  }
}

}  // namespace trainer
}  // namespace relaxps
