// The kernel benchmarks' timer: the best wall time of a callable over repeated runs, after one
// warm-up run (the fastest run is the one least disturbed on a shared machine).
#pragma once

#include <algorithm>
#include <chrono>

namespace tpserve::bench {

template <typename Fn>
double BestSeconds(int reps, Fn fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace tpserve::bench
