// Micro-benchmark of the CPU kernels: decode Linear's weight bandwidth beside the STREAM
// triad, prefill Linear's GFLOP/s beside OpenBLAS sgemm, and paged-attention decode time.
// Usage: kernels_bench [--threads N] [--sweep] [--models gemma-4-1b,llama-3.2-1b,gemma-4-31b]
//                      [--huge-pages-ab ROUNDS] [--gemv-paths-ab ROUNDS] [--tiles-ab ROUNDS] [--attention]
//   --attention prints only the paged-attention lines (prefill of 512 tokens for two head
//   shapes, decode over a 1k context), for quick A/B runs of the attention kernel.
//   --sweep adds Linear over batch sizes; --models replaces the generic shapes with the
//   named models' weight shapes (bf16 only; bench/cpu_vs_torch.sh runs it beside PyTorch).
//   --huge-pages-ab (with --models) times only the models' decode GEMVs, on weights held
//   as the CPU backend holds them with --cpu-huge-pages on and off, the two interleaved
//   call by call, for ROUNDS rounds: medians and the median of the per-round ratios.
//   --gemv-paths-ab (with --models) times the models' decode GEMVs at 1, 3 and 5 rows on
//   the sgemm path (fp32 FMAs) and the onednn-bf16 path (bf16 dot products), interleaved,
//   on weights on huge pages as the CPU backend holds them by default (on 4 KiB pages the
//   one-row bf16 kernel measured 0.8-1.0x the fp32 one on the large products; on huge
//   pages it is level with it: docs/cpu_backend.md).
//   --tiles-ab (with --models, on a CPU with AMX) the same for the onednn-bf16 GEMV on rows
//   against the amx-bf16 one on the weights held in tile order.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/best_seconds.h"
#include "bench/stream.h"
#include "kernels/base.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm_amx.h"
#include "worker/host_memory.h"

