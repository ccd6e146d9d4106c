// Process and machine facts from /proc (see process_info.h).
#include "coordinator/api/process_info.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "git_version.h"  // generated: TPSERVE_GIT_HASH

#ifndef TPSERVE_VERSION
#define TPSERVE_VERSION "unknown"
#endif

namespace tpserve {
namespace {

// "VmRSS:	  123456 kB" -> bytes.
bool ParseKbLine(const std::string& line, absl::string_view key, int64_t* bytes) {
  absl::string_view rest = line;
  if (!absl::ConsumePrefix(&rest, key)) return false;
  rest = absl::StripAsciiWhitespace(rest);
  absl::ConsumeSuffix(&rest, "kB");
  int64_t kb = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kb)) return false;
  *bytes = kb * 1024;
  return true;
}

}  // namespace

ProcessMemory ReadProcessMemory() {
  ProcessMemory m;
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    ParseKbLine(line, "VmRSS:", &m.rss_bytes);
    ParseKbLine(line, "VmHWM:", &m.peak_rss_bytes);
  }
  return m;
}

std::string CpuDeviceName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "model name")) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    return absl::StrCat("CPU: ", absl::StripAsciiWhitespace(absl::string_view(line).substr(colon + 1)));
  }
  return "CPU";
}

std::string EngineVersion() { return absl::StrCat(TPSERVE_VERSION, " (git ", TPSERVE_GIT_HASH, ")"); }

}  // namespace tpserve
