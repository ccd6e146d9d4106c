// The median the benchmarks report: the upper middle of a sorted copy (a value that was
// measured, not an average of two), 0 for none. (kernels_bench averages the middle two.)
#pragma once

#include <algorithm>
#include <vector>

namespace tpserve::bench {

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace tpserve::bench
