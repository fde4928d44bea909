// File and directory helpers that go through a rocksdb::FileSystem (the
// store's disk seam: tests pass a FaultInjectingFileSystem to fail, delay or
// lose these operations), with Status errors that name the path.
//
// `fs` is never null here; public entry points map nullptr to
// rocksdb::FileSystem::Default() (see DefaultFileSystem).
// All functions are safe to call from any thread (on different paths).
#ifndef RELAXPS_STORAGE_INTERNAL_FILE_UTIL_H_
#define RELAXPS_STORAGE_INTERNAL_FILE_UTIL_H_

#include <string>
#include <string_view>

#include "common/status.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace relaxps {
namespace storage_internal {

// `fs`, or rocksdb::FileSystem::Default() for nullptr. Never null.
rocksdb::FileSystem* DefaultFileSystem(rocksdb::FileSystem* fs);

// Reads a whole file. NotFound if it does not exist, IOError otherwise.
Status ReadFile(rocksdb::FileSystem* fs, const std::string& path, std::string* contents);
// Copies a file and syncs the copy. `dst` must not exist. On failure a
// partial `dst` is removed (best effort) and the error names the failing path.
Status CopyFile(rocksdb::FileSystem* fs, const std::string& src, const std::string& dst);
// Hard-links src to dst, or copies it where the link fails for any reason
// but a full disk or a missing source (another device, no hard links, too
// many links, permission); syncs nothing for a link (the data is already
// durable).
Status LinkOrCopyFile(rocksdb::FileSystem* fs, const std::string& src, const std::string& dst);
// Removes a file or directory tree (a symlink itself, never its target); OK
// if it does not exist. IOError "cannot remove <path>: ..." naming the entry
// that could not be deleted.
Status RemoveAll(rocksdb::FileSystem* fs, const std::string& path);
// Creates `dir` and its missing parents. IOError naming the directory.
Status CreateDirs(rocksdb::FileSystem* fs, const std::string& dir);
// Whether `path` (a file or a directory) exists; false on any error.
bool PathExists(rocksdb::FileSystem* fs, const std::string& path);
// Whether `path` is a directory; false if it does not exist. IOError for any
// other failure to stat it.
StatusOr<bool> IsDirectory(rocksdb::FileSystem* fs, const std::string& path);
// fsyncs directory `dir` (makes renames and new entries in it durable).
Status SyncDir(rocksdb::FileSystem* fs, const std::string& dir);
// Creates `path` (truncated if it exists), writes `contents`
// and syncs it. IOError naming the file on failure; a partial file is then
// removed (best effort).
Status WriteFile(rocksdb::FileSystem* fs, const std::string& path, std::string_view contents);
// Writes `contents` to `path` atomically: a temporary file in the same
// directory, sync, rename over `path`, fsync of the directory. IOError naming
// the file (and the injected ENOSPC/EIO, if any) on failure; `path` is then
// untouched.
Status WriteFileAtomic(rocksdb::FileSystem* fs, const std::string& path,
                       const std::string& contents);
// "<dir>/<name>", without doubling a trailing '/' of dir.
std::string JoinPath(const std::string& dir, const std::string& name);
// The directory part of a path ("." for a bare name).
std::string ParentDir(const std::string& path);

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_FILE_UTIL_H_