namespace tpserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Weights of one dtype, as raw bytes.
std::vector<uint8_t> RandomWeights(int64_t count, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  std::vector<uint8_t> bytes(count * DTypeSize(dtype));
  for (int64_t i = 0; i < count; ++i) {
    const float f = dist(rng);
    if (dtype == DType::kF32) {
      std::memcpy(bytes.data() + 4 * i, &f, 4);
    } else {
      const uint16_t h = dtype == DType::kBF16 ? F32ToBf16(f) : F32ToF16(f);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

std::vector<float> RandomFloats(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (float& f : v) f = dist(rng);
  return v;
}

struct Shape {
  int64_t n;
  int64_t k;
  const char* name = "";
};
constexpr Shape kShapes[] = {{2048, 2048}, {8192, 2048}, {2048, 8192}};
constexpr DType kDtypes[] = {DType::kBF16, DType::kF16, DType::kF32};

// Weight shapes of served models at TP 1 ([N, K] of each product; QKV and gate/up fused as
// the model runs them). Prefill skips the LM head (it multiplies only the last tokens).
struct ModelShapes {
  const char* model;
  std::vector<Shape> shapes;
  bool prefill = true;  // the 31B's prefill GEMMs take minutes on two cores
};
const std::vector<ModelShapes>& AllModelShapes() {
  static const auto* all = new std::vector<ModelShapes>{
      {"gemma-4-1b",
       {{4096, 1536, "qkv"},
        {5120, 1536, "qkv global"},
        {1536, 2048, "o"},
        {1536, 4096, "o global"},
        {16384, 1536, "gate_up"},
        {1536, 8192, "down"},
        {262144, 1536, "lm_head"}}},
      {"llama-3.2-1b",
       {{3072, 2048, "qkv"},
        {2048, 2048, "o"},
        {16384, 2048, "gate_up"},
        {2048, 8192, "down"},
        {128256, 2048, "lm_head"}}},
      {"gemma-3-270m",  // the real model the serving and speculative benchmarks run
       {{1536, 640, "qkv"},
        {640, 1024, "o"},
        {4096, 640, "gate_up"},
        {640, 2048, "down"},
        {262144, 640, "lm_head"}}},
      {"gemma-4-31b",
       {{16384, 5376, "qkv"}, {5376, 8192, "o"}, {43008, 5376, "gate_up"}, {5376, 21504, "down"}},
       false},
  };
  return *all;
}

// Enough distinct weight copies to total >= 256 MiB, cycled through so every call streams
// its weights from DRAM as a real decode step does (one layer's weights never hit the L3
// warm), instead of re-reading an L3-resident matrix. Held as the CPU backend holds
// weights (HostAllocation), on transparent huge pages or not.
struct WeightCopies {
  WeightCopies(Shape s, DType dtype, bool huge_pages = false) {
    const int64_t bytes = s.n * s.k * static_cast<int64_t>(DTypeSize(dtype));
    const int64_t count = std::max<int64_t>(2, ((int64_t{256} << 20) + bytes - 1) / bytes);
    for (int64_t c = 0; c < count; ++c) {
      absl::StatusOr<HostAllocation> a = HostAllocation::Make(bytes, huge_pages);
      if (!a.ok()) {
        std::fprintf(stderr, "kernels_bench: %s\n", std::string(a.status().message()).c_str());
        std::exit(1);
      }
      const std::vector<uint8_t> values = RandomWeights(s.n * s.k, dtype, static_cast<uint32_t>(c + 1));
      std::memcpy(a->data(), values.data(), bytes);  // the first touch, after madvise, as a load's
      copies.push_back(static_cast<const uint8_t*>(a->data()));
      memory.push_back(*std::move(a));
    }
    bytes_per_copy = bytes;
  }
  std::vector<HostAllocation> memory;
  std::vector<const uint8_t*> copies;
  int64_t bytes_per_copy = 0;
};

// Fastest single call of fn(copy) over `passes` passes through every copy. Each call reads
// a copy that the previous calls have evicted from the L3, so every sample streams from
// DRAM; taking the best (as STREAM does) discards calls slowed by other processes on this
// shared machine.
template <typename Fn>
double BestCallSeconds(const WeightCopies& w, int passes, Fn fn) {
  for (const uint8_t* c : w.copies) fn(c);  // warm-up: page faults, thread start
  double best = 1e30;
  for (int p = 0; p < passes; ++p) {
    for (const uint8_t* c : w.copies) {
      const auto start = Clock::now();
      fn(c);
      best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  return best;
}

// OpenBLAS's own worker threads, woken by a threaded reference call, spin for up to
// ~0.1 s afterwards and would steal cores from the next measurement; let them sleep.
void LetBlasThreadsSleep() { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }

void BenchDecodeLinear(int threads, double triad_gbs) {
  std::printf("\nLinear, M=1 (decode GEMV): weight GB/s streamed from DRAM; triad = %.1f GB/s\n",
              triad_gbs);
  std::printf("%-9s %6s %6s  %9s %9s %7s  %s\n", "dtype", "N", "K", "us/call", "GB/s", "%triad",
              "cblas_sgemv GB/s");
  for (const Shape s : kShapes) {
    for (const DType dtype : kDtypes) {
      WeightCopies w(s, dtype);
      const std::vector<float> x = RandomFloats(s.k, 7);
      std::vector<float> y(s.n);
      const double call_s = BestCallSeconds(w, 5, [&](const uint8_t* weights) {
        cpu::Linear(x.data(), 1, s.k, weights, dtype, s.n, y.data());
      });
      const double gbs = w.bytes_per_copy / call_s / 1e9;
      std::string blas = "";
      if (dtype == DType::kF32) {
        openblas_set_num_threads(threads);
        const double blas_s = BestCallSeconds(w, 5, [&](const uint8_t* weights) {
          cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(s.n),
                      static_cast<blasint>(s.k), 1.0f, reinterpret_cast<const float*>(weights),
                      static_cast<blasint>(s.k), x.data(), 1, 0.0f, y.data(), 1);
        });
        LetBlasThreadsSleep();
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.1f", w.bytes_per_copy / blas_s / 1e9);
        blas = buf;
      }
      std::printf("%-9s %6lld %6lld  %9.1f %9.1f %6.0f%%  %s\n",
                  std::string(DTypeName(dtype)).c_str(), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), call_s * 1e6, gbs, 100.0 * gbs / triad_gbs,
                  blas.c_str());
    }
  }
}

// Decode batches: how weight bandwidth holds up, and where sgemm takes over.
void BenchBatchSweep() {
  const Shape s{8192, 2048};
  std::printf("\nLinear over batch size M, N=%lld K=%lld: GFLOP/s and weight GB/s\n",
              static_cast<long long>(s.n), static_cast<long long>(s.k));
  std::printf("%-9s %4s  %9s %9s %9s\n", "dtype", "M", "us/call", "GFLOP/s", "wGB/s");
  for (const DType dtype : {DType::kBF16, DType::kF32}) {
    WeightCopies w(s, dtype);
    for (const int64_t m : {1, 2, 3, 4, 8, 12, 16, 17, 24, 32, 64}) {
      const std::vector<float> x = RandomFloats(m * s.k, 7);
      std::vector<float> y(m * s.n);
      const double call_s = BestCallSeconds(w, 3, [&](const uint8_t* weights) {
        cpu::Linear(x.data(), m, s.k, weights, dtype, s.n, y.data());
      });
      std::printf("%-9s %4lld  %9.1f %9.1f %9.1f\n", std::string(DTypeName(dtype)).c_str(),
                  static_cast<long long>(m), call_s * 1e6, 2.0 * m * s.n * s.k / call_s / 1e9,
                  w.bytes_per_copy / call_s / 1e9);
    }
  }
}

void BenchPrefillLinear(int threads) {
  constexpr int64_t kM = 512;
  std::printf(
      "\nLinear, M=%lld (prefill): GFLOP/s vs cblas_sgemm on fp32 weights (%d OpenBLAS "
      "threads)\n",
      static_cast<long long>(kM), threads);
  std::printf("%-9s %6s %6s  %9s %9s  %s\n", "dtype", "N", "K", "ms/call", "GFLOP/s",
              "sgemm GFLOP/s");
  for (const Shape s : kShapes) {
    const std::vector<float> x = RandomFloats(kM * s.k, 3);
    std::vector<float> y(kM * s.n);
    const double flop = 2.0 * kM * s.n * s.k;
    double ours_s[std::size(kDtypes)];
    for (size_t d = 0; d < std::size(kDtypes); ++d) {
      const std::vector<uint8_t> w = RandomWeights(s.n * s.k, kDtypes[d], 5);
      ours_s[d] = BestSeconds(
          5, [&] { cpu::Linear(x.data(), kM, s.k, w.data(), kDtypes[d], s.n, y.data()); });
    }
    // The reference runs last: its thread pool would disturb the measurements after it.
    const std::vector<uint8_t> w32 = RandomWeights(s.n * s.k, DType::kF32, 5);
    openblas_set_num_threads(threads);
    const double blas_s = BestSeconds(5, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(kM),
                  static_cast<blasint>(s.n), static_cast<blasint>(s.k), 1.0f, x.data(),
                  static_cast<blasint>(s.k), reinterpret_cast<const float*>(w32.data()),
                  static_cast<blasint>(s.k), 0.0f, y.data(), static_cast<blasint>(s.n));
    });
    LetBlasThreadsSleep();
    for (size_t d = 0; d < std::size(kDtypes); ++d) {
      std::printf("%-9s %6lld %6lld  %9.2f %9.1f  %.1f\n",
                  std::string(DTypeName(kDtypes[d])).c_str(), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), ours_s[d] * 1e3, flop / ours_s[d] / 1e9,
                  flop / blas_s / 1e9);
    }
  }
}

