// Helpers shared by the storage tests: scratch directories and assertions.
#ifndef RELAXPS_TESTS_STORAGE_STORAGE_TEST_UTIL_H_
#define RELAXPS_TESTS_STORAGE_STORAGE_TEST_UTIL_H_

#include <stdlib.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "common/status.h"

#define RELAXPS_STORAGE_ASSERT_OK(expr)                   \
  do {                                                   \
    const ::relaxps::Status _s = (expr);                 \
    ASSERT_TRUE(_s.ok()) << #expr << " -> " << _s;       \
  } while (0)

namespace relaxps {
namespace testing_storage {

// Creates a fresh directory under the gtest temp dir.
inline std::string MakeTempDir(const std::string& tag) {
  std::string tmpl = ::testing::TempDir() + "/relaxps_" + tag + ".XXXXXX";
  char* made = ::mkdtemp(tmpl.data());
  EXPECT_NE(made, nullptr) << "mkdtemp " << tmpl;
  return tmpl;
}

// A directory removed with everything in it when the object dies.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& tag) : path_(MakeTempDir(tag)) {}
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace testing_storage
}  // namespace relaxps

#endif  // RELAXPS_TESTS_STORAGE_STORAGE_TEST_UTIL_H_
