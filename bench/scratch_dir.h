// ScratchDir: a fresh directory <parent>/<prefix>.XXXXXX for one benchmark
// run, removed with everything in it when the object goes away.
#ifndef RELAXPS_BENCH_SCRATCH_DIR_H_
#define RELAXPS_BENCH_SCRATCH_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace relaxps {
namespace bench {

class ScratchDir {
 public:
  ScratchDir(const std::string& parent, const std::string& prefix)
      : path_(parent + "/" + prefix + ".XXXXXX") {
    if (::mkdtemp(path_.data()) == nullptr) path_.clear();
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }

  // False if the directory could not be created.
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace bench
}  // namespace relaxps

#endif  // RELAXPS_BENCH_SCRATCH_DIR_H_