// The named models' products at M=1: bf16 weight GB/s streamed from DRAM beside the triad.
void BenchModelDecode(const ModelShapes& model, double triad_gbs) {
  std::printf("\n%s, Linear M=1 (decode GEMV), bf16 weights from DRAM; triad = %.1f GB/s\n",
              model.model, triad_gbs);
  std::printf("%-11s %7s %6s  %9s %9s %7s\n", "product", "N", "K", "us/call", "GB/s", "%triad");
  for (const Shape& s : model.shapes) {
    WeightCopies w(s, DType::kBF16);
    const std::vector<float> x = RandomFloats(s.k, 7);
    std::vector<float> y(s.n);
    const double call_s = BestCallSeconds(w, 5, [&](const uint8_t* weights) {
      cpu::Linear(x.data(), 1, s.k, weights, DType::kBF16, s.n, y.data());
    });
    const double gbs = w.bytes_per_copy / call_s / 1e9;
    std::printf("%-11s %7lld %6lld  %9.1f %9.1f %6.0f%%\n", s.name, static_cast<long long>(s.n),
                static_cast<long long>(s.k), call_s * 1e6, gbs, 100.0 * gbs / triad_gbs);
    std::fflush(stdout);
  }
}

// The process's AnonHugePages (/proc/self/smaps_rollup), bytes; -1 where unreadable.
int64_t ProcessAnonHugePageBytes() {
  FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) return -1;
  char line[256];
  long long kb = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "AnonHugePages: %lld kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The fastest call of fa on `a`'s copies and of fb on `b`'s over `passes` passes, the two
