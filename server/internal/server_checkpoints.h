// Checkpoint duties of a server: restoring its data_dir from a checkpoint
// before the store opens, writing a checkpoint on the coordinator's request,
// and listing the checkpoints on its disk.
//
// Every disk access (restore, listing, pruning, replacing a checkpoint) goes
// through `fs`, the store's file system (ParamStoreOptions::file_system, so
// a test's FaultInjectingFileSystem reaches them too); nullptr is the real
// one. `fs` is borrowed and must outlive the call (for WriteCheckpointAsync,
// until `done` ran).
//
// Thread-safety: stateless functions; callers serialize use of the store.
// Checkpoints under one root are written one at a time (the store runs one
// background job).
#ifndef RELAXPS_SERVER_INTERNAL_SERVER_CHECKPOINTS_H_
#define RELAXPS_SERVER_INTERNAL_SERVER_CHECKPOINTS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "common/wire.h"
#include "storage/param_store.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace relaxps {
namespace server_internal {

// "<parent of data_dir>/checkpoints/<name of data_dir>"; "" if data_dir is "".
std::string DefaultCheckpointRoot(const std::string& data_dir);

// Replaces `data_dir` with the checkpoint named by `restore_from`: "latest"
// (the newest valid checkpoint under `root`) or a checkpoint directory.
// NotFound if "latest" finds none; Corruption naming the checkpoint (and the
// bad file) if it is invalid; IOError naming the path for a disk error;
// InvalidArgument without a data_dir. Errors of the restore itself name
// data_dir and the checkpoint. On error data_dir is untouched. `restored`
// (optional) gets the checkpoint's dir, clock and bytes.
Status RestoreDataDir(const std::string& restore_from, const std::string& root,
                      const std::string& data_dir, rocksdb::FileSystem* fs,
                      wire::ShardCheckpoint* restored = nullptr);

// Writes "<root>/ckpt-<clock>" from `store` (replacing an older checkpoint
// of the same clock) and then keeps only the newest `keep` under root, in
// the background where the store allows (ParamStore::CheckpointAsync).
// `done` gets this server's part of the coordinated checkpoint, on this
// thread or on the store's; it must not call into the store.
void WriteCheckpointAsync(ParamStore* store, rocksdb::FileSystem* fs, const std::string& root,
                          int64_t clock, int keep, int server_id,
                          std::function<void(StatusOr<wire::ShardCheckpoint>)> done);

// The valid checkpoints under root, oldest first.
wire::CheckpointList ListShardCheckpoints(const std::string& root, int server_id,
                                          rocksdb::FileSystem* fs);

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_SERVER_CHECKPOINTS_H_
