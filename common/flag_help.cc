#include "common/flag_help.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <glog/logging.h>

namespace relaxps {
namespace {

constexpr size_t kWidth = 100;       // Columns the text is wrapped at.
constexpr size_t kDescColumn = 32;   // Where descriptions start.

// The source tree's root as this file was compiled ("../", "/src/relaxps/"):
// every own flag's file starts with it.
std::string SourceRoot() {
  const std::string self = __FILE__;
  const std::string tail = "common/flag_help.cc";
  CHECK(self.size() >= tail.size() && self.compare(self.size() - tail.size(), tail.size(), tail) == 0)
      << "flag_help.cc compiled as " << self;
  return self.substr(0, self.size() - tail.size());
}

// A default as a user types it: doubles in their shortest form (gflags
// keeps 17 digits), strings quoted when empty or holding blanks.
std::string ShownDefault(const gflags::CommandLineFlagInfo& f) {
  const std::string& v = f.default_value;
  if (f.type == "double") {
    const double d = std::strtod(v.c_str(), nullptr);
    char buf[32];
    for (int precision = 1; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof(buf), "%.*g", precision, d);
      if (std::strtod(buf, nullptr) == d) break;
    }
    return buf;
  }
  if (f.type == "string" && (v.empty() || v.find_first_of(" \t") != std::string::npos)) {
    return "\"" + v + "\"";
  }
  return v;
}

// `text` wrapped at kWidth, every line but the first indented to `column`;
// the first line starts at `first_column`.
std::string Wrap(const std::string& text, size_t first_column, size_t column) {
  std::string out;
  size_t col = first_column;
  size_t pos = 0;
  bool line_empty = true;
  while (pos < text.size()) {
    const size_t start = text.find_first_not_of(' ', pos);
    if (start == std::string::npos) break;
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line_empty && col + 1 + word.size() > kWidth) {
      out += "\n" + std::string(column, ' ');
      col = column;
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++col;
    }
    out += word;
    col += word.size();
    line_empty = false;
    pos = end;
  }
  return out;
}

std::string FlagEntry(const gflags::CommandLineFlagInfo& f) {
  std::string line = "  --" + f.name + "=" + ShownDefault(f);
  if (line.size() + 2 <= kDescColumn) {
    line += std::string(kDescColumn - line.size(), ' ');
  } else {
    line += "\n" + std::string(kDescColumn, ' ');
  }
  return line + Wrap(f.description, kDescColumn, kDescColumn) + "\n";
}

bool HelpFlagSet(const char* name) {
  std::string value;
  return gflags::GetCommandLineOption(name, &value) && value == "true";
}

}  // namespace

bool IsOwnFlagFile(const std::string& defining_file) {
  static const std::string* const root = new std::string(SourceRoot());
  return defining_file.compare(0, root->size(), *root) == 0;
}

std::string OwnFlagsHelp(const std::string& usage,
                         const std::vector<gflags::CommandLineFlagInfo>& all,
                         const std::vector<FlagGroup>& groups) {
  std::map<std::string, const gflags::CommandLineFlagInfo*> own;  // By name.
  for (const gflags::CommandLineFlagInfo& f : all) {
    if (IsOwnFlagFile(f.filename)) own[f.name] = &f;
  }
  std::string out = usage;
  if (!out.empty() && out.back() != '\n') out += '\n';
  std::set<std::string> listed;
  const auto section = [&](const std::string& title, const std::vector<std::string>& names) {
    if (names.empty()) return;
    out += "\n" + title + ":\n";
    for (const std::string& n : names) out += FlagEntry(*own.at(n));
  };
  for (const FlagGroup& g : groups) {
    for (const std::string& n : g.flags) {
      CHECK(own.count(n) == 1) << "--help group '" << g.title << "' names --" << n
                               << ", not a flag of this binary";
      CHECK(listed.insert(n).second) << "--help lists --" << n << " twice";
    }
    section(g.title, g.flags);
  }
  std::vector<std::string> rest;
  for (const auto& [name, f] : own) {
    if (listed.count(name) == 0) rest.push_back(name);
  }
  section(groups.empty() ? "Flags" : "Other flags", rest);
  out += "\nEvery flag, with those of the libraries (logging, flag files): --helpfull\n";
  return out;
}

void ParseFlagsWithHelp(int* argc, char*** argv, const std::vector<FlagGroup>& groups) {
  gflags::ParseCommandLineNonHelpFlags(argc, argv, /*remove_flags=*/true);
  if (HelpFlagSet("help") || HelpFlagSet("helpshort")) {
    std::vector<gflags::CommandLineFlagInfo> all;
    gflags::GetAllFlags(&all);
    // gflags' stand-in when the binary set no usage message.
    std::string usage = gflags::ProgramUsage();
    if (usage.rfind("Warning: SetUsageMessage() never called", 0) == 0) {
      usage = gflags::ProgramInvocationShortName() + std::string(" [flags]");
    }
    std::fputs(OwnFlagsHelp(usage, all, groups).c_str(), stdout);
    std::fflush(stdout);
    std::exit(0);
  }
  if (HelpFlagSet("helpfull")) {
    gflags::ShowUsageWithFlags((*argv)[0]);
    std::fflush(stdout);
    std::exit(0);
  }
  gflags::HandleCommandLineHelpFlags();
}

}  // namespace relaxps
