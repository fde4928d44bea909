#include "storage/internal/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

namespace relaxps {
namespace storage_internal {
namespace {

Status ErrnoError(const std::string& what, const std::string& path, int err) {
  std::string m = what + " " + path + ": " + std::strerror(err);
  if (err == ENOENT) return NotFoundError(m);
  return IOError(m);
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now and reports the error close() returned.
  int Close() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

Status WriteAll(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

}  // namespace

Status SyncPath(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError("cannot open", path, errno);
  if (::fsync(fd.get()) != 0) return ErrnoError("cannot fsync", path, errno);
  return Status::OK();
}

std::string ParentDir(const std::string& path) {
  std::filesystem::path p(path);
  std::string parent = p.parent_path().string();
  return parent.empty() ? "." : parent;
}

Status ReadFile(const std::string& path, std::string* contents) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError("cannot open", path, errno);
  contents->clear();
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd.get(), buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot read", path, errno);
    }
    if (r == 0) break;
    contents->append(buf, static_cast<size_t>(r));
  }
  return Status::OK();
}

Status CopyFile(const std::string& src, const std::string& dst) {
  Fd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) return ErrnoError("cannot open", src, errno);
  Fd out(::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (out.get() < 0) return ErrnoError("cannot create", dst, errno);
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t r = ::read(in.get(), buf.data(), buf.size());
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot read", src, errno);
    }
    if (r == 0) break;
    RETURN_IF_ERROR(WriteAll(out.get(), buf.data(), static_cast<size_t>(r), dst));
  }
  if (::fsync(out.get()) != 0) return ErrnoError("cannot fsync", dst, errno);
  if (out.Close() != 0) return ErrnoError("cannot close", dst, errno);
  return Status::OK();
}

Status LinkOrCopyFile(const std::string& src, const std::string& dst) {
  if (::link(src.c_str(), dst.c_str()) == 0) return Status::OK();
  if (errno != EXDEV && errno != EPERM && errno != EMLINK) {
    return ErrnoError("cannot link " + src + " to", dst, errno);
  }
  return CopyFile(src, dst);
}

Status RemoveAll(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return IOError("cannot remove " + path + ": " + ec.message());
  return Status::OK();
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace storage_internal
}  // namespace relaxps
