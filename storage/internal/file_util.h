// Small POSIX file helpers with Status errors that name the path.
//
// All functions are safe to call from any thread (on different paths).
#ifndef RELAXPS_STORAGE_INTERNAL_FILE_UTIL_H_
#define RELAXPS_STORAGE_INTERNAL_FILE_UTIL_H_

#include <string>

#include "common/status.h"

namespace relaxps {
namespace storage_internal {

// fsyncs a file or a directory.
Status SyncPath(const std::string& path);
// Reads a whole file. NotFound if it does not exist.
Status ReadFile(const std::string& path, std::string* contents);
// Copies a regular file and fsyncs the copy. `dst` must not exist.
Status CopyFile(const std::string& src, const std::string& dst);
// Hard-links src to dst, or copies it where links are impossible (EXDEV,
// EPERM); fsyncs nothing for a link (the data is already durable).
Status LinkOrCopyFile(const std::string& src, const std::string& dst);
// Removes a file or directory tree; OK if it does not exist.
Status RemoveAll(const std::string& path);
bool PathExists(const std::string& path);
// The directory part of a path ("." for a bare name).
std::string ParentDir(const std::string& path);

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_FILE_UTIL_H_
