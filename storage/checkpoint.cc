// Checkpoint manifests, restore, list and prune (see checkpoint.h).
//
// Manifest format (text, one record per line):
//   relaxps-checkpoint 2
//   clock <int64>
//   store <name>
//   table <percent-encoded name>        (one per table)
//   file <name> <size>                  (one per separate data file)
//   packed <name> <size>                (one per file carried in the manifest)
//   data <bytes>                        (the sum of the packed sizes; then the
//                                        packed files' bytes back to back, in
//                                        the order of their records, and "\n")
//   crc32c <8 hex digits>               (over every byte before this line)
// Version 1 (written before packing) has no packed and data records: every
// file of the checkpoint is separate.
#include "storage/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include <glog/logging.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include "storage/internal/checkpoint_manifest.h"
#include "storage/internal/crc32c.h"
#include "storage/internal/file_util.h"
#include "storage/internal/rocksdb_util.h"
#include "storage/internal/store_format.h"

namespace relaxps {
namespace {

using storage_internal::Crc32c;
using storage_internal::DefaultFileSystem;
using storage_internal::JoinPath;

constexpr char kManifestHeaderV1[] = "relaxps-checkpoint 1";
constexpr char kManifestHeader[] = "relaxps-checkpoint 2";
constexpr char kCheckpointPrefix[] = "ckpt-";

std::string PercentEncode(const std::string& s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == '/' || c == ':') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

bool PercentDecode(const std::string& s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out->push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return false;
    unsigned v;
    if (std::sscanf(s.substr(i + 1, 2).c_str(), "%2x", &v) != 1) return false;
    out->push_back(static_cast<char>(v));
    i += 2;
  }
  return true;
}

std::string Hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

// Parses "ckpt-<clock>"; false for any other name.
bool ParseCheckpointDirName(const std::string& name, int64_t* clock) {
  const size_t n = sizeof(kCheckpointPrefix) - 1;
  if (name.compare(0, n, kCheckpointPrefix) != 0 || name.size() == n) return false;
  int64_t v = 0;
  for (size_t i = n; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || v > (INT64_MAX - 9) / 10) return false;
    v = v * 10 + (name[i] - '0');
  }
  *clock = v;
  return true;
}

// Opens the copy in `dir` read-only through `fs` and checks every block.
Status VerifyRestoredStore(const std::string& dir, rocksdb::FileSystem* fs) {
  // An Env over `fs` (borrowed: the aliasing shared_ptr owns nothing); the
  // default file system keeps rocksdb's default Env.
  std::unique_ptr<rocksdb::Env> env;
  if (fs != rocksdb::FileSystem::Default().get()) {
    env = rocksdb::NewCompositeEnv(
        std::shared_ptr<rocksdb::FileSystem>(std::shared_ptr<void>(), fs));
  }
  rocksdb::Options options = storage_internal::MakeDbOptions(ParamStoreOptions{}, env.get());
  options.create_if_missing = false;
  rocksdb::DB* raw = nullptr;
  RETURN_IF_ERROR(storage_internal::FromRocks(rocksdb::DB::OpenForReadOnly(options, dir, &raw),
                                              "cannot open"));
  std::unique_ptr<rocksdb::DB> db(raw);
  RETURN_IF_ERROR(storage_internal::FromRocks(db->VerifyChecksum(), "checksum verification"));
  std::string value;
  RETURN_IF_ERROR(storage_internal::FromRocks(
      db->Get(rocksdb::ReadOptions(), storage_internal::kStoreMetaKey, &value),
      "cannot read store metadata"));
  storage_internal::StoreMeta meta;
  return storage_internal::DecodeStoreMeta(value, "store metadata", &meta);
}

// A file name a manifest may list: one path component.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

