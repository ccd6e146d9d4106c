// The STREAM triad alone, as one JSON line, for scripts that put it beside other engines'
// numbers in the same run (bench/cpu_peers.sh): build/bench/stream_bench [threads].
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "bench/stream.h"

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : static_cast<int>(std::thread::hardware_concurrency());
  if (threads < 1) {
    std::fprintf(stderr, "usage: stream_bench [threads >= 1]\n");
    return 2;
  }
  std::printf("{\"triad_gbs\": %.3f, \"threads\": %d}\n", tpserve::bench::MeasureTriadBandwidthGBs(threads), threads);
  return 0;
}