// interleaved call by call (a's copy i and b's copy i, which first alternating; both sets
// stream from DRAM), so that load from other processes on this shared machine falls on
// both alike. a and b may be the same copies.
template <typename FnA, typename FnB>
std::pair<double, double> BestCallSecondsInterleaved(const WeightCopies& a, FnA fa, const WeightCopies& b,
                                                     FnB fb, int passes) {
  for (const uint8_t* c : a.copies) fa(c);  // warm-up
  for (const uint8_t* c : b.copies) fb(c);
  double best_a = 1e30, best_b = 1e30;
  const auto time = [&](auto& fn, const uint8_t* c, double& best) {
    const auto start = Clock::now();
    fn(c);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  };
  for (int p = 0; p < passes; ++p) {
    for (size_t i = 0; i < std::max(a.copies.size(), b.copies.size()); ++i) {
      const bool a_first = (i + p) % 2 == 0;
      if (a_first && i < a.copies.size()) time(fa, a.copies[i], best_a);
      if (i < b.copies.size()) time(fb, b.copies[i], best_b);
      if (!a_first && i < a.copies.size()) time(fa, a.copies[i], best_a);
    }
  }
  return {best_a, best_b};
}

// The named models' decode GEMVs (M=1, bf16) on weights with huge pages on and off (as the
// CPU backend allocates them for --cpu-huge-pages on|off): each round takes the fastest
// call of each over 2 passes, the two interleaved call by call. Prints the median GB/s of
// each over the rounds, the median and range of the per-round ratios on / off, and how
// much of the "on" copies the kernel did back with huge pages.
void BenchModelDecodeHugePages(const ModelShapes& model, int rounds) {
  std::printf("\n%s, Linear M=1 (decode GEMV), bf16 weights from DRAM: huge pages on vs off, %d rounds "
              "interleaved (THP: %s)\n",
              model.model, rounds, ThpModeName(ReadThpMode()));
  std::printf("%-11s %7s %6s  %9s %9s  %7s %13s  %s\n", "product", "N", "K", "on GB/s", "off GB/s", "on/off",
              "ratio range", "on-copies' MiB on huge pages");
  for (const Shape& s : model.shapes) {
    const int64_t huge_before = ProcessAnonHugePageBytes();
    WeightCopies on(s, DType::kBF16, /*huge_pages=*/true);
    const int64_t huge_on = ProcessAnonHugePageBytes() - huge_before;
    WeightCopies off(s, DType::kBF16, /*huge_pages=*/false);
    const std::vector<float> x = RandomFloats(s.k, 7);
    std::vector<float> y(s.n);
    std::vector<double> on_gbs, off_gbs, ratios;
    for (int r = 0; r < rounds; ++r) {
      const auto gemv = [&](const uint8_t* weights) {
        cpu::Linear(x.data(), 1, s.k, weights, DType::kBF16, s.n, y.data());
      };
      const auto [on_s, off_s] = BestCallSecondsInterleaved(on, gemv, off, gemv, 2);
      on_gbs.push_back(on.bytes_per_copy / on_s / 1e9);
      off_gbs.push_back(off.bytes_per_copy / off_s / 1e9);
      ratios.push_back(off_s / on_s);
    }
    const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
    char range[32];
    std::snprintf(range, sizeof(range), "%.2f-%.2f", *lo, *hi);
    const int64_t on_bytes = on.bytes_per_copy * static_cast<int64_t>(on.copies.size());
    std::printf("%-11s %7lld %6lld  %9.1f %9.1f  %6.2fx %13s  %lld of %lld\n", s.name, static_cast<long long>(s.n),
                static_cast<long long>(s.k), Median(on_gbs), Median(off_gbs), Median(ratios), range,
                static_cast<long long>(huge_on >> 20), static_cast<long long>(on_bytes >> 20));
    std::fflush(stdout);
  }
}

