#include "apps/internal/main_util.h"

#include <signal.h>

#include <cstdio>
#include <fstream>

namespace relaxps {
namespace {
void (*g_stop)() = nullptr;
void OnSignal(int) {
  if (g_stop != nullptr) g_stop();
}
}  // namespace

void InitLogging(const char* argv0) {
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv0);
}

void StopOnSignals(void (*stop)()) {
  g_stop = stop;
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

Status WriteFileAtomically(const std::string& path, const std::string& content) {
  if (path.empty()) return Status::OK();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return IOError("cannot write " + tmp);
    out << content << "\n";
    if (!out.flush()) return IOError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return IOError("cannot rename " + tmp + " to " + path);
  return Status::OK();
}

int Fail(const char* binary, const Status& status, int code) {
  std::fprintf(stderr, "%s: %s\n", binary, status.ToString().c_str());
  return code;
}

}  // namespace relaxps