// Appends the first `size` bytes of `path` to `out`, extending `crc`.
Status AppendFilePrefix(rocksdb::FileSystem* fs, const std::string& path, uint64_t size,
                        rocksdb::FSWritableFile* out, const std::string& out_path,
                        uint32_t* crc) {
  std::unique_ptr<rocksdb::FSSequentialFile> in;
  RETURN_IF_ERROR(storage_internal::FromRocks(
      fs->NewSequentialFile(path, rocksdb::FileOptions(), &in, nullptr), "cannot open " + path));
  std::vector<char> buf(std::min<uint64_t>(size, 1 << 20));
  for (uint64_t left = size; left > 0;) {
    rocksdb::Slice chunk;
    RETURN_IF_ERROR(storage_internal::FromRocks(
        in->Read(std::min<uint64_t>(left, buf.size()), rocksdb::IOOptions(), &chunk, buf.data(),
                 nullptr),
        "cannot read " + path));
    if (chunk.empty()) {
      return IOError("cannot read " + path + ": it has fewer than " + std::to_string(size) +
                     " bytes");
    }
    *crc = Crc32c(*crc, chunk.data(), chunk.size());
    RETURN_IF_ERROR(storage_internal::FromRocks(out->Append(chunk, rocksdb::IOOptions(), nullptr),
                                                "cannot write " + out_path));
    left -= chunk.size();
  }
  return Status::OK();
}

// Reads and validates the manifest of `dir` (see ReadCheckpointInfo), keeping
// its text and where its packed files lie in it.
StatusOr<CheckpointInfo> ReadCheckpoint(const std::string& dir, rocksdb::FileSystem* fs,
                                        std::string* text,
                                        std::vector<storage_internal::PackedFile>* packed) {
  ASSIGN_OR_RETURN(const bool is_dir, storage_internal::IsDirectory(fs, dir));
  if (!is_dir) return NotFoundError("no checkpoint directory " + dir);
  const std::string path = JoinPath(dir, kCheckpointManifestName);
  Status s = storage_internal::ReadFile(fs, path, text);
  if (s.code() == StatusCode::kNotFound) {
    return CorruptionError("checkpoint " + dir + " has no manifest " + path);
  }
  RETURN_IF_ERROR(s);
  CheckpointInfo info;
  info.dir = dir;
  RETURN_IF_ERROR(storage_internal::ParseCheckpointManifest(path, *text, &info, packed));
  for (const CheckpointFile& f : info.files) {
    const std::string file = JoinPath(dir, f.name);
    uint64_t size = 0;
    const rocksdb::IOStatus io = fs->GetFileSize(file, rocksdb::IOOptions(), &size, nullptr);
    if (io.IsNotFound() || io.IsPathNotFound()) {
      return CorruptionError("checkpoint file " + file + " is missing: " + io.ToString());
    }
    if (!io.ok()) return IOError("cannot stat checkpoint file " + file + ": " + io.ToString());
    if (size != f.size) {
      return CorruptionError("checkpoint file " + file + " has " + std::to_string(size) +
                             " bytes, the manifest says " + std::to_string(f.size));
    }
  }
  return info;
}

std::string ReplaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

}  // namespace