// The named models' decode GEMVs (bf16 weights) on the two GEMM paths, for batches of 1
// (decode) and 3 and 5 rows (speculative verification of 2 and 4 drafted tokens): kSgemm's
// fp32 FMAs against kOneDnnBf16's bf16 dot products, interleaved call by call, each round
// the fastest call of each over 2 passes. Prints the median time of each over the rounds
// and the median and range of the per-round ratios sgemm / onednn-bf16 (> 1: bf16 faster).
// tiles: the onednn-bf16 GEMV on rows against the amx-bf16 one on the same weights held in
// tile order (kernels/cpu/gemm_amx_tiles.cc) instead of the sgemm path against onednn-bf16.
void BenchModelDecodeGemvPaths(const ModelShapes& model, int rounds, bool tiles) {
  std::printf("\n%s, decode GEMVs, bf16 weights from DRAM: %s, %d rounds interleaved\n", model.model,
              tiles ? "onednn-bf16 path (rows) vs amx-bf16 path (tile order)"
                    : "sgemm path (fp32 FMAs) vs onednn-bf16 path (bf16 dot products)",
              rounds);
  std::printf("%-11s %7s %6s %3s  %10s %10s  %7s %11s  %s\n", "product", "N", "K", "M", tiles ? "rows us" : "fp32 us",
              tiles ? "tiles us" : "bf16 us", "ratio", "range", "b weight GB/s");
  for (const Shape& s : model.shapes) {
    if (tiles && !cpu::amx::CanHoldAsTiles(s.n, s.k)) continue;
    WeightCopies w(s, DType::kBF16, /*huge_pages=*/true);
    std::optional<WeightCopies> packed;  // the tile-order copies (--tiles-ab only)
    if (tiles) {
      packed.emplace(s, DType::kBF16, /*huge_pages=*/true);
      for (const uint8_t* c : packed->copies) {
        cpu::amx::PackTiles(const_cast<uint16_t*>(reinterpret_cast<const uint16_t*>(c)), s.n, s.k);
      }
    }
    for (const int64_t m : {1, 3, 5}) {
      const std::vector<float> x = RandomFloats(m * s.k, 7);
      std::vector<float> y(m * s.n);
      const auto on = [&](cpu::GemmPath path, DType dtype) {
        return [&, path, dtype](const uint8_t* weights) {
          cpu::Linear(path, x.data(), m, s.k, weights, dtype, s.n, y.data());
        };
      };
      std::vector<double> a_s, b_s, ratios;
      for (int r = 0; r < rounds; ++r) {
        const auto [a, b] =
            tiles ? BestCallSecondsInterleaved(w, on(cpu::GemmPath::kOneDnnBf16, DType::kBF16), *packed,
                                               on(cpu::GemmPath::kAmxBf16, DType::kBF16Tiles), 2)
                  : BestCallSecondsInterleaved(w, on(cpu::GemmPath::kSgemm, DType::kBF16), w,
                                               on(cpu::GemmPath::kOneDnnBf16, DType::kBF16), 2);
        a_s.push_back(a);
        b_s.push_back(b);
        ratios.push_back(a / b);
      }
      const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
      char range[32];
      std::snprintf(range, sizeof(range), "%.2f-%.2f", *lo, *hi);
      std::printf("%-11s %7lld %6lld %3lld  %10.1f %10.1f  %6.2fx %11s  %.1f\n", s.name,
                  static_cast<long long>(s.n), static_cast<long long>(s.k), static_cast<long long>(m),
                  Median(a_s) * 1e6, Median(b_s) * 1e6, Median(ratios), range,
                  w.bytes_per_copy / Median(b_s) / 1e9);
      std::fflush(stdout);
    }
  }
}

