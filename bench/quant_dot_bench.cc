// Decode GEMV on ggml block-quantized and FP8 weights (kernels/cpu/quant.h): y[m, n] = x[m, k] .
// w[n, k]^T with the weights far beyond the L3, per weight type, dot-kernel path and number
// of x rows, in GB/s of weight bytes beside the STREAM triad measured in the same run.
// Usage: quant_dot_bench [--threads 1,2] [--k 4096] [--mib 256] [--types q4_1,q3_k,...]
//                        [--huge-pages on|off]
//   --mib 1 keeps the weights in L2: the kernels' compute rate, not the memory's.
//   --types: only these weight types (DTypeName's names; default: every type with kernels).
//   --step TYPE:NxK,...[*R][+TYPE:NxK,...]: instead, one decode step's GEMVs in order through
//   QuantGemv (the CPU backend's entry), each matrix its own allocation as the backend holds
//   them (or all in one with --arena on): the listed matrices R times (a layer), then the
//   ones after '+' (the head), e.g. Llama-3.2-1B Q4_K_M:
//   --step q4_k:3072x2048,q4_k:2048x2048,q4_k:16384x2048,q6_k:2048x8192*16+q6_k:128256x2048
//   --huge-pages: the weights in a HostAllocation with huge pages (on: as the CPU backend holds
//   them, worker/host_memory.h) or without (off: 4 KiB pages unless THP is "always").
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench/best_seconds.h"
#include "bench/stream.h"
#include "kernels/base.h"
#include "kernels/cpu/quant.h"
#include "worker/host_memory.h"

