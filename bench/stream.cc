// STREAM triad bandwidth. Exercised by bench/kernels_bench.cc.
#include "bench/stream.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>

namespace tpserve::bench {

namespace {

double Triad(int threads) {
  constexpr int64_t kElems = int64_t{256} << 20 >> 3;  // 256 MiB of doubles per array
  constexpr int kRepetitions = 6;
  // Uninitialized on purpose: the pages are first touched by the parallel loop below, so
  // each thread's part lives on its own NUMA node.
  std::unique_ptr<double[]> a(new double[kElems]);
  std::unique_ptr<double[]> b(new double[kElems]);
  std::unique_ptr<double[]> c(new double[kElems]);
  double* pa = a.get();
  double* pb = b.get();
  double* pc = c.get();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < kElems; ++i) {
    pa[i] = 0.0;
    pb[i] = 1.0;
    pc[i] = 2.0;
  }
  const double s = 3.0;
  double best_s = 1e30;
  for (int rep = 0; rep < kRepetitions; ++rep) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < kElems; ++i) pa[i] = pb[i] + s * pc[i];
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best_s = std::min(best_s, elapsed.count());
  }
  // Keeps the stores observable so the loop cannot be dropped.
  volatile double sink = pa[kElems / 2];
  (void)sink;
  return 3.0 * sizeof(double) * kElems / best_s / 1e9;
}

}  // namespace

double MeasureTriadBandwidthGBs(int threads) {
  // On a thread of its own, whose OpenMP workers end with it. Left to the caller's thread, they
  // would outlive the measurement, and libgomp, then managing more threads than there are CPUs,
  // throttles spinning: a later team's workers (engine_bench's rank threads) sleep between
  // parallel regions and each region waits for them to wake, which held the Gemma 3 270M's small
  // decode GEMVs at 2-2.5x their time in tpserve generate.
  double gbs = 0;
  std::thread([&] { gbs = Triad(threads); }).join();
  return gbs;
}

}  // namespace tpserve::bench