// The named models' products at M=512 (a prompt): GFLOP/s of Linear on bf16 weights on
// every GEMM path this build and CPU have ("-": not here), and of OpenBLAS sgemm on the
// same weights in fp32 (the fp32 FMA rate this machine reaches).
void BenchModelPrefill(const ModelShapes& model, int threads) {
  constexpr int64_t kM = 512;
  const std::vector<cpu::GemmPath> paths = cpu::AvailableGemmPaths();
  const auto has = [&](cpu::GemmPath p) { return std::find(paths.begin(), paths.end(), p) != paths.end(); };
  std::printf("\n%s, Linear M=%lld (prefill), bf16 weights: GFLOP/s per GEMM path\n", model.model,
              static_cast<long long>(kM));
  std::printf("%-11s %7s %6s  %9s %12s %9s %9s  %s\n", "product", "N", "K", "sgemm", "onednn-bf16", "amx rows",
              "amx-bf16", "fp32 sgemm on fp32 weights");
  for (const Shape& s : model.shapes) {
    if (std::string(s.name) == "lm_head") continue;
    const std::vector<float> x = RandomFloats(kM * s.k, 3);
    std::vector<float> y(kM * s.n);
    const double flop = 2.0 * kM * s.n * s.k;
    const std::vector<uint8_t> w = RandomWeights(s.n * s.k, DType::kBF16, 5);
    const auto gflops = [&](cpu::GemmPath path, const std::vector<uint8_t>& weights = {}, DType dtype = DType::kBF16) {
      const double t = BestSeconds(3, [&] {
        cpu::Linear(path, x.data(), kM, s.k, (weights.empty() ? w : weights).data(), dtype, s.n, y.data());
      });
      return flop / t / 1e9;
    };
    const double sgemm = gflops(cpu::GemmPath::kSgemm);
    char onednn[32] = "-";
    if (has(cpu::GemmPath::kOneDnnBf16)) std::snprintf(onednn, sizeof(onednn), "%.1f", gflops(cpu::GemmPath::kOneDnnBf16));
    char amx[32] = "-";
    char tiles[32] = "-";  // the amx-bf16 path as the CPU backend runs it: weights held in tile order
    if (has(cpu::GemmPath::kAmxBf16)) {
      std::snprintf(amx, sizeof(amx), "%.1f", gflops(cpu::GemmPath::kAmxBf16));
      if (cpu::amx::CanHoldAsTiles(s.n, s.k)) {
        std::vector<uint8_t> packed = w;
        cpu::amx::PackTiles(reinterpret_cast<uint16_t*>(packed.data()), s.n, s.k);
        std::snprintf(tiles, sizeof(tiles), "%.1f", gflops(cpu::GemmPath::kAmxBf16, packed, DType::kBF16Tiles));
      }
    }
    const std::vector<uint8_t> w32 = RandomWeights(s.n * s.k, DType::kF32, 5);
    openblas_set_num_threads(threads);
    const double blas_s = BestSeconds(3, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(kM),
                  static_cast<blasint>(s.n), static_cast<blasint>(s.k), 1.0f, x.data(),
                  static_cast<blasint>(s.k), reinterpret_cast<const float*>(w32.data()),
                  static_cast<blasint>(s.k), 0.0f, y.data(), static_cast<blasint>(s.n));
    });
    LetBlasThreadsSleep();
    std::printf("%-11s %7lld %6lld  %9.1f %12s %9s %9s  %.1f\n", s.name, static_cast<long long>(s.n),
                static_cast<long long>(s.k), sgemm, onednn, amx, tiles, flop / blas_s / 1e9);
    std::fflush(stdout);
  }
}

// Prefill attention of one 512-token prompt (causal), per layer, beside the layer's
// Linear FLOPs: how much of a prefill step attention is.
void BenchPrefillAttention(int32_t q_heads, int32_t kv_heads, int32_t head_dim) {
  constexpr int64_t kTokens = 512;
  cpu::PagedAttentionParams p;
  p.num_q_heads = q_heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.block_size = 16;
  p.max_blocks_per_seq = kTokens / p.block_size;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t row = static_cast<int64_t>(kv_heads) * head_dim;
  const std::vector<float> k_cache = RandomFloats(kTokens * row, 1);
  const std::vector<float> v_cache = RandomFloats(kTokens * row, 2);
  std::vector<int32_t> block_tables(p.max_blocks_per_seq);
  std::iota(block_tables.begin(), block_tables.end(), 0);
  std::vector<int32_t> token_seq(kTokens, 0), token_pos(kTokens);
  std::iota(token_pos.begin(), token_pos.end(), 0);
  const std::vector<float> q = RandomFloats(kTokens * q_heads * head_dim, 3);
  std::vector<float> out(q.size());
  const double t = BestSeconds(3, [&] {
    cpu::PagedAttention(q.data(), k_cache.data(), v_cache.data(), token_seq.data(),
                        token_pos.data(), kTokens, block_tables.data(), p, out.data());
  });
  // QK^T and PV over the causal triangle.
  const double flop = 2.0 * 2.0 * q_heads * head_dim * (kTokens * (kTokens + 1) / 2.0);
  std::printf("\nPagedAttention prefill, %lld tokens, %d q / %d kv heads, head_dim %d: "
              "%.2f ms, %.1f GFLOP/s\n",
              static_cast<long long>(kTokens), q_heads, kv_heads, head_dim, t * 1e3,
              flop / t / 1e9);
}

