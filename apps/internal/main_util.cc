#include "apps/internal/main_util.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>

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

void StopOnSignals(void (*stop)(), bool second_signal_kills) {
  g_stop = stop;
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  if (second_signal_kills) sa.sa_flags = SA_RESETHAND;
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

Status CheckCommandLine(int argc, char** argv, bool allow_positional) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') {
      if (allow_positional) continue;
      return InvalidArgumentError("unexpected argument '" + arg + "'");
    }
    const std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    const std::string name = body.substr(0, eq);
    gflags::CommandLineFlagInfo info;
    if (!gflags::GetCommandLineFlagInfo(name.c_str(), &info)) {
      // --nofoo for a bool foo.
      if (eq == std::string::npos && name.compare(0, 2, "no") == 0 &&
          gflags::GetCommandLineFlagInfo(name.substr(2).c_str(), &info) && info.type == "bool") {
        continue;
      }
      return InvalidArgumentError("unknown flag --" + name + " (see --help)");
    }
    std::string value;
    if (eq != std::string::npos) {
      value = body.substr(eq + 1);
    } else if (info.type == "bool") {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return InvalidArgumentError("flag --" + name + " needs a value");
    }
    if (name == "flagfile") {
      // gflags would exit 1 on a missing file or a bad flag inside it: check
      // its lines (one --flag=value each, '#' comments) like the command line.
      std::ifstream in(value);
      if (!in) return InvalidArgumentError("--flagfile=" + value + ": cannot read the file");
      std::vector<std::string> lines = {argv[0]};
      for (std::string line; std::getline(in, line);) {
        const size_t b = line.find_first_not_of(" \t");
        const size_t e = line.find_last_not_of(" \t\r");
        if (b == std::string::npos || line[b] == '#') continue;
        lines.push_back(line.substr(b, e - b + 1));
      }
      std::vector<char*> args;
      for (std::string& l : lines) args.push_back(l.data());
      Status inner = CheckCommandLine(static_cast<int>(args.size()), args.data(), false);
      if (!inner.ok()) return inner.WithPrefix("--flagfile=" + value);
    }
    // Setting the flag validates the value; the real parse sets it again.
    if (gflags::SetCommandLineOption(name.c_str(), value.c_str()).empty()) {
      return InvalidArgumentError("bad value '" + value + "' for --" + name + " (" + info.type +
                                  ")");
    }
  }
  return Status::OK();
}

int SanitizerTimeScale() {
#ifdef RELAXPS_SANITIZER_TIME_SCALE
  return RELAXPS_SANITIZER_TIME_SCALE;
#else
  return 1;
#endif
}

void ScaleTimeoutFlags(int factor, std::initializer_list<const char*> names) {
  if (factor == 1) return;
  std::string scaled;
  for (const char* name : names) {
    gflags::CommandLineFlagInfo info;
    CHECK(gflags::GetCommandLineFlagInfo(name, &info) && info.type == "int32")
        << "ScaleTimeoutFlags: --" << name << " is not an int32 flag";
    if (!info.is_default) continue;
    const int64_t value =
        std::min<int64_t>(std::stoll(info.current_value) * factor,
                          std::numeric_limits<int32_t>::max());
    gflags::SetCommandLineOption(name, std::to_string(value).c_str());
    scaled += (scaled.empty() ? " --" : ", --") + std::string(name) + "=" + std::to_string(value);
  }
  // Not at INFO: a usage error must stay the binary's only line on stderr.
  VLOG(1) << "default timeouts stretched " << factor << "x (sanitizer build):" << scaled;
}

int Fail(const char* binary, const Status& status, int code) {
  std::fprintf(stderr, "%s: %s\n", binary, status.ToString().c_str());
  return code;
}

StatusOr<CurveOptions> SecurityFromFlags(const std::string& security, const std::string& keys_dir,
                                         const std::string& name) {
  if (security == "plain") return CurveOptions();
  if (security != "curve") {
    return InvalidArgumentError("--security must be plain or curve, got '" + security + "'");
  }
  if (keys_dir.empty()) {
    return InvalidArgumentError("--security=curve needs --keys_dir (relaxps-ctl keygen DIR)");
  }
  RETURN_IF_ERROR(LoadCurveKeys(keys_dir, name).status());
  return CurveOptions{keys_dir, name};
}

Status ReExecSelf(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  execv("/proc/self/exe", argv.data());
  return IOError(std::string("cannot re-execute /proc/self/exe: ") + std::strerror(errno));
}

std::vector<std::string> ReplaceFlags(std::vector<std::string> args,
                                      const std::vector<std::string>& names,
                                      const std::vector<std::string>& extra) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    // gflags takes -name and --name, with "=value" or the value next.
    const size_t dashes = args[i].rfind("--", 0) == 0 ? 2 : args[i].rfind('-', 0) == 0 ? 1 : 0;
    const std::string body = args[i].substr(dashes);
    bool drop = false;
    for (const std::string& n : names) {
      if (i > 0 && dashes > 0 && body == n) {
        drop = true;
        ++i;  // Its value.
      } else if (i > 0 && dashes > 0 && body.rfind(n + "=", 0) == 0) {
        drop = true;
      }
      if (drop) break;
    }
    if (!drop) out.push_back(args[i]);
  }
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

}  // namespace relaxps
