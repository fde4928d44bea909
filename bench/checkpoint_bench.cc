// relaxps-bench-checkpoint: cost of durability for a dense table in a
// RocksDbStore, next to a plain sequential write + fsync of the same number of
// bytes measured in the same run, in the same directory (the yardstick).
//
//   flush_s       Flush() of a freshly written --mb MiB dense shard.
//   checkpoint_s  Checkpoint() right after that Flush (a re-flush that finds
//                 no changed chunks, RocksDB's hard-linked checkpoint, the
//                 manifest).
//   restore_s     RestoreCheckpoint() into a new data_dir (verifying every
//                 block checksum) + reopening the store + loading the shard.
//   ratio_*       *_s / seq_write_fsync_s.
//   async_stall_s What a training loop waits for when it checkpoints a
//                 freshly written table with CheckpointAsync and writes the
//                 table right away (the call plus BeforeDenseWrite), next to
//                 memcpy_s, a memcpy of the table into a warm buffer (the
//                 snapshot itself): ratio_stall = async_stall_s / memcpy_s.
//   async_total_s Until that checkpoint is on disk.
//
// Prints one JSON object on stdout:
//   {"checkpoint":{"bytes":...,"flush_s":...,"checkpoint_s":...,"restore_s":...,
//     "seq_write_fsync_s":...,"ratio_checkpoint":...,"ratio_restore":...,
//     "async_stall_s":...,"async_total_s":...,"memcpy_s":...,"ratio_stall":...}}
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "bench/scratch_dir.h"
#include "storage/checkpoint.h"
#include "storage/param_store.h"
#include "common/flag_help.h"

DEFINE_int64(mb, 256, "Size of the dense table (and of the sequential write) in MiB.");
DEFINE_string(dir, "/tmp", "Directory to work in; a scratch subdirectory is made and removed.");

namespace relaxps {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Writes `bytes` to `path` in 1 MiB writes, then fsyncs. Seconds, or < 0.
double SeqWriteFsync(const std::string& path, size_t bytes) {
  std::vector<char> buf(1 << 20);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(i * 131 + 7);
  const auto start = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(buf.size(), bytes - done);
    const ssize_t w = ::write(fd, buf.data(), n);
    if (w <= 0) {
      ::close(fd);
      return -1;
    }
    done += static_cast<size_t>(w);
  }
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok ? Since(start) : -1;
}

float ValueAt(size_t i) { return static_cast<float>((i * 2654435761u) % 1000003) * 1e-3f; }

int Run() {
  if (FLAGS_mb <= 0) {
    fprintf(stderr, "--mb must be positive\n");
    return 2;
  }
  const size_t bytes = static_cast<size_t>(FLAGS_mb) << 20;
  const size_t n = bytes / sizeof(float);
  const bench::ScratchDir scratch(FLAGS_dir, "relaxps-checkpoint-bench");
  if (!scratch.ok()) {
    fprintf(stderr, "cannot create a scratch directory under %s\n", FLAGS_dir.c_str());
    return 1;
  }
  const std::string& root = scratch.path();

  const double seq_s = SeqWriteFsync(root + "/seq.bin", bytes);
  if (seq_s < 0) {
    fprintf(stderr, "sequential write to %s/seq.bin failed\n", root.c_str());
    return 1;
  }
  std::filesystem::remove(root + "/seq.bin");

  ParamStoreOptions options;
  options.data_dir = root + "/db";
  StatusOr<std::unique_ptr<ParamStore>> store = NewParamStore(options);
  if (!store.ok()) {
    fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  DenseShardSpec spec;
  spec.table = "bench";
  spec.end = n;
  StatusOr<DenseShard*> shard = (*store)->CreateDense(spec);
  if (!shard.ok()) {
    fprintf(stderr, "%s\n", shard.status().ToString().c_str());
    return 1;
  }
  (*store)->BeforeDenseWrite(*shard);  // Announces the write, so Flush persists it.
  for (size_t i = 0; i < n; ++i) (*shard)->slots[0][i] = ValueAt(i);

  auto start = Clock::now();
  Status s = (*store)->Flush(1);
  if (s.ok()) s = (*store)->WaitForFlush();  // Flush only starts the background write.
  const double flush_s = Since(start);
  const std::string ckpt = root + "/ckpts/" + CheckpointDirName(1);
  if (s.ok()) {
    start = Clock::now();
    s = (*store)->Checkpoint(ckpt, 1);
  }
  const double checkpoint_s = Since(start);
  if (!s.ok()) {
    fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  // A checkpoint in the background, the table written again at once.
  (*store)->BeforeDenseWrite(*shard);
  for (size_t i = 0; i < n; ++i) (*shard)->slots[0][i] = ValueAt(i) + 1.0f;
  std::promise<Status> async_done;
  start = Clock::now();
  (*store)->CheckpointAsync(root + "/ckpts/" + CheckpointDirName(2), 2,
                            [&](Status st) { async_done.set_value(st); });
  (*store)->BeforeDenseWrite(*shard);
  const double async_stall_s = Since(start);
  s = async_done.get_future().get();
  const double async_total_s = Since(start);
  if (!s.ok()) {
    fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  double memcpy_s = 1e9;  // Best of 3 into a warm buffer.
  {
    std::vector<float> copy(n, 0.0f);
    for (int rep = 0; rep < 3; ++rep) {
      const auto t = Clock::now();
      std::memcpy(copy.data(), (*shard)->slots[0], bytes);
      memcpy_s = std::min(memcpy_s, Since(t));
    }
  }
  store->reset();

  start = Clock::now();
  const std::string restored = root + "/restored";
  s = RestoreCheckpoint(ckpt, restored);
  options.data_dir = restored;
  StatusOr<std::unique_ptr<ParamStore>> reopened =
      s.ok() ? NewParamStore(options) : StatusOr<std::unique_ptr<ParamStore>>(s);
  DenseShard* loaded = reopened.ok() ? (*reopened)->GetDense("bench") : nullptr;
  const double restore_s = Since(start);
  if (loaded == nullptr) {
    fprintf(stderr, "restore failed: %s\n", reopened.status().ToString().c_str());
    return 1;
  }
  for (size_t i = 0; i < n; i += 4099) {
    if (loaded->slots[0][i] != ValueAt(i)) {
      fprintf(stderr, "restored value %zu differs\n", i);
      return 1;
    }
  }

  printf("{\"checkpoint\":{\"bytes\":%zu,\"flush_s\":%.4f,\"checkpoint_s\":%.4f,"
         "\"restore_s\":%.4f,\"seq_write_fsync_s\":%.4f,\"ratio_checkpoint\":%.4f,"
         "\"ratio_restore\":%.4f,\"async_stall_s\":%.4f,\"async_total_s\":%.4f,"
         "\"memcpy_s\":%.4f,\"ratio_stall\":%.4f}}\n",
         bytes, flush_s, checkpoint_s, restore_s, seq_s, checkpoint_s / seq_s, restore_s / seq_s,
         async_stall_s, async_total_s, memcpy_s, async_stall_s / memcpy_s);
  return 0;
}

}  // namespace
}  // namespace relaxps

int main(int argc, char** argv) {
  gflags::SetUsageMessage("Times Flush, Checkpoint and restore of a dense RocksDbStore table.");
  relaxps::ParseFlagsWithHelp(&argc, &argv);
  google::InitGoogleLogging(argv[0]);
  return relaxps::Run();
}
