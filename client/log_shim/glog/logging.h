// A stand-in for <glog/logging.h> used only when building the shared client
// library (librelaxps_client.so): the client sources log through the glog
// macros, and this header gives them LOG / VLOG / CHECK writing to stderr,
// so the installed library needs neither glog nor gflags and a trainer needs
// no logging initialisation. In-tree builds use the real glog.
//
// Every LOG line goes to stderr (the client logs rarely: a moved server, a
// failover); FATAL and failed CHECKs abort. VLOG is compiled out.
//
// Thread-safety: each message is written with one fwrite.
#ifndef RELAXPS_CLIENT_LOG_SHIM_GLOG_LOGGING_H_
#define RELAXPS_CLIENT_LOG_SHIM_GLOG_LOGGING_H_

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace relaxps {
namespace log_shim {

// One log line, written when the statement ends.
class Message {
 public:
  Message(const char* file, int line, char severity)
      : severity_(severity) {
    stream_ << severity << " relaxps " << Basename(file) << ":" << line << "] ";
  }
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;
  ~Message() {
    stream_ << '\n';
    const std::string s = stream_.str();
    std::fwrite(s.data(), 1, s.size(), stderr);
    if (severity_ == 'F') std::abort();
  }
  std::ostream& stream() { return stream_; }

 private:
  static const char* Basename(const char* path) {
    const char* base = path;
    for (const char* p = path; *p != '\0'; ++p) {
      if (*p == '/') base = p + 1;
    }
    return base;
  }

  const char severity_;
  std::ostringstream stream_;
};

// Turns `cond ? (void)0 : Voidify() & stream << ...` into a void expression.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace log_shim
}  // namespace relaxps

#define LOG(severity) ::relaxps::log_shim::Message(__FILE__, __LINE__, #severity[0]).stream()
#define VLOG(level) \
  while (false) ::relaxps::log_shim::Message(__FILE__, __LINE__, 'I').stream()
#define CHECK(condition)                                                      \
  (condition) ? (void)0                                                       \
              : ::relaxps::log_shim::Voidify() &                              \
                    ::relaxps::log_shim::Message(__FILE__, __LINE__, 'F').stream() \
                        << "Check failed: " #condition " "
#define CHECK_EQ(a, b) CHECK((a) == (b))
#define CHECK_NE(a, b) CHECK((a) != (b))
#define CHECK_LE(a, b) CHECK((a) <= (b))
#define CHECK_LT(a, b) CHECK((a) < (b))
#define CHECK_GE(a, b) CHECK((a) >= (b))
#define CHECK_GT(a, b) CHECK((a) > (b))
#define DCHECK(condition) CHECK(condition)
#define DCHECK_EQ(a, b) CHECK_EQ(a, b)
#define DCHECK_LE(a, b) CHECK_LE(a, b)
#define DCHECK_LT(a, b) CHECK_LT(a, b)
#define DCHECK_GE(a, b) CHECK_GE(a, b)

#endif  // RELAXPS_CLIENT_LOG_SHIM_GLOG_LOGGING_H_