namespace storage_internal {

Status WriteCheckpointManifest(rocksdb::FileSystem* fs, const std::string& dir, int64_t clock,
                               const std::string& store, const std::vector<std::string>& tables,
                               const std::vector<PackedSource>& packed) {
  fs = DefaultFileSystem(fs);
  const rocksdb::IOOptions io;
  std::vector<std::string> names;
  RETURN_IF_ERROR(FromRocks(fs->GetChildren(dir, io, &names, nullptr),
                            "cannot list checkpoint " + dir));
  std::vector<CheckpointFile> files;
  for (const std::string& name : names) {
    if (name == "." || name == ".." || name.rfind(kCheckpointManifestName, 0) == 0) continue;
    const std::string path = JoinPath(dir, name);
    ASSIGN_OR_RETURN(const bool is_dir, IsDirectory(fs, path));
    if (is_dir) continue;  // Only the regular files are data.
    CheckpointFile f{name, 0};
    RETURN_IF_ERROR(FromRocks(fs->GetFileSize(path, io, &f.size, nullptr),
                              "cannot list checkpoint " + dir));
    files.push_back(std::move(f));
  }
  std::sort(files.begin(), files.end(),
            [](const CheckpointFile& a, const CheckpointFile& b) { return a.name < b.name; });
  std::string text = std::string(kManifestHeader) + "\n";
  text += "clock " + std::to_string(clock) + "\n";
  text += "store " + store + "\n";
  for (const std::string& t : tables) text += "table " + PercentEncode(t) + "\n";
  for (const CheckpointFile& f : files) {
    text += "file " + f.name + " " + std::to_string(f.size) + "\n";
  }
  uint64_t data_bytes = 0;
  for (const PackedSource& p : packed) {
    if (p.path.empty() && p.contents.size() != p.size) {
      return InternalError("packed file " + p.name + ": size " + std::to_string(p.size) +
                           " but " + std::to_string(p.contents.size()) + " bytes given");
    }
    text += "packed " + p.name + " " + std::to_string(p.size) + "\n";
    data_bytes += p.size;
  }
  text += "data " + std::to_string(data_bytes) + "\n";

  // One file, one sync: the directory is not published yet, so no
  // temporary name either.
  const std::string path = JoinPath(dir, kCheckpointManifestName);
  std::unique_ptr<rocksdb::FSWritableFile> out;
  RETURN_IF_ERROR(FromRocks(fs->NewWritableFile(path, rocksdb::FileOptions(), &out, nullptr),
                            "cannot create " + path));
  Status s = [&]() -> Status {
    const std::string what = "cannot write " + path;
    uint32_t crc = Crc32c(0, text.data(), text.size());
    RETURN_IF_ERROR(FromRocks(out->Append(text, io, nullptr), what));
    for (const PackedSource& p : packed) {
      if (!p.path.empty()) {
        RETURN_IF_ERROR(AppendFilePrefix(fs, p.path, p.size, out.get(), path, &crc));
        continue;
      }
      crc = Crc32c(crc, p.contents.data(), p.contents.size());
      RETURN_IF_ERROR(FromRocks(out->Append(p.contents, io, nullptr), what));
    }
    crc = Crc32c(crc, "\n", 1);
    RETURN_IF_ERROR(FromRocks(out->Append("\ncrc32c " + Hex32(crc) + "\n", io, nullptr), what));
    return FromRocks(out->Sync(io, nullptr), "cannot sync " + path);
  }();
  const Status closed = FromRocks(out->Close(io, nullptr), "cannot close " + path);
  return s.ok() ? closed : s;
}

Status ParseCheckpointManifest(const std::string& path, const std::string& text,
                               CheckpointInfo* info, std::vector<PackedFile>* packed) {
  auto bad = [&](const std::string& why) {
    return CorruptionError("checkpoint manifest " + path + " is corrupt: " + why);
  };
  const size_t crc_pos = text.rfind("crc32c ");
  if (crc_pos == std::string::npos || (crc_pos > 0 && text[crc_pos - 1] != '\n')) {
    return bad("no checksum line (truncated?)");
  }
  std::string crc_line = text.substr(crc_pos + 7);
  if (crc_line.size() != 9 || crc_line.back() != '\n') return bad("malformed checksum line");
  crc_line.pop_back();
  if (crc_line != Hex32(Crc32c(0, text.data(), crc_pos))) return bad("checksum mismatch");

  std::istringstream in(text.substr(0, crc_pos));
  std::string line;
  if (!std::getline(in, line) || (line != kManifestHeader && line != kManifestHeaderV1)) {
    return bad("unknown header");
  }
  const bool v2 = line == kManifestHeader;
  bool have_clock = false, have_data = false;
  std::set<std::string> names;
  std::vector<PackedFile> packed_files;
  uint64_t packed_bytes = 0;
  while (!have_data && std::getline(in, line)) {
    std::istringstream fields(line);
    std::string kind, a, extra;
    fields >> kind >> a;
    if (kind == "clock") {
      char* end = nullptr;
      info->clock = std::strtoll(a.c_str(), &end, 10);
      if (a.empty() || *end != '\0') return bad("bad clock");
      have_clock = true;
    } else if (kind == "store") {
      info->store = a;
    } else if (kind == "table") {
      std::string name;
      if (!PercentDecode(a, &name)) return bad("bad table name");
      info->tables.push_back(name);
    } else if (kind == "file" || (v2 && kind == "packed")) {
      CheckpointFile f;
      f.name = a;
      if (!(fields >> f.size) || !IsPlainFileName(f.name)) return bad("bad " + kind + " line");
      if (!names.insert(f.name).second) return bad("file " + f.name + " listed twice");
      if (kind == "packed" && f.size > text.size()) return bad("size of " + f.name + " out of range");
      info->bytes += f.size;
      if (kind == "packed") {
        packed_files.push_back(PackedFile{f.name, packed_bytes, f.size});
        packed_bytes += f.size;
        info->packed.push_back(f);
      } else {
        info->files.push_back(f);
      }
    } else if (v2 && kind == "data") {
      // The packed bytes, then "\n", end where the checksum line begins.
      char* end = nullptr;
      const uint64_t bytes = std::strtoull(a.c_str(), &end, 10);
      const std::streamoff start = in.tellg();
      if (a.empty() || *end != '\0' || bytes != packed_bytes || start < 0 ||
          static_cast<uint64_t>(start) + bytes + 1 != crc_pos || text[crc_pos - 1] != '\n') {
        return bad("packed data does not match its records (truncated?)");
      }
      for (PackedFile& p : packed_files) p.offset += static_cast<uint64_t>(start);
      have_data = true;
    } else {
      return bad("unknown record '" + kind + "'");
    }
    if (fields >> extra) return bad("trailing data on line '" + line + "'");
  }
  if (!have_clock || info->store.empty()) return bad("missing clock or store");
  if (v2 && !have_data) return bad("no data record (truncated?)");
  if (packed != nullptr) *packed = std::move(packed_files);
  return Status::OK();
}

}  // namespace storage_internal

