#include "common/events.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <glog/logging.h>

namespace relaxps {
namespace {

// The common fields every event starts with; an event's own fields must not
// repeat them.
bool IsCommonField(const std::string& key) {
  return key == "v" || key == "ts_unix_ms" || key == "mono_ms" || key == "process" ||
         key == "kind";
}

// Length of the valid UTF-8 sequence at s[i] (0: invalid).
size_t Utf8Length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t n;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and code points past U+10FFFF.
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return n;
}

}  // namespace

std::string JsonQuote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = Utf8Length(s, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
  return out;
}

EventValue::EventValue(double v) {
  if (!std::isfinite(v)) {
    json_ = "null";
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  // Shortest form that reads back the same double.
  for (int precision = 6; precision < 17; ++precision) {
    char shorter[32];
    std::snprintf(shorter, sizeof(shorter), "%.*g", precision, v);
    if (std::strtod(shorter, nullptr) == v) {
      std::memcpy(buf, shorter, sizeof(buf));
      break;
    }
  }
  json_ = buf;
}

EventValue::EventValue(std::string_view v) : json_(JsonQuote(v)) {}

EventValue::EventValue(const std::vector<int>& v) {
  json_ = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) json_ += ',';
    json_ += std::to_string(v[i]);
  }
  json_ += ']';
}

StatusOr<std::shared_ptr<EventLog>> EventLog::Open(const EventLogOptions& options) {
  int fd = -1;
  if (!options.path.empty()) {
    fd = ::open(options.path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return IOError("cannot open the events file " + options.path + ": " + std::strerror(errno));
    }
  }
  return std::shared_ptr<EventLog>(new EventLog(options, fd));
}

EventLog::EventLog(const EventLogOptions& options, int fd)
    : options_(options), clock_(ClockOrReal(options.clock)), fd_(fd), process_(options.process) {}

EventLog::~EventLog() {
  if (fd_ >= 0) ::close(fd_);
}

void EventLog::set_process(const std::string& process) {
  std::lock_guard<std::mutex> l(mu_);
  process_ = process;
}

std::string EventLog::process() const {
  std::lock_guard<std::mutex> l(mu_);
  return process_;
}

void EventLog::Emit(std::string_view kind, const EventFields& fields) {
  std::string line = "{\"v\":" + std::to_string(kSchemaVersion) +
                     ",\"ts_unix_ms\":" + std::to_string(clock_->NowUnixMs()) +
                     ",\"mono_ms\":" + std::to_string(clock_->NowMs()) +
                     ",\"process\":" + JsonQuote(process()) + ",\"kind\":" + JsonQuote(kind);
  for (const EventField& f : fields) {
    DCHECK(!IsCommonField(f.key)) << "event field '" << f.key << "' repeats a common field";
    line += ',';
    line += JsonQuote(f.key);
    line += ':';
    line += f.value.json();
  }
  line += '}';
  if (fd_ >= 0) {
    line += '\n';
    // One write() per line: with O_APPEND the line lands whole at the end of
    // the file even when other processes append to it at the same time.
    const ssize_t n = ::write(fd_, line.data(), line.size());
    line.pop_back();
    if (n != static_cast<ssize_t>(line.size() + 1)) {
      const int err = errno;
      if (errors_.fetch_add(1) == 0) {
        LOG(WARNING) << "cannot write to the events file " << options_.path << ": "
                     << (n < 0 ? std::strerror(err) : "short write")
                     << "; events are dropped from here (counted, logged once)";
      }
      return;
    }
  }
  written_.fetch_add(1);
  if (options_.on_line) options_.on_line(line);
}

}  // namespace relaxps
