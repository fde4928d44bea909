// relaxps-bench-incremental-checkpoint: what a checkpoint costs when only a
// part of a dense table changed since the previous one (issue 41 point 5),
// against a checkpoint after every chunk changed, measured in the same run,
// in the same store and directory (the yardstick).
//
// A RocksDbStore holds one dense table of --mb MiB with --slots slots. Each
// round checkpoints twice, alternating: after writing every chunk (full),
// then after writing --dirty_pct percent of the chunks, spread over the
// table (incremental). Per checkpoint it measures the wall time of
// ParamStore::Checkpoint (flush of the changed chunks, RocksDB's hard-linked
// checkpoint, the manifest) and the bytes it wrote: files of the new
// checkpoint directory that are not hard links of files the previous one
// holds (compared by inode), i.e. the changed chunks and the copied
// MANIFEST/OPTIONS/manifest. Old checkpoints are pruned to --keep as a
// server does, so the chain of generations is garbage-collected as it goes.
// It also counts the syncs each checkpoint waits for (file Sync/Fsync and
// directory fsyncs on the calling thread through the store's file system:
// RocksDB's, the flush's and the checkpoint directory's), a steady figure
// where the seconds swing with the disk's load: on a busy disk each sync
// waits for a journal commit.
// The store runs in relaxps-server, whose main() tunes malloc
// (TuneMallocForLargeMessages); so does this bench unless --tune_malloc=false.
// With glibc's defaults every flush's SST writer maps, faults in and unmaps
// its 1 MiB direct-I/O buffer: about 0.8 ms of CPU per checkpoint that the
// server does not pay, a fixed cost that weighs on the incremental one.
// After the last round the newest checkpoint is restored into a new data_dir
// and compared bit for bit with the live table: an inexact restore fails the
// bench (exit 1).
//
// Prints one JSON object on stdout:
//   {"bench":"incremental_checkpoint","mb":..,"dirty_pct":..,"results":[
//     {"name":"checkpoint/incremental_10pct/bytes", "value":.., "yardstick":
//      "checkpoint/full/bytes", "yardstick_value":.., "ratio":.., ...},
//     {"name":"checkpoint/incremental_10pct/seconds", ...},
//     {"name":"checkpoint/incremental_10pct/syncs", ...}]}
// (medians over --rounds).
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>
#include <rocksdb/file_system.h>

#include "common/buffer_pool.h"
#include "common/flag_help.h"
#include "bench/scratch_dir.h"
#include "storage/checkpoint.h"
#include "storage/param_store.h"

DEFINE_int64(mb, 64, "Size of the dense table (one slot) in MiB.");
DEFINE_int32(slots, 1, "Slots per key (1: parameters only; 3: Adam's two moments too).");
DEFINE_double(dirty_pct, 10, "Percent of the chunks written before each incremental checkpoint.");
DEFINE_int32(rounds, 5, "Full + incremental checkpoint pairs; medians are reported.");
DEFINE_int32(keep, 2, "Checkpoints kept (older ones pruned, as a server's --keep_checkpoints).");
DEFINE_bool(tune_malloc, true,
            "Call TuneMallocForLargeMessages() as relaxps-server does (false: glibc's defaults, "
            "for comparison).");
DEFINE_string(dir, "/tmp", "Directory to work in; a scratch subdirectory is made and removed.");

namespace relaxps {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kChunkFloats = 16384;  // 64 KiB: the store's dense chunk.

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Counts the syncs that the thread which created it makes through the file
// system it wraps: those a synchronous Checkpoint waits for (RocksDB's
// background compactions sync on their own threads, now and then).
class SyncCountingFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit SyncCountingFileSystem(std::shared_ptr<rocksdb::FileSystem> target)
      : FileSystemWrapper(std::move(target)), syncs_(std::this_thread::get_id()) {}
  const char* Name() const override { return "SyncCountingFileSystem"; }
  uint64_t syncs() const { return syncs_.count.load(); }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    return Wrap(target()->NewWritableFile(f, o, r, d), r);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* d) override {
    return Wrap(target()->ReopenWritableFile(f, o, r, d), r);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* d) override {
    return Wrap(target()->ReuseWritableFile(f, old, o, r, d), r);
  }
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& o,
                                 std::unique_ptr<rocksdb::FSDirectory>* r,
                                 rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = target()->NewDirectory(name, o, r, d);
    if (s.ok()) *r = std::make_unique<Directory>(std::move(*r), &syncs_);
    return s;
  }

 private:
  struct Counter {
    explicit Counter(std::thread::id t) : thread(t) {}
    void Add() {
      if (std::this_thread::get_id() == thread) count.fetch_add(1);
    }
    const std::thread::id thread;
    std::atomic<uint64_t> count{0};
  };
  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, Counter* syncs)
        : FSWritableFileOwnerWrapper(std::move(f)), syncs_(syncs) {}
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      syncs_->Add();
      return target()->Sync(o, d);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      syncs_->Add();
      return target()->Fsync(o, d);
    }

   private:
    Counter* const syncs_;
  };
  class Directory final : public rocksdb::FSDirectoryWrapper {
   public:
    Directory(std::unique_ptr<rocksdb::FSDirectory> d, Counter* syncs)
        : FSDirectoryWrapper(std::move(d)), syncs_(syncs) {}
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      syncs_->Add();
      return FSDirectoryWrapper::Fsync(o, d);
    }
    rocksdb::IOStatus FsyncWithDirOptions(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d,
                                          const rocksdb::DirFsyncOptions& f) override {
      syncs_->Add();
      return FSDirectoryWrapper::FsyncWithDirOptions(o, d, f);
    }

   private:
    Counter* const syncs_;
  };

  rocksdb::IOStatus Wrap(rocksdb::IOStatus s, std::unique_ptr<rocksdb::FSWritableFile>* r) {
    if (s.ok()) *r = std::make_unique<File>(std::move(*r), &syncs_);
    return s;
  }

  Counter syncs_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Bytes of the files under `dir` whose inode is not in `old_inodes`; adds