std::string CheckpointDirName(int64_t clock) { return kCheckpointPrefix + std::to_string(clock); }

StatusOr<CheckpointInfo> ReadCheckpointInfo(const std::string& dir, rocksdb::FileSystem* fs) {
  fs = DefaultFileSystem(fs);
  try {
    std::string text;
    return ReadCheckpoint(dir, fs, &text, nullptr);
  } catch (const std::exception& e) {
    return InternalError("reading checkpoint " + dir + ": " + e.what());
  }
}

Status RestoreCheckpoint(const std::string& checkpoint_dir, const std::string& data_dir,
                         rocksdb::FileSystem* fs) {
  fs = DefaultFileSystem(fs);
  try {
    std::string text;
    std::vector<storage_internal::PackedFile> packed;
    ASSIGN_OR_RETURN(CheckpointInfo info, ReadCheckpoint(checkpoint_dir, fs, &text, &packed));
    std::string target = data_dir;
    while (target.size() > 1 && target.back() == '/') target.pop_back();
    const std::string staging = target + ".restoring";
    const std::string old = target + ".replaced";
    const rocksdb::IOOptions io;
    RETURN_IF_ERROR(storage_internal::RemoveAll(fs, staging));  // A crashed restore's copy.
    RETURN_IF_ERROR(storage_internal::CreateDirs(fs, staging));

    Status s = [&]() -> Status {
      for (const CheckpointFile& f : info.files) {
        const std::string src = JoinPath(checkpoint_dir, f.name);
        const std::string dst = JoinPath(staging, f.name);
        const bool immutable =
            f.name.size() > 4 && f.name.compare(f.name.size() - 4, 4, ".sst") == 0;
        RETURN_IF_ERROR(immutable ? storage_internal::LinkOrCopyFile(fs, src, dst)
                                  : storage_internal::CopyFile(fs, src, dst));
      }
      for (const storage_internal::PackedFile& p : packed) {
        RETURN_IF_ERROR(storage_internal::WriteFile(
            fs, JoinPath(staging, p.name), std::string_view(text).substr(p.offset, p.size)));
      }
      RETURN_IF_ERROR(storage_internal::SyncDir(fs, staging));
      Status v = VerifyRestoredStore(staging, fs);
      if (!v.ok()) {
        // Name the checkpoint's files, not the scratch copy's.
        return Status(v.code() == StatusCode::kNotFound ? StatusCode::kCorruption : v.code(),
                      "checkpoint " + checkpoint_dir + " is corrupt: " +
                          ReplaceAll(v.message(), staging, checkpoint_dir));
      }
      return Status::OK();
    }();
    if (!s.ok()) {
      storage_internal::RemoveAll(fs, staging).IgnoreError();
      return s;
    }

    // Swap: data_dir -> .replaced, staging -> data_dir, then drop the old one.
    RETURN_IF_ERROR(storage_internal::RemoveAll(fs, old));
    const bool had_data = storage_internal::PathExists(fs, target);
    if (had_data) {
      const rocksdb::IOStatus moved = fs->RenameFile(target, old, io, nullptr);
      if (!moved.ok()) return IOError("cannot move " + target + " aside: " + moved.ToString());
    }
    const rocksdb::IOStatus placed = fs->RenameFile(staging, target, io, nullptr);
    if (!placed.ok()) {
      if (had_data) fs->RenameFile(old, target, io, nullptr).PermitUncheckedError();
      return IOError("cannot move restored checkpoint into " + target + ": " + placed.ToString());
    }
    RETURN_IF_ERROR(storage_internal::SyncDir(fs, storage_internal::ParentDir(target)));
    if (had_data) {
      // data_dir is already the restored copy: only space is at stake, and
      // the next restore removes the leftover.
      Status dropped = storage_internal::RemoveAll(fs, old);
      if (!dropped.ok()) LOG(WARNING) << "restore into " << target << ": " << dropped;
    }
    LOG(INFO) << "restored checkpoint " << checkpoint_dir << " (clock " << info.clock << ", "
              << info.bytes << " bytes) into " << target;
    return Status::OK();
  } catch (const std::exception& e) {
    return InternalError("restoring checkpoint " + checkpoint_dir + ": " + e.what());
  }
}

