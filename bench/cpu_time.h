// CPU time of the calling thread, for benchmarks that time single-threaded work on a
// shared machine (other processes' load does not count against it), and of the whole
// process (a step's worker threads included).
#pragma once

#include <ctime>

namespace tpserve::bench {

inline double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

inline double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace tpserve::bench