// every inode under dir to `inodes`.
uint64_t NewBytes(const std::string& dir, const std::set<ino_t>& old_inodes,
                  std::set<ino_t>* inodes) {
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    struct stat st;
    if (::stat(e.path().c_str(), &st) != 0) continue;
    inodes->insert(st.st_ino);
    if (!old_inodes.count(st.st_ino)) bytes += static_cast<uint64_t>(st.st_size);
  }
  return bytes;
}

int Fail(const Status& s) {
  fprintf(stderr, "relaxps-bench-incremental-checkpoint: %s\n", s.ToString().c_str());
  return 1;
}

int Run() {
  if (FLAGS_mb <= 0 || FLAGS_slots < 1 || FLAGS_rounds < 1 || FLAGS_keep < 1 ||
      !(FLAGS_dirty_pct > 0 && FLAGS_dirty_pct <= 100)) {
    fprintf(stderr, "--mb, --slots, --rounds, --keep must be positive, 0 < --dirty_pct <= 100\n");
    return 2;
  }
  const size_t n = (static_cast<size_t>(FLAGS_mb) << 20) / sizeof(float);
  const size_t chunks = (n + kChunkFloats - 1) / kChunkFloats;
  const size_t stride = std::max<size_t>(1, static_cast<size_t>(100.0 / FLAGS_dirty_pct + 0.5));
  const bench::ScratchDir scratch(FLAGS_dir, "relaxps-incremental-bench");
  if (!scratch.ok()) {
    fprintf(stderr, "cannot create a scratch directory under %s\n", FLAGS_dir.c_str());
    return 1;
  }
  const std::string& root = scratch.path();

  auto counting = std::make_shared<SyncCountingFileSystem>(rocksdb::FileSystem::Default());
  ParamStoreOptions options;
  options.data_dir = root + "/db";
  options.file_system = counting;
  StatusOr<std::unique_ptr<ParamStore>> store = NewParamStore(options);
  if (!store.ok()) return Fail(store.status());
  DenseShardSpec spec;
  spec.table = "bench";
  spec.end = n;
  spec.num_slots = FLAGS_slots;
  StatusOr<DenseShard*> shard = (*store)->CreateDense(spec);
  if (!shard.ok()) return Fail(shard.status());
  DenseShard* t = *shard;

  float value = 0.0f;
  // Writes chunks c = first, first + step, ... (every slot), as an
  // optimizer step would, announcing each write to the store.
  auto write = [&](size_t first, size_t step) -> Status {
    value += 1.0f;
    for (size_t c = first; c < chunks; c += step) {
      const size_t begin = c * kChunkFloats;
      const size_t len = std::min(kChunkFloats, n - begin);
      (*store)->BeforeDenseWrite(t);
      for (int s = 0; s < FLAGS_slots; ++s) {
        float* p = t->slots[s] + begin;
        for (size_t i = 0; i < len; ++i) p[i] = value + static_cast<float>((begin + i) % 977);
      }
      RETURN_IF_ERROR((*store)->DenseUpdated(t, begin, len));
    }
    return Status::OK();
  };

  const std::string ckpts = root + "/checkpoints";
  std::set<ino_t> previous;
  int64_t clock = 0;
  std::string newest;
  // One checkpoint: its seconds, new bytes and syncs.
  double syncs = 0;
  auto checkpoint = [&](double* seconds, uint64_t* bytes) -> Status {
    ++clock;
    newest = ckpts + "/" + CheckpointDirName(clock);
    const uint64_t syncs_before = counting->syncs();
    const auto start = Clock::now();
    RETURN_IF_ERROR((*store)->Checkpoint(newest, clock));
    *seconds = Since(start);
    syncs = static_cast<double>(counting->syncs() - syncs_before);
    std::set<ino_t> now;
    *bytes = NewBytes(newest, previous, &now);
    previous.swap(now);
    return PruneCheckpoints(ckpts, FLAGS_keep);
  };

  // A first full checkpoint, not counted: the store's first base.
  double s0;
  uint64_t b0;
  if (Status s = write(0, 1); !s.ok()) return Fail(s);
  if (Status s = checkpoint(&s0, &b0); !s.ok()) return Fail(s);

  std::vector<double> full_s, full_b, full_n, inc_s, inc_b, inc_n;
  for (int r = 0; r < FLAGS_rounds; ++r) {
    double sec;
    uint64_t bytes;
    if (Status s = write(0, 1); !s.ok()) return Fail(s);
    if (Status s = checkpoint(&sec, &bytes); !s.ok()) return Fail(s);
    full_s.push_back(sec);
    full_b.push_back(static_cast<double>(bytes));
    full_n.push_back(syncs);
    // A different tenth each round, so the deltas do not just overwrite
    // one another.
    if (Status s = write(static_cast<size_t>(r) % stride, stride); !s.ok()) return Fail(s);
    if (Status s = checkpoint(&sec, &bytes); !s.ok()) return Fail(s);
    inc_s.push_back(sec);
    inc_b.push_back(static_cast<double>(bytes));
    inc_n.push_back(syncs);
  }
  // A chain of incremental checkpoints, then the exactness check of the
  // newest one (restored into a new data_dir and reopened).
  for (size_t r = 1; r < 4; ++r) {
    double sec;
    uint64_t bytes;
    if (Status s = write(r % stride, stride); !s.ok()) return Fail(s);
    if (Status s = checkpoint(&sec, &bytes); !s.ok()) return Fail(s);
  }
  const size_t kept = ListCheckpoints(ckpts).size();
  std::vector<std::vector<float>> live(FLAGS_slots);
  for (int s = 0; s < FLAGS_slots; ++s) live[s].assign(t->slots[s], t->slots[s] + n);
  store->reset();
  const std::string restored = root + "/restored";
  if (Status s = RestoreCheckpoint(newest, restored); !s.ok()) return Fail(s);
  options.data_dir = restored;
  StatusOr<std::unique_ptr<ParamStore>> reopened = NewParamStore(options);
  if (!reopened.ok()) return Fail(reopened.status());
  DenseShard* loaded = (*reopened)->GetDense("bench");
  if (loaded == nullptr) return Fail(NotFoundError("restored store has no table 'bench'"));
  for (int s = 0; s < FLAGS_slots; ++s) {
    if (std::memcmp(loaded->slots[s], live[s].data(), n * sizeof(float)) != 0) {
      return Fail(CorruptionError("the restored incremental checkpoint differs from the table"));
    }
  }

  const double fb = Median(full_b), fs = Median(full_s), ib = Median(inc_b), is = Median(inc_s);
  const double fn = Median(full_n), in = Median(inc_n);
  const std::string label = "checkpoint/incremental_" + std::to_string(static_cast<int>(FLAGS_dirty_pct)) + "pct";
  printf("{\"bench\":\"incremental_checkpoint\",\"mb\":%lld,\"slots\":%d,\"dirty_pct\":%g,"
         "\"rounds\":%d,\"tune_malloc\":%s,\"checkpoints_kept\":%zu,\"restore_exact\":true,\"results\":["
         "{\"name\":\"%s/bytes\",\"value\":%.0f,\"unit\":\"bytes\",\"yardstick\":"
         "\"checkpoint/full/bytes\",\"yardstick_value\":%.0f,\"ratio\":%.4f,\"better\":\"lower\"},"
         "{\"name\":\"%s/seconds\",\"value\":%.5f,\"unit\":\"s\",\"yardstick\":"
         "\"checkpoint/full/seconds\",\"yardstick_value\":%.5f,\"ratio\":%.4f,\"better\":\"lower\"},"
         "{\"name\":\"%s/syncs\",\"value\":%.0f,\"unit\":\"syncs\",\"yardstick\":"
         "\"checkpoint/full/syncs\",\"yardstick_value\":%.0f,\"ratio\":%.4f,\"better\":\"lower\"}"
         "]}\n",
         static_cast<long long>(FLAGS_mb), FLAGS_slots, FLAGS_dirty_pct, FLAGS_rounds,
         FLAGS_tune_malloc ? "true" : "false", kept,
         label.c_str(), ib, fb, fb > 0 ? ib / fb : 0.0, label.c_str(), is, fs,
         fs > 0 ? is / fs : 0.0, label.c_str(), in, fn, fn > 0 ? in / fn : 0.0);
  return 0;
}

}  // namespace
}  // namespace relaxps

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "Bytes and time of an incremental checkpoint (--dirty_pct of the chunks changed) against "
      "a full one, and an exact restore of the newest.");
  relaxps::ParseFlagsWithHelp(&argc, &argv);
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_tune_malloc) relaxps::TuneMallocForLargeMessages();
  return relaxps::Run();
}