// Decode attention over a 1024-token context per sequence: 32 query heads, 8 KV heads,
// head_dim 128, block_size 16 (Llama-3-8B on one rank).
void BenchDecodeAttention() {
  constexpr int64_t kContext = 1024;
  cpu::PagedAttentionParams p;
  p.num_q_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  p.block_size = 16;
  p.max_blocks_per_seq = kContext / p.block_size;
  p.scale = 1.0f / std::sqrt(128.0f);
  std::printf("\nPagedAttention decode, context %lld, %d q heads / %d kv heads, head_dim %d\n",
              static_cast<long long>(kContext), p.num_q_heads, p.num_kv_heads, p.head_dim);
  std::printf("%6s  %9s %12s\n", "seqs", "us/step", "KV GB/s");
  for (const int64_t seqs : {1, 8, 32}) {
    const int64_t blocks = seqs * p.max_blocks_per_seq;
    const int64_t row = static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
    const std::vector<float> k_cache = RandomFloats(blocks * p.block_size * row, 1);
    const std::vector<float> v_cache = RandomFloats(blocks * p.block_size * row, 2);
    std::vector<int32_t> block_tables(blocks);
    std::iota(block_tables.begin(), block_tables.end(), 0);
    std::shuffle(block_tables.begin(), block_tables.end(), std::mt19937(9));
    std::vector<int32_t> token_seq(seqs), token_pos(seqs, kContext - 1);
    std::iota(token_seq.begin(), token_seq.end(), 0);
    const std::vector<float> q = RandomFloats(seqs * p.num_q_heads * p.head_dim, 3);
    std::vector<float> out(q.size());
    const double t = BestSeconds(10, [&] {
      cpu::PagedAttention(q.data(), k_cache.data(), v_cache.data(), token_seq.data(),
                          token_pos.data(), seqs, block_tables.data(), p, out.data());
    });
    const double kv_bytes = 2.0 * seqs * kContext * row * sizeof(float);
    std::printf("%6lld  %9.1f %12.1f\n", static_cast<long long>(seqs), t * 1e6, kv_bytes / t / 1e9);
  }
}

}  // namespace
}  // namespace tpserve::bench

