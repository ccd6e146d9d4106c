// Measured kernel choice: which row counts a backend measures its candidates at, which
// measurement a product of another row count uses, and which candidate wins. Pure
// functions (no device), shared by the CUDA backend's GEMM and GEMV tuning
// (worker/cuda_backend.cc, kernels/cuda/gemm.cc). Tested by tests/tuning_test.cc.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace tpserve {

// The row counts measured for products of up to `max_rows` rows: powers of two from
// `min_rows` (rounded up to a power of two) to the first at or above max_rows, whose
// place max_rows itself takes (the warm-up and the largest prefill chunk run exactly that
// many). Empty when max_rows < min_rows.
std::vector<int64_t> TuneRowBuckets(int64_t min_rows, int64_t max_rows);

// The measured row count whose choice a product of `rows` rows uses: the smallest one at
// or above `rows`, the largest where `rows` exceeds them all; -1 when none was measured.
// `measured` is ascending.
int64_t TuneBucketFor(int64_t rows, std::span<const int64_t> measured);

// The candidate to keep from per-candidate times (negative: the candidate could not run):
// the fastest, except that candidate 0 (the default) stays unless the fastest beats it by
// more than `margin` of its time, so that timing noise does not move a choice off the
// default. -1 when nothing ran.
int ChooseFastest(std::span<const double> times, double margin = 0.03);

// A yes/no choice measured per row count: the one at the smallest measured row count at or
// above `rows`; false where there is none (rows beyond them all: not measured for that).
bool ChosenAtOrAbove(const std::map<int64_t, bool>& by_rows, int64_t rows);

}  // namespace tpserve
