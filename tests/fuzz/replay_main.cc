// Corpus replay driver for builds without libFuzzer: feeds every file named
// on the command line (directories: every regular file inside, sorted) to
// the target's LLVMFuzzerTestOneInput once. Exits 1 when no input was found
// (a missing corpus must fail the test), and crashes like the fuzzer would
// on a finding (ASan/UBSan reports, FUZZ_CHECK aborts).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_input.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    if (fs::is_directory(argv[i], ec)) {
      for (const auto& e : fs::directory_iterator(argv[i])) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else {
      files.push_back(argv[i]);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s <corpus dir or file>...: no input found\n", argv[0]);
    return 1;
  }
  size_t bytes = 0;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", f.c_str());
      return 1;
    }
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes += data.size();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  }
  std::printf("replayed %zu inputs (%zu bytes)\n", files.size(), bytes);
  return 0;
}