int main(int argc, char** argv) {
  int threads = omp_get_max_threads();
  bool sweep = false;
  int huge_pages_rounds = 0;
  int gemv_paths_rounds = 0;
  int tiles_rounds = 0;
  bool attention_only = false;
  std::vector<const tpserve::bench::ModelShapes*> models;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--sweep") == 0) {
      sweep = true;
    } else if (std::strcmp(argv[i], "--attention") == 0) {
      attention_only = true;
    } else if (std::strcmp(argv[i], "--huge-pages-ab") == 0 && i + 1 < argc) {
      huge_pages_rounds = std::atoi(argv[++i]);
      if (huge_pages_rounds < 1) {
        std::fprintf(stderr, "--huge-pages-ab: rounds must be >= 1\n");
        return 2;
      }
    } else if (std::strcmp(argv[i], "--gemv-paths-ab") == 0 && i + 1 < argc) {
      gemv_paths_rounds = std::atoi(argv[++i]);
      if (gemv_paths_rounds < 1) {
        std::fprintf(stderr, "--gemv-paths-ab: rounds must be >= 1\n");
        return 2;
      }
    } else if (std::strcmp(argv[i], "--tiles-ab") == 0 && i + 1 < argc) {
      tiles_rounds = std::atoi(argv[++i]);
      if (tiles_rounds < 1) {
        std::fprintf(stderr, "--tiles-ab: rounds must be >= 1\n");
        return 2;
      }
    } else if (std::strcmp(argv[i], "--models") == 0 && i + 1 < argc) {
      const std::vector<std::string> names = absl::StrSplit(argv[++i], ',');
      for (const std::string& name : names) {
        const auto& all = tpserve::bench::AllModelShapes();
        const auto it = std::find_if(all.begin(), all.end(),
                                     [&](const auto& m) { return name == m.model; });
        if (it == all.end()) {
          std::fprintf(stderr, "--models: unknown model \"%s\"; known: gemma-4-1b, "
                       "llama-3.2-1b, gemma-3-270m, gemma-4-31b\n", name.c_str());
          return 2;
        }
        models.push_back(&*it);
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--threads N] [--sweep] [--models a,b,...] [--huge-pages-ab ROUNDS] "
                   "[--gemv-paths-ab ROUNDS] [--tiles-ab ROUNDS] [--attention]\n",
                   argv[0]);
      return 2;
    }
  }
  if (threads < 1) {
    std::fprintf(stderr, "--threads must be >= 1\n");
    return 2;
  }
  if ((huge_pages_rounds > 0 || gemv_paths_rounds > 0 || tiles_rounds > 0) && models.empty()) {
    std::fprintf(stderr, "--huge-pages-ab, --gemv-paths-ab and --tiles-ab need --models\n");
    return 2;
  }
  omp_set_num_threads(threads);
  std::printf("kernels_bench: %d threads\n", threads);
  const auto gemm = tpserve::cpu::ChooseGemmPath("auto");
  std::printf("prefill GEMM path (auto): %s\n", gemm.ok() ? gemm->description.c_str() : "error");
  if (attention_only) {  // the attention lines alone: quick A/B runs of the attention kernel
    tpserve::bench::BenchPrefillAttention(8, 4, 256);
    tpserve::bench::BenchPrefillAttention(32, 8, 64);
    tpserve::bench::BenchDecodeAttention();
    return 0;
  }
  const double triad_gbs = tpserve::bench::MeasureTriadBandwidthGBs(threads);
  std::printf("STREAM triad (3 x 256 MiB, write-allocate not counted): %.1f GB/s\n", triad_gbs);
  if (huge_pages_rounds > 0) {
    for (const auto* m : models) tpserve::bench::BenchModelDecodeHugePages(*m, huge_pages_rounds);
    return 0;
  }
  if (tiles_rounds > 0) {
    if (!tpserve::cpu::amx::Bf16Available()) {
      std::fprintf(stderr, "--tiles-ab: no AMX-BF16 here: %s\n", tpserve::cpu::amx::Bf16Unavailable().c_str());
      return 2;
    }
    for (const auto* m : models) tpserve::bench::BenchModelDecodeGemvPaths(*m, tiles_rounds, /*tiles=*/true);
    return 0;
  }
  if (gemv_paths_rounds > 0) {
    const std::vector<tpserve::cpu::GemmPath> paths = tpserve::cpu::AvailableGemmPaths();
    if (std::find(paths.begin(), paths.end(), tpserve::cpu::GemmPath::kOneDnnBf16) == paths.end()) {
      std::fprintf(stderr, "--gemv-paths-ab: the onednn-bf16 path is not available here\n");
      return 2;
    }
    for (const auto* m : models) tpserve::bench::BenchModelDecodeGemvPaths(*m, gemv_paths_rounds, /*tiles=*/false);
    return 0;
  }
  if (!models.empty()) {
    for (const auto* m : models) tpserve::bench::BenchModelDecode(*m, triad_gbs);
    for (const auto* m : models) {
      if (m->prefill) tpserve::bench::BenchModelPrefill(*m, threads);
    }
    tpserve::bench::BenchPrefillAttention(8, 4, 256);   // gemma-4-1b sliding layers
    tpserve::bench::BenchPrefillAttention(32, 8, 64);   // llama-3.2-1b
    return 0;
  }
  tpserve::bench::BenchDecodeLinear(threads, triad_gbs);
  if (sweep) tpserve::bench::BenchBatchSweep();
  tpserve::bench::BenchPrefillLinear(threads);
  tpserve::bench::BenchDecodeAttention();
  return 0;
}
