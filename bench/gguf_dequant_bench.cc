// GGUF dequantization speed (worker/gguf_quants.h) per ggml type, on one thread: GB/s of
// source blocks read and of fp32 written, beside a memcpy of the same source bytes in the same
// run. Not a test; tests/gguf_quants_test.cc checks the numbers.
// Usage: gguf_dequant_bench [source MiB per type, default 32]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "worker/gguf_quants.h"

namespace tpserve::bench {
namespace {

struct TypeCase {
  GgmlType type;
  const char* name;
  int64_t block_elems, block_bytes;
};

constexpr TypeCase kTypes[] = {
    {GgmlType::kF32, "F32", 1, 4},        {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kBF16, "BF16", 1, 2},      {GgmlType::kQ4_0, "Q4_0", 32, 18},
    {GgmlType::kQ4_1, "Q4_1", 32, 20},    {GgmlType::kQ5_0, "Q5_0", 32, 22},
    {GgmlType::kQ5_1, "Q5_1", 32, 24},    {GgmlType::kQ8_0, "Q8_0", 32, 34},
    {GgmlType::kQ2_K, "Q2_K", 256, 84},   {GgmlType::kQ3_K, "Q3_K", 256, 110},
    {GgmlType::kQ4_K, "Q4_K", 256, 144},  {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210},
};

// Best of `reps` runs of fn, in seconds.
template <typename Fn>
double BestSeconds(int reps, Fn fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

int Main(int argc, char** argv) {
  const double mib = argc > 1 ? std::atof(argv[1]) : 32.0;
  const int reps = 5;
  std::mt19937 rng(42);
  std::printf("%-5s %9s %12s %12s %12s %8s\n", "type", "src MiB", "src GB/s", "out GB/s", "memcpy GB/s",
              "vs memcpy");
  for (const TypeCase& t : kTypes) {
    const int64_t blocks = static_cast<int64_t>(mib * (1 << 20)) / t.block_bytes;
    const int64_t n = blocks * t.block_elems;
    // Random bytes: any fp16 scale (NaN, infinity) costs the same time; the data do not branch.
    std::vector<uint8_t> src(blocks * t.block_bytes);
    for (auto& b : src) b = static_cast<uint8_t>(rng());
    std::vector<uint8_t> copy(src.size());
    std::vector<float> dst(n);
    // Touch the destinations once so that page faults stay out of the timings.
    std::memcpy(copy.data(), src.data(), src.size());
    if (!DequantizeRow(t.type, src.data(), n, dst.data()).ok()) return 1;

    const double s_deq = BestSeconds(reps, [&] { (void)DequantizeRow(t.type, src.data(), n, dst.data()); });
    const double s_cpy = BestSeconds(reps, [&] { std::memcpy(copy.data(), src.data(), src.size()); });
    const double src_gb = src.size() / 1e9, out_gb = n * 4.0 / 1e9;
    std::printf("%-5s %9.1f %12.2f %12.2f %12.2f %7.0f%%\n", t.name, src.size() / 1048576.0, src_gb / s_deq,
                out_gb / s_deq, src_gb / s_cpy, 100.0 * s_cpy / s_deq);
    volatile float sink = dst[n / 2] + static_cast<float>(copy[src.size() / 2]);
    (void)sink;
  }
  return 0;
}

}  // namespace
}  // namespace tpserve::bench

int main(int argc, char** argv) { return tpserve::bench::Main(argc, argv); }