namespace tpserve::bench {
namespace {

using cpu::QuantIsa;

// Random quant bytes (fast: the weights are hundreds of MiB) with every scale of a block set to
// a finite value (fp16; FP8's fp32, and no NaN codes), so the kernels see the data they would
// in a model.
void RandomBlocks(DType w, size_t bytes, uint8_t* v) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    s += 0x9e3779b97f4a7c15ull;
    uint64_t z = (s ^ (s >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    std::memcpy(&v[i], &z, 8);
  }
  if (w == DType::kF8_E4M3) {
    const float scale = 0.004f;
    for (size_t i = 0; i < bytes; ++i) v[i] = (v[i] & 0x7f) == 0x7f ? v[i] ^ 1 : v[i];
    for (size_t b = 0; b + BlockBytes(w) <= bytes; b += BlockBytes(w)) std::memcpy(&v[b], &scale, 4);
    return;
  }
  const uint16_t h = F32ToF16(0.004f);
  // The fp16 scales' offsets in a block: d, and dmin (K-quants) or m (Q4_1, Q5_1).
  std::vector<size_t> scales_at = {0};
  if (w == DType::kQ4_K || w == DType::kQ5_K || w == DType::kQ4_1 || w == DType::kQ5_1) scales_at = {0, 2};
  if (w == DType::kQ2_K) scales_at = {80, 82};
  if (w == DType::kQ3_K) scales_at = {108};
  if (w == DType::kQ6_K) scales_at = {208};
  for (size_t b = 0; b + BlockBytes(w) <= bytes; b += BlockBytes(w)) {
    for (size_t at : scales_at) std::memcpy(&v[b + at], &h, 2);
  }
}

std::vector<std::string> ParseNames(const char* s) {
  std::vector<std::string> out;
  for (const char* p = s; *p;) {
    const char* e = p;
    while (*e && *e != ',') ++e;
    out.emplace_back(p, e);
    p = *e ? e + 1 : e;
  }
  return out;
}

std::vector<int> ParseInts(const char* s) {
  std::vector<int> out;
  for (const char* p = s; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

struct StepMatrix {
  DType w;
  int64_t n, k;
};

// "TYPE:NxK,...[*R][+TYPE:NxK,...]" (see the usage above): the matrices of one step in order.
absl::StatusOr<std::vector<StepMatrix>> ParseStep(const std::string& spec) {
  std::vector<StepMatrix> out;
  const size_t plus = spec.find('+');
  std::string layer = spec.substr(0, plus);
  const std::string tail = plus == std::string::npos ? "" : spec.substr(plus + 1);
  int repeat = 1;
  if (const size_t star = layer.find('*'); star != std::string::npos) {
    repeat = std::atoi(layer.c_str() + star + 1);
    layer.resize(star);
  }
  auto parse = [](const std::string& list, std::vector<StepMatrix>& into) -> absl::Status {
    for (const std::string& item : ParseNames(list.c_str())) {
      const size_t colon = item.find(':'), x = item.find('x', colon);
      if (colon == std::string::npos || x == std::string::npos) {
        return absl::InvalidArgumentError("--step: expected TYPE:NxK, got " + item);
      }
      std::optional<DType> w;
      for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                      DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF8_E4M3}) {
        if (DTypeName(t) == item.substr(0, colon)) w = t;
      }
      if (!w) return absl::InvalidArgumentError("--step: no dot kernels for " + item);
      const StepMatrix m{*w, std::atoll(item.c_str() + colon + 1), std::atoll(item.c_str() + x + 1)};
      if (!cpu::HasQuantDot(m.w) || m.n <= 0 || m.k <= 0 || m.k % BlockElems(m.w) != 0) {
        return absl::InvalidArgumentError("--step: no dot kernel for " + item);
      }
      into.push_back(m);
    }
    return absl::OkStatus();
  };
  std::vector<StepMatrix> one;
  if (absl::Status st = parse(layer, one); !st.ok()) return st;
  for (int r = 0; r < repeat; ++r) out.insert(out.end(), one.begin(), one.end());
  if (absl::Status st = parse(tail, out); !st.ok()) return st;
  return out;
}

// One decode step's GEMVs (m = 1) in order through QuantGemv, best of `rounds`, in GB/s of
// weight bytes; each matrix its own HostAllocation (as CpuBackend holds them), or one for all.
int RunStep(const std::vector<StepMatrix>& step, bool huge_pages, bool arena, int rounds) {
  std::vector<size_t> bytes, at;
  size_t total = 0;
  int64_t max_k = 0, max_n = 0;
  for (const StepMatrix& m : step) {
    bytes.push_back(static_cast<size_t>(m.n) * RowBytes(m.w, m.k));
    at.push_back(total);
    total += (bytes.back() + 63) / 64 * 64;
    max_k = std::max(max_k, m.k);
    max_n = std::max(max_n, m.n);
  }
  std::vector<HostAllocation> allocs;
  std::vector<const uint8_t*> weights;
  for (size_t i = 0; i < step.size(); ++i) {
    if (arena && i > 0) {
      weights.push_back(static_cast<const uint8_t*>(allocs[0].data()) + at[i]);
    } else {
      absl::StatusOr<HostAllocation> a = HostAllocation::Make(arena ? total : bytes[i], huge_pages);
      if (!a.ok()) {
        std::fprintf(stderr, "%s\n", a.status().ToString().c_str());
        return 1;
      }
      allocs.push_back(*std::move(a));
      weights.push_back(static_cast<const uint8_t*>(allocs.back().data()));
    }
    RandomBlocks(step[i].w, bytes[i], const_cast<uint8_t*>(weights.back()));
  }
  std::vector<float> x(max_k), y(max_n);
  for (int64_t j = 0; j < max_k; ++j) x[j] = static_cast<float>((j * 7919) % 2001 - 1000) / 1000.0f;
  const double triad_before = MeasureTriadBandwidthGBs(omp_get_max_threads());
  const double s = BestSeconds(rounds, [&] {
    for (size_t i = 0; i < step.size(); ++i) {
      cpu::QuantGemv(x.data(), 1, step[i].k, weights[i], step[i].w, step[i].n, y.data());
    }
  });
  const double triad = std::max(triad_before, MeasureTriadBandwidthGBs(omp_get_max_threads()));
  size_t sum = 0;
  for (size_t b : bytes) sum += b;
  std::printf("step: %zu matrices, %.1f MB, threads %d, %s, huge pages %s: %.2f ms, %.1f GB/s (%.0f%% of the triad, %.1f GB/s)\n",
              step.size(), sum / 1e6, omp_get_max_threads(), arena ? "one allocation" : "an allocation each",
              huge_pages ? "on" : "off", s * 1e3, sum / s / 1e9, 100 * sum / s / 1e9 / triad, triad);
  return 0;
}

int Main(int argc, char** argv) {
  std::vector<int> thread_counts = {1, 2};
  int64_t k = 4096;
  int64_t mib = 256;
  std::vector<std::string> only;
  bool huge_pages = true, arena = false;
  std::string step;
  for (int a = 1; a + 1 < argc; a += 2) {
    const std::string flag = argv[a];
    if (flag == "--threads") thread_counts = ParseInts(argv[a + 1]);
    else if (flag == "--k") k = std::atoll(argv[a + 1]);
    else if (flag == "--mib") mib = std::atoll(argv[a + 1]);
    else if (flag == "--types") only = ParseNames(argv[a + 1]);
    else if (flag == "--huge-pages") huge_pages = std::string(argv[a + 1]) != "off";
    else if (flag == "--step") step = argv[a + 1];
    else if (flag == "--arena") arena = std::string(argv[a + 1]) == "on";
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (!step.empty()) {
    absl::StatusOr<std::vector<StepMatrix>> matrices = ParseStep(step);
    if (!matrices.ok()) {
      std::fprintf(stderr, "%s\n", std::string(matrices.status().message()).c_str());
      return 2;
    }
    for (int threads : thread_counts) {
      omp_set_num_threads(threads);
      if (int rc = RunStep(*matrices, huge_pages, arena, 10); rc != 0) return rc;
    }
    return 0;
  }
  std::vector<DType> types;
  for (DType w : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF8_E4M3}) {
    if (only.empty() || std::find(only.begin(), only.end(), DTypeName(w)) != only.end()) types.push_back(w);
  }
  for (const std::string& name : only) {
    if (std::none_of(types.begin(), types.end(), [&](DType w) { return DTypeName(w) == name; })) {
      std::fprintf(stderr, "--types: no dot kernels for %s\n", name.c_str());
      return 2;
    }
  }
  const QuantIsa isas[] = {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512Vnni};
  for (int threads : thread_counts) {
    omp_set_num_threads(threads);
    // The triad before and after the kernels, the better one as the yardstick: on a shared
    // machine one of them may have run beside someone else's work.
    const double triad_before = MeasureTriadBandwidthGBs(threads);
    struct Result {
      std::string label;  // type, path, m
      double gbs;
    };
    std::vector<Result> results;
    for (DType w : types) {
      if (k % BlockElems(w) != 0) continue;  // e.g. --k 640 (Gemma 3 270M's hidden size): no K-quants
      const size_t row_bytes = RowBytes(w, k);
      const int64_t n = std::max<int64_t>(64, (mib << 20) / static_cast<int64_t>(row_bytes));
      absl::StatusOr<HostAllocation> alloc = HostAllocation::Make(n * row_bytes, huge_pages);
      if (!alloc.ok()) {
        std::fprintf(stderr, "%s\n", alloc.status().ToString().c_str());
        return 1;
      }
      const uint8_t* weights = static_cast<const uint8_t*>(alloc->data());
      RandomBlocks(w, n * row_bytes, static_cast<uint8_t*>(alloc->data()));
      for (int m : {1, 4, 8, 12, 16}) {
        std::vector<float> x(m * k);
        for (int64_t j = 0; j < m * k; ++j) x[j] = static_cast<float>((j * 7919) % 2001 - 1000) / 1000.0f;
        const size_t xq_bytes = cpu::QuantizedXRowBytes(w, k);
        std::vector<uint8_t> xq(m * xq_bytes);
        std::vector<float> y(m * n);
        for (QuantIsa isa : isas) {
          const cpu::QuantDotFn dot = cpu::FindQuantDot(w, isa);
          if (dot == nullptr) continue;
          cpu::QuantizeX(w, isa, x.data(), m, k, xq.data());
          // Scalar is the reference, not a decode path: one row is enough to show its rate.
          if (isa == QuantIsa::kScalar && m > 1) continue;
          constexpr int64_t kChunk = 64;
          const double s = BestSeconds(5, [&] {
#pragma omp parallel for schedule(static)
            for (int64_t r0 = 0; r0 < n; r0 += kChunk) {
              const int64_t r1 = std::min(n, r0 + kChunk);
              for (int64_t r = r0; r < r1; ++r) {
                dot(weights + r * row_bytes, xq.data(), xq_bytes, m, k, y.data() + r, n);
              }
            }
          });
          char label[64];
          std::snprintf(label, sizeof(label), "%-8s %-12s %2d", std::string(DTypeName(w)).c_str(),
                        cpu::QuantIsaName(isa), m);
          results.push_back({label, static_cast<double>(n * row_bytes) / s / 1e9});
        }
        // The row tiles (quant.h), where the type has them: QuantGemv's path from
        // kQuantTileRowsFrom rows on.
        if (const cpu::QuantTileFn tile = cpu::FindQuantTile(w, cpu::BestQuantIsa()); tile != nullptr && m > 1) {
          std::vector<uint8_t> xt(cpu::QuantizedXTileBytes(w, k));
          cpu::QuantizeXTile(w, x.data(), m, k, xt.data());
          const double s = BestSeconds(5, [&] {
#pragma omp parallel for schedule(static)
            for (int64_t r = 0; r < n; ++r) tile(weights + r * row_bytes, xt.data(), m, k, y.data() + r, n);
          });
          char label[64];
          std::snprintf(label, sizeof(label), "%-8s %-12s %2d", std::string(DTypeName(w)).c_str(), "tiles", m);
          results.push_back({label, static_cast<double>(n * row_bytes) / s / 1e9});
        }
      }
    }
    const double triad_after = MeasureTriadBandwidthGBs(threads);
    const double triad = std::max(triad_before, triad_after);
    std::printf("threads %d: STREAM triad %.1f GB/s (%.1f before, %.1f after); k %lld, ~%lld MiB of weights per type; "
                "huge pages %s\n",
                threads, triad, triad_before, triad_after, static_cast<long long>(k), static_cast<long long>(mib),
                DescribeHugePages(huge_pages, ReadThpMode()).c_str());
    std::printf("%-8s %-12s %2s %9s %7s\n", "type", "path", "m", "GB/s", "triad");
    for (const Result& r : results) std::printf("%s %9.1f %6.0f%%\n", r.label.c_str(), r.gbs, 100 * r.gbs / triad);
    std::fflush(stdout);
  }
  // QuantizeX alone: one 4096-element row, per activation kind.
  for (DType w : {DType::kQ8_0, DType::kQ4_1, DType::kQ4_K}) {
    if (k % BlockElems(w) != 0) continue;
    std::vector<float> x(k);
    for (int64_t j = 0; j < k; ++j) x[j] = static_cast<float>((j * 7919) % 2001 - 1000) / 1000.0f;
    std::vector<uint8_t> xq(cpu::QuantizedXRowBytes(w, k));
    const double s = BestSeconds(200, [&] { cpu::QuantizeX(w, cpu::BestQuantIsa(), x.data(), 1, k, xq.data()); });
    std::printf("QuantizeX %s activations, k %lld: %.2f us\n",
                w == DType::kQ8_0 ? "q8 (32)" : w == DType::kQ4_1 ? "q8_1 (32)" : "q8_K (256)",
                static_cast<long long>(k), s * 1e6);
  }
  return 0;
}

}  // namespace
}  // namespace tpserve::bench

int main(int argc, char** argv) { return tpserve::bench::Main(argc, argv); }
