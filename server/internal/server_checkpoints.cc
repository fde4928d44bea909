#include "server/internal/server_checkpoints.h"

#include <chrono>
#include <filesystem>
#include <system_error>

#include <glog/logging.h>

#include "storage/checkpoint.h"

namespace relaxps {
namespace server_internal {
namespace {

std::string StripSlashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

}  // namespace

std::string DefaultCheckpointRoot(const std::string& data_dir) {
  if (data_dir.empty()) return "";
  // Path arithmetic only: nothing here touches the disk.
  const std::filesystem::path p(StripSlashes(data_dir));
  const std::filesystem::path parent =
      p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  return (parent / "checkpoints" / p.filename()).string();
}

Status RestoreDataDir(const std::string& restore_from, const std::string& root,
                      const std::string& data_dir, rocksdb::FileSystem* fs,
                      wire::ShardCheckpoint* restored) {
  if (data_dir.empty()) return InvalidArgumentError("--restore_from needs --data_dir");
  // The candidates, newest first: "latest" tries every complete checkpoint
  // under root (ListCheckpoints skips incomplete ones: a write that failed
  // on a full disk leaves no manifest) and falls back to an older one when
  // a newer one turns out to be damaged; a named directory is the only one.
  std::vector<std::string> candidates;
  if (restore_from == "latest") {
    std::vector<CheckpointInfo> all = ListCheckpoints(root, fs);
    if (all.empty()) {
      return NotFoundError("--restore_from=latest: no complete checkpoint under " + root);
    }
    for (auto it = all.rbegin(); it != all.rend(); ++it) candidates.push_back(it->dir);
  } else {
    candidates.push_back(restore_from);
  }
  std::string skipped;  // "dir: why; ..." of the damaged newer ones.
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string& dir = candidates[i];
    StatusOr<CheckpointInfo> info = ReadCheckpointInfo(dir, fs);
    Status s = info.ok() ? RestoreCheckpoint(dir, data_dir, fs) : info.status();
    if (!s.ok()) {
      // Only a damaged checkpoint is worth skipping; a disk error of the
      // restore itself (e.g. ENOSPC copying into data_dir) would recur.
      if (s.code() == StatusCode::kCorruption && i + 1 < candidates.size()) {
        LOG(ERROR) << "checkpoint " << dir << " cannot be restored, trying an older one: " << s;
        skipped += (skipped.empty() ? "" : "; ") + dir + ": " + s.ToString();
        continue;
      }
      return Status(s.code(), "cannot restore " + data_dir + " from checkpoint " + dir + ": " +
                                  s.message() +
                                  (skipped.empty() ? "" : " (newer ones skipped: " + skipped + ")"));
    }
    if (restored != nullptr) {
      std::error_code ec;
      restored->set_dir(std::filesystem::absolute(dir, ec).string());
      restored->set_clock(info->clock);
      restored->set_bytes(info->bytes);
    }
    LOG(INFO) << "restored " << data_dir << " from checkpoint " << dir << " (clock "
              << info->clock << (restore_from == "latest" ? ", the newest complete one" : "")
              << (skipped.empty() ? "" : "; skipped the damaged newer ones: " + skipped) << ")";
    return Status::OK();
  }
  return NotFoundError("--restore_from=" + restore_from + ": nothing to restore");  // Unreachable.
}

void WriteCheckpointAsync(ParamStore* store, rocksdb::FileSystem* fs, const std::string& root,
                          int64_t clock, int keep, int server_id,
                          std::function<void(StatusOr<wire::ShardCheckpoint>)> done) {
  if (root.empty()) {
    done(FailedPreconditionError("server " + std::to_string(server_id) +
                                 " has no checkpoint directory (store " + store->Name() +
                                 " without --data_dir / --checkpoint_dir)"));
    return;
  }
  const std::string dir = root + "/" + CheckpointDirName(clock);
  const auto start = std::chrono::steady_clock::now();
  // A second checkpoint at the same clock (e.g. a manual one while workers
  // are idle): the newer state replaces the older snapshot, once it is
  // complete (a failed write keeps the older one).
  const std::string written = dir + ".replacement";
  Status removed = RemoveCheckpoint(written, fs);
  if (!removed.ok()) {
    done(IOError("cannot write checkpoint " + dir + ": " + removed.message()));
    return;
  }
  store->CheckpointAsync(written, clock, [=](Status s) {
    if (s.ok()) s = ReplaceCheckpoint(written, dir, fs);
    if (!s.ok()) {
      RemoveCheckpoint(written, fs).IgnoreError();
      done(s);
      return;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    StatusOr<CheckpointInfo> info = ReadCheckpointInfo(dir, fs);
    if (!info.ok()) {
      done(info.status());
      return;
    }
    Status pruned = PruneCheckpoints(root, keep, fs);
    if (!pruned.ok()) LOG(WARNING) << "pruning checkpoints under " << root << ": " << pruned;
    wire::ShardCheckpoint out;
    std::error_code abs_ec;
    out.set_server(server_id);
    out.set_dir(std::filesystem::absolute(dir, abs_ec).string());
    out.set_clock(clock);
    out.set_bytes(info->bytes);
    out.set_seconds(seconds);
    LOG(INFO) << "checkpoint " << out.dir() << " (clock " << clock << ", " << info->bytes
              << " bytes) in " << seconds << " s";
    done(std::move(out));
  });
}

wire::CheckpointList ListShardCheckpoints(const std::string& root, int server_id,
                                          rocksdb::FileSystem* fs) {
  wire::CheckpointList list;
  if (root.empty()) return list;
  std::error_code ec;
  for (const CheckpointInfo& info : ListCheckpoints(root, fs)) {
    wire::ShardCheckpoint* c = list.add_checkpoints();
    c->set_server(server_id);
    c->set_dir(std::filesystem::absolute(info.dir, ec).string());
    c->set_clock(info.clock);
    c->set_bytes(info.bytes);
  }
  return list;
}

}  // namespace server_internal
}  // namespace relaxps
