// Time per row of cpu::SampleRows (kernels/cpu/sampling.cc) beside the pre-change naive
// implementation, kept below as the baseline, in one run (and the host logprobs' passes,
// cpu::LogSumExp and cpu::TopN, beside coordinator/engine/logprobs.cc's old loops): V = 32,000 and 262,144, peaked
// (LLM-like) and flat rows, the usual filter mixes. Not a test; tests/cpu_sampling_test.cc
// checks the results. Usage: sampling_bench [--min_seconds S]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/row_sampling.h"

namespace tpserve::bench {
namespace {

// ---- Pre-change baseline: cpu::SampleRows as kernels/cpu/sampling.cc had it at commit
// b0fe237 (one exp pass in doubles, nth_element on a copy for top-k, a full sort of the
// candidates for top-p), copied unchanged but for the namespace. Only for comparison. ----
namespace baseline {

int32_t FirstArgmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (std::isnan(x[best])) break;
    if (std::isnan(x[i]) || x[i] > x[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

int32_t SampleRow(const float* l, int64_t V, const RowSampling& p, std::vector<float>& s, std::vector<double>& w,
                  std::vector<int32_t>& cand) {
  if (!(p.temperature >= 1e-5f)) return FirstArgmax(l, V);
  s.resize(V);
  w.resize(V);
  float m = -INFINITY;
  for (int64_t i = 0; i < V; ++i) {
    s[i] = l[i] / p.temperature;
    m = std::max(m, s[i]);
  }
  if (!std::isfinite(m)) return FirstArgmax(l, V);  // no finite logit: nothing to weigh
  for (int64_t i = 0; i < V; ++i) w[i] = std::exp(static_cast<double>(s[i]) - m);
  float thr = -INFINITY;
  if (p.top_k > 0 && p.top_k < V) {
    std::vector<float> c(s.begin(), s.end());
    std::nth_element(c.begin(), c.begin() + (p.top_k - 1), c.end(), std::greater<float>());
    thr = c[p.top_k - 1];
  }
  if (p.top_p < 1.0f) {
    cand.clear();
    double kept = 0;
    for (int64_t i = 0; i < V; ++i) {
      if (s[i] >= thr) {
        cand.push_back(static_cast<int32_t>(i));
        kept += w[i];
      }
    }
    std::sort(cand.begin(), cand.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
    const double need = static_cast<double>(p.top_p) * kept;
    double cum = 0;
    for (int32_t i : cand) {
      cum += w[i];
      if (cum >= need) {
        thr = std::max(thr, s[i]);
        break;
      }
    }
  }
  if (p.min_p > 0.0f) thr = std::max(thr, m + std::log(p.min_p));
  double total = 0;
  for (int64_t i = 0; i < V; ++i) total += s[i] >= thr ? w[i] : 0.0;
  const double target = static_cast<double>(SampleUniform(p.seed, p.step)) * total;
  double cum = 0;
  int32_t last = -1;
  for (int64_t i = 0; i < V; ++i) {
    if (!(s[i] >= thr)) continue;
    last = static_cast<int32_t>(i);
    cum += w[i];
    if (cum > target) return last;
  }
  return last >= 0 ? last : FirstArgmax(l, V);
}

void SampleRows(float* logits, int64_t rows, int64_t vocab, const RowSampling* params, const int32_t* offsets,
                const int32_t* token_ids, const int32_t* counts, int32_t* out) {
  std::vector<float> s;
  std::vector<double> w;
  std::vector<int32_t> cand;
  for (int64_t r = 0; r < rows; ++r) {
    float* l = logits + r * vocab;
    for (int32_t e = offsets[r]; e < offsets[r + 1]; ++e) {
      const int32_t id = token_ids[e];
      if (id >= 0 && id < vocab) l[id] = PenalizedLogit(l[id], params[r], counts[e]);
    }
    out[r] = SampleRow(l, vocab, params[r], s, w, cand);
  }
}

// The host logprobs of coordinator/engine/logprobs.cc at commit 6ba2c3e without penalties
// (a copy of the row, a scalar max pass, exp in doubles, a scalar top-N scan): the log-softmax
// at `token` and the top_n largest, written to top.
double LogprobsRow(const float* logits, int64_t V, int32_t token, int64_t top_n,
                   std::vector<std::pair<int32_t, float>>& top) {
  std::vector<float> x(logits, logits + V);
  float max = -INFINITY;
  for (int64_t i = 0; i < V; ++i) max = std::max(max, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
  const double log_z = max + std::log(sum);
  top.clear();
  for (int64_t i = 0; i < V && top_n > 0; ++i) {
    if (static_cast<int64_t>(top.size()) == top_n && !(x[i] > top.back().second)) continue;
    const auto pos = std::upper_bound(top.begin(), top.end(), x[i],
                                      [](float v, const std::pair<int32_t, float>& e) { return v > e.second; });
    top.insert(pos, {static_cast<int32_t>(i), x[i]});
    if (static_cast<int64_t>(top.size()) > top_n) top.pop_back();
  }
  for (auto& [id, value] : top) value = static_cast<float>(value - log_z);
  return x[token] - log_z;
}

}  // namespace baseline
// ---- End of the pre-change baseline. ----

using Clock = std::chrono::steady_clock;
using SampleFn = void (*)(float*, int64_t, int64_t, const RowSampling*, const int32_t*, const int32_t*,
                          const int32_t*, int32_t*);

constexpr int64_t kRows = 8;  // rows per SampleRows call, each its own logits and seed

// Peaked: N(0, 1.5) with 16 tokens 10..16 above, so that a few tokens carry most of the
// mass as in a language model's output. Flat: N(0, 1), where top-p keeps most of the row.
std::vector<float> MakeRows(int64_t V, bool peaked, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, peaked ? 1.5f : 1.0f);
  std::uniform_real_distribution<float> boost(10.0f, 16.0f);
  std::uniform_int_distribution<int64_t> token(0, V - 1);
  std::vector<float> l(kRows * V);
  for (float& x : l) x = normal(rng);
  if (peaked) {
    for (int64_t r = 0; r < kRows; ++r) {
      for (int i = 0; i < 16; ++i) l[r * V + token(rng)] += boost(rng);
    }
  }
  return l;
}

struct Config {
  std::string name;
  RowSampling p;
  bool penalties = false;
};

RowSampling Params(float temperature, int32_t top_k, float top_p, float min_p) {
  RowSampling p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

// Penalty entries per row: 512 distinct tokens, two of them masked (EOS-like).
struct Penalties {
  std::vector<int32_t> offsets{0}, ids, counts;
};
Penalties MakePenalties(int64_t V, bool on) {
  Penalties pen;
  std::mt19937 rng(17);
  for (int64_t r = 0; r < kRows; ++r) {
    if (on) {
      std::vector<int32_t> seen;
      while (seen.size() < 512) {
        const int32_t t = static_cast<int32_t>(rng() % V);
        if (std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
        seen.push_back(t);
        pen.ids.push_back(t);
        pen.counts.push_back(seen.size() <= 2 ? kMaskedCount : static_cast<int32_t>(rng() % 4));
      }
    }
    pen.offsets.push_back(static_cast<int32_t>(pen.ids.size()));
  }
  return pen;
}

struct Timing {
  double best_ns_per_row = 0;
  std::vector<int32_t> tokens;
};

// The baseline and the new implementation on the same rows, interleaved (the one with less
// time spent so far runs next) so that both see the same load on a shared machine: the best
// time per row of each over at least 3 calls and at least min_seconds of its own calls.
// The penalized entries are restored after each call, outside the timed region.
std::pair<Timing, Timing> TimeBoth(const std::vector<float>& pristine, int64_t V,
                                   const std::vector<RowSampling>& params, const Penalties& pen, double min_seconds) {
  std::vector<float> rows = pristine;
  Timing t[2];
  double best[2] = {1e30, 1e30}, spent[2] = {0, 0};
  int calls[2] = {0, 0};
  const SampleFn fns[2] = {baseline::SampleRows, cpu::SampleRows};
  while (std::min(calls[0], calls[1]) < 3 || std::min(spent[0], spent[1]) < min_seconds) {
    const int which = spent[0] <= spent[1] ? 0 : 1;
    t[which].tokens.assign(kRows, -1);
    const auto start = Clock::now();
    fns[which](rows.data(), kRows, V, params.data(), pen.offsets.data(), pen.ids.data(), pen.counts.data(),
               t[which].tokens.data());
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    best[which] = std::min(best[which], s);
    spent[which] += s;
    ++calls[which];
    for (int64_t r = 0; r < kRows; ++r) {
      for (int32_t e = pen.offsets[r]; e < pen.offsets[r + 1]; ++e) {
        rows[r * V + pen.ids[e]] = pristine[r * V + pen.ids[e]];
      }
    }
  }
  for (int which = 0; which < 2; ++which) t[which].best_ns_per_row = best[which] * 1e9 / kRows;
  return {t[0], t[1]};
}

void Run(double min_seconds) {
  const std::vector<Config> configs = {
      {"greedy", Params(0.0f, 0, 1.0f, 0.0f)},
      {"T=0.8", Params(0.8f, 0, 1.0f, 0.0f)},
      {"T=0.8 top-k 50", Params(0.8f, 50, 1.0f, 0.0f)},
      {"T=0.8 top-p 0.9", Params(0.8f, 0, 0.9f, 0.0f)},
      {"T=0.8 top-k 50 top-p 0.9", Params(0.8f, 50, 0.9f, 0.0f)},
      {"T=0.8 min-p 0.05", Params(0.8f, 0, 1.0f, 0.05f)},
      {"T=0.8 top-p 0.9 + penalties", Params(0.8f, 0, 0.9f, 0.0f), true},
  };
  std::printf(
      "cpu::SampleRows, ns per row: best of >= 3 calls of %lld rows, old and new interleaved, >= %.2f s "
      "each per line; 1 thread\n",
      static_cast<long long>(kRows), min_seconds);
  std::printf("penalties: 512 entries per row (2 masked), repetition 1.1, presence 0.5, frequency 0.3\n");
  std::printf("%-8s %-7s %-29s %12s %12s %8s %s\n", "V", "rows", "config", "old ns/row", "new ns/row", "old/new",
              "same tokens");
  for (const int64_t V : {32000, 262144}) {
    for (const bool peaked : {true, false}) {
      const std::vector<float> pristine = MakeRows(V, peaked, static_cast<uint32_t>(V) + peaked);
      for (const Config& c : configs) {
        std::vector<RowSampling> params(kRows, c.p);
        for (int64_t r = 0; r < kRows; ++r) {
          params[r].seed = 1000 + r;
          params[r].step = 7;
          if (c.penalties) {
            params[r].repetition_penalty = 1.1f;
            params[r].presence_penalty = 0.5f;
            params[r].frequency_penalty = 0.3f;
          }
        }
        const Penalties pen = MakePenalties(V, c.penalties);
        const auto [old_t, new_t] = TimeBoth(pristine, V, params, pen, min_seconds);
        int same = 0;
        for (int64_t r = 0; r < kRows; ++r) same += old_t.tokens[r] == new_t.tokens[r];
        std::printf("%-8lld %-7s %-29s %12.0f %12.0f %7.1fx %d/%lld\n", static_cast<long long>(V),
                    peaked ? "peaked" : "flat", c.name.c_str(), old_t.best_ns_per_row, new_t.best_ns_per_row,
                    old_t.best_ns_per_row / new_t.best_ns_per_row, same, static_cast<long long>(kRows));
      }
    }
  }

  // Host logprobs (coordinator/engine/logprobs.cc): the log-softmax at the sampled token and
  // the top 5 and 20, per row, old and new interleaved.
  std::printf("\nhost logprobs per row (coordinator/engine/logprobs.cc), ns: old = a copy, scalar max, "
              "exp in doubles, scalar top-N scan; new = cpu::LogSumExp + cpu::TopN\n");
  std::printf("%-8s %-7s %-6s %12s %12s %8s %s\n", "V", "rows", "top_n", "old ns/row", "new ns/row", "old/new",
              "max |diff|");
  for (const int64_t V : {32000, 262144}) {
    for (const bool peaked : {true, false}) {
      const std::vector<float> rows = MakeRows(V, peaked, static_cast<uint32_t>(V) + peaked);
      for (const int64_t top_n : {int64_t{0}, int64_t{5}, int64_t{20}}) {
        double best[2] = {1e30, 1e30}, spent[2] = {0, 0}, diff = 0;
        int calls[2] = {0, 0};
        std::vector<std::pair<int32_t, float>> top;
        std::vector<int32_t> ids(top_n);
        std::vector<float> values(top_n);
        std::vector<double> got[2] = {std::vector<double>(kRows), std::vector<double>(kRows)};
        while (std::min(calls[0], calls[1]) < 3 || std::min(spent[0], spent[1]) < min_seconds) {
          const int which = spent[0] <= spent[1] ? 0 : 1;
          const auto start = Clock::now();
          for (int64_t r = 0; r < kRows; ++r) {
            const float* l = rows.data() + r * V;
            const int32_t token = static_cast<int32_t>((r * 7919) % V);
            if (which == 0) {
              got[0][r] = baseline::LogprobsRow(l, V, token, top_n, top);
            } else {
              got[1][r] = l[token] - cpu::LogSumExp(l, V);
              cpu::TopN(l, V, top_n, ids.data(), values.data());
            }
          }
          const double sec = std::chrono::duration<double>(Clock::now() - start).count();
          best[which] = std::min(best[which], sec);
          spent[which] += sec;
          ++calls[which];
        }
        for (int64_t r = 0; r < kRows; ++r) diff = std::max(diff, std::abs(got[0][r] - got[1][r]));
        std::printf("%-8lld %-7s %-6lld %12.0f %12.0f %7.1fx %.2g\n", static_cast<long long>(V),
                    peaked ? "peaked" : "flat", static_cast<long long>(top_n), best[0] * 1e9 / kRows,
                    best[1] * 1e9 / kRows, best[0] / best[1], diff);
      }
    }
  }
}

}  // namespace
}  // namespace tpserve::bench

int main(int argc, char** argv) {
  double min_seconds = 0.3;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--min_seconds") == 0 && i + 1 < argc) {
      min_seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--min_seconds S]\n", argv[0]);
      return 2;
    }
  }
  tpserve::bench::Run(min_seconds);
  return 0;
}