std::vector<CheckpointInfo> ListCheckpoints(const std::string& root, rocksdb::FileSystem* fs) {
  fs = DefaultFileSystem(fs);
  std::vector<CheckpointInfo> result;
  try {
    std::vector<std::string> names;
    const rocksdb::IOStatus listed = fs->GetChildren(root, rocksdb::IOOptions(), &names, nullptr);
    if (!listed.ok() && !listed.IsNotFound() && !listed.IsPathNotFound()) {
      LOG(WARNING) << "cannot list checkpoints under " << root << ": " << listed.ToString();
    }
    for (const std::string& name : names) {
      int64_t clock;
      if (!ParseCheckpointDirName(name, &clock)) continue;
      const std::string dir = JoinPath(root, name);
      StatusOr<bool> is_dir = storage_internal::IsDirectory(fs, dir);
      if (!is_dir.ok() || !*is_dir) continue;
      StatusOr<CheckpointInfo> info = ReadCheckpointInfo(dir, fs);
      if (!info.ok()) {
        LOG(WARNING) << "skipping invalid checkpoint: " << info.status();
        continue;
      }
      result.push_back(std::move(info).value());
    }
  } catch (const std::exception& e) {
    LOG(WARNING) << "listing checkpoints under " << root << ": " << e.what();
  }
  std::sort(result.begin(), result.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) {
    return a.clock != b.clock ? a.clock < b.clock : a.dir < b.dir;
  });
  return result;
}

Status RemoveCheckpoint(const std::string& dir, rocksdb::FileSystem* fs) {
  return storage_internal::RemoveAll(DefaultFileSystem(fs), dir);
}

Status ReplaceCheckpoint(const std::string& from, const std::string& to, rocksdb::FileSystem* fs) {
  fs = DefaultFileSystem(fs);
  RETURN_IF_ERROR(storage_internal::RemoveAll(fs, to));
  RETURN_IF_ERROR(storage_internal::FromRocks(fs->RenameFile(from, to, rocksdb::IOOptions(), nullptr),
                                              "cannot rename " + from + " to " + to));
  return storage_internal::SyncDir(fs, storage_internal::ParentDir(to));
}

Status PruneCheckpoints(const std::string& root, int keep_last_k, rocksdb::FileSystem* fs) {
  if (keep_last_k < 1) {
    return InvalidArgumentError("PruneCheckpoints: keep_last_k must be >= 1, got " +
                                std::to_string(keep_last_k));
  }
  fs = DefaultFileSystem(fs);
  std::vector<CheckpointInfo> all = ListCheckpoints(root, fs);
  if (all.size() <= static_cast<size_t>(keep_last_k)) return Status::OK();
  for (size_t i = 0; i + keep_last_k < all.size(); ++i) {
    RETURN_IF_ERROR(storage_internal::RemoveAll(fs, all[i].dir));
  }
  return Status::OK();
}

}  // namespace relaxps
