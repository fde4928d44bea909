#include "storage/internal/file_util.h"

#include <filesystem>
#include <memory>
#include <vector>

#include <rocksdb/file_system.h>

#include "storage/internal/rocksdb_util.h"

namespace relaxps {
namespace storage_internal {
namespace {

using rocksdb::IOOptions;
using rocksdb::IOStatus;

bool IsMissing(const IOStatus& s) { return s.IsNotFound() || s.IsPathNotFound(); }

// "<what> <path>: <rocksdb message>" as IOError (NotFound for a missing path
// when `missing_is_not_found`).
Status PathError(const std::string& what, const std::string& path, const IOStatus& s,
                 bool missing_is_not_found = false) {
  std::string m = what + " " + path + ": " + s.ToString();
  if (missing_is_not_found && IsMissing(s)) return NotFoundError(std::move(m));
  return IOError(std::move(m));
}

// Deletes `path` and, for a directory, everything under it. The returned
// IOStatus names the entry that could not be deleted.
IOStatus RemoveTree(rocksdb::FileSystem* fs, const std::string& path) {
  const IOOptions io;
  // unlink() first: removes a file or a symlink (never following it) and
  // fails for a directory.
  IOStatus s = fs->DeleteFile(path, io, nullptr);
  if (s.ok() || IsMissing(s)) return IOStatus::OK();
  bool is_dir = false;
  IOStatus d = fs->IsDirectory(path, io, &is_dir, nullptr);
  if (IsMissing(d)) return IOStatus::OK();  // Gone meanwhile.
  if (!d.ok() || !is_dir) return s;         // The file's own delete error.
  std::vector<std::string> children;
  IOStatus l = fs->GetChildren(path, io, &children, nullptr);
  if (!l.ok()) return l;
  for (const std::string& child : children) {
    if (child == "." || child == "..") continue;
    IOStatus c = RemoveTree(fs, JoinPath(path, child));
    if (!c.ok()) return c;
  }
  s = fs->DeleteDir(path, io, nullptr);
  return IsMissing(s) ? IOStatus::OK() : s;
}

}  // namespace

rocksdb::FileSystem* DefaultFileSystem(rocksdb::FileSystem* fs) {
  return fs != nullptr ? fs : rocksdb::FileSystem::Default().get();
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string ParentDir(const std::string& path) {
  std::filesystem::path p(path);
  std::string parent = p.parent_path().string();
  return parent.empty() ? "." : parent;
}

Status ReadFile(rocksdb::FileSystem* fs, const std::string& path, std::string* contents) {
  contents->clear();
  std::unique_ptr<rocksdb::FSSequentialFile> file;
  IOStatus s = fs->NewSequentialFile(path, rocksdb::FileOptions(), &file, nullptr);
  if (!s.ok()) return PathError("cannot open", path, s, /*missing_is_not_found=*/true);
  std::vector<char> buf(1 << 16);
  for (;;) {
    rocksdb::Slice chunk;
    s = file->Read(buf.size(), IOOptions(), &chunk, buf.data(), nullptr);
    if (!s.ok()) return PathError("cannot read", path, s);
    if (chunk.empty()) break;
    contents->append(chunk.data(), chunk.size());
  }
  return Status::OK();
}

Status CopyFile(rocksdb::FileSystem* fs, const std::string& src, const std::string& dst) {
  const IOOptions io;
  std::unique_ptr<rocksdb::FSSequentialFile> in;
  IOStatus s = fs->NewSequentialFile(src, rocksdb::FileOptions(), &in, nullptr);
  if (!s.ok()) return PathError("cannot open", src, s, /*missing_is_not_found=*/true);
  if (fs->FileExists(dst, io, nullptr).ok()) {
    return IOError("cannot create " + dst + ": it already exists");
  }
  std::unique_ptr<rocksdb::FSWritableFile> out;
  s = fs->NewWritableFile(dst, rocksdb::FileOptions(), &out, nullptr);
  if (!s.ok()) return PathError("cannot create", dst, s);
  Status copied = [&]() -> Status {
    std::vector<char> buf(1 << 20);
    for (;;) {
      rocksdb::Slice chunk;
      IOStatus r = in->Read(buf.size(), io, &chunk, buf.data(), nullptr);
      if (!r.ok()) return PathError("cannot read", src, r);
      if (chunk.empty()) break;
      IOStatus w = out->Append(chunk, io, nullptr);
      if (!w.ok()) return PathError("cannot write", dst, w);
    }
    IOStatus f = out->Fsync(io, nullptr);
    if (!f.ok()) return PathError("cannot fsync", dst, f);
    return Status::OK();
  }();
  IOStatus closed = out->Close(io, nullptr);  // Always release the descriptor.
  if (copied.ok() && !closed.ok()) copied = PathError("cannot close", dst, closed);
  if (!copied.ok()) fs->DeleteFile(dst, io, nullptr).PermitUncheckedError();
  return copied;
}

Status LinkOrCopyFile(rocksdb::FileSystem* fs, const std::string& src, const std::string& dst) {
  IOStatus s = fs->LinkFile(src, dst, IOOptions(), nullptr);
  if (s.ok()) return Status::OK();
  if (s.IsNoSpace() || IsMissing(s)) {
    return PathError("cannot link " + src + " to", dst, s, /*missing_is_not_found=*/true);
  }
  return CopyFile(fs, src, dst);
}

Status RemoveAll(rocksdb::FileSystem* fs, const std::string& path) {
  IOStatus s = RemoveTree(fs, path);
  if (!s.ok()) return IOError("cannot remove " + path + ": " + s.ToString());
  return Status::OK();
}

Status CreateDirs(rocksdb::FileSystem* fs, const std::string& dir) {
  ASSIGN_OR_RETURN(const bool exists, IsDirectory(fs, dir));
  if (exists) return Status::OK();
  const std::string parent = ParentDir(dir);
  if (parent != dir && parent != "." && parent != "/") RETURN_IF_ERROR(CreateDirs(fs, parent));
  IOStatus s = fs->CreateDirIfMissing(dir, IOOptions(), nullptr);
  if (!s.ok()) return PathError("cannot create", dir, s);
  return Status::OK();
}

bool PathExists(rocksdb::FileSystem* fs, const std::string& path) {
  return fs->FileExists(path, IOOptions(), nullptr).ok();
}

StatusOr<bool> IsDirectory(rocksdb::FileSystem* fs, const std::string& path) {
  bool is_dir = false;
  IOStatus s = fs->IsDirectory(path, IOOptions(), &is_dir, nullptr);
  if (IsMissing(s)) return false;
  if (!s.ok()) return PathError("cannot stat", path, s);
  return is_dir;
}

Status SyncDir(rocksdb::FileSystem* fs, const std::string& dir) {
  std::unique_ptr<rocksdb::FSDirectory> d;
  RETURN_IF_ERROR(FromRocks(fs->NewDirectory(dir, IOOptions(), &d, nullptr),
                            "cannot open directory " + dir));
  return FromRocks(d->Fsync(IOOptions(), nullptr), "cannot fsync directory " + dir);
}

Status WriteFile(rocksdb::FileSystem* fs, const std::string& path, std::string_view contents) {
  const IOOptions io;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  RETURN_IF_ERROR(FromRocks(fs->NewWritableFile(path, rocksdb::FileOptions(), &file, nullptr),
                            "cannot create " + path));
  Status s = FromRocks(file->Append(rocksdb::Slice(contents.data(), contents.size()), io, nullptr),
                       "cannot write " + path);
  if (s.ok()) s = FromRocks(file->Sync(io, nullptr), "cannot sync " + path);
  const Status closed = FromRocks(file->Close(io, nullptr), "cannot close " + path);
  if (s.ok()) s = closed;
  if (!s.ok()) fs->DeleteFile(path, io, nullptr).PermitUncheckedError();
  return s;
}

Status WriteFileAtomic(rocksdb::FileSystem* fs, const std::string& path,
                       const std::string& contents) {
  const std::string tmp = path + ".tmp";
  RETURN_IF_ERROR(WriteFile(fs, tmp, contents));
  const IOOptions io;
  const Status s = FromRocks(fs->RenameFile(tmp, path, io, nullptr), "cannot rename to " + path);
  if (!s.ok()) {
    fs->DeleteFile(tmp, io, nullptr).PermitUncheckedError();
    return s;
  }
  return SyncDir(fs, ParentDir(path));
}

}  // namespace storage_internal
}  // namespace relaxps
