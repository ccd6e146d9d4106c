// Facts about this process and machine that the server reports (ModelInfo, Stats,
// /metrics) and tpbench records: resident memory, CPU model, version. Linux /proc based;
// tested by tests/metrics_test.cc.
#pragma once

#include <cstdint>
#include <string>

namespace tpserve {

struct ProcessMemory {
  int64_t rss_bytes = 0;       // VmRSS
  int64_t peak_rss_bytes = 0;  // VmHWM
};

// Zeros where /proc/self/status cannot be read.
ProcessMemory ReadProcessMemory();

// "CPU: <model name>" from /proc/cpuinfo, or "CPU" where it does not say.
std::string CpuDeviceName();

// "0.1.0 (git 1a2b3c4)": the project version and the commit it was configured from.
std::string EngineVersion();

}  // namespace tpserve
