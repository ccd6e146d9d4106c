// Measured kernel choice. Tested by tests/tuning_test.cc.
#include "kernels/tuning.h"

#include <algorithm>

namespace tpserve {

std::vector<int64_t> TuneRowBuckets(int64_t min_rows, int64_t max_rows) {
  std::vector<int64_t> out;
  int64_t r = 1;
  while (r < min_rows) r *= 2;
  for (; r < max_rows; r *= 2) out.push_back(r);
  if (max_rows >= std::max<int64_t>(min_rows, 1)) out.push_back(max_rows);
  return out;
}

int64_t TuneBucketFor(int64_t rows, std::span<const int64_t> measured) {
  if (measured.empty()) return -1;
  const auto it = std::lower_bound(measured.begin(), measured.end(), rows);
  return it == measured.end() ? measured.back() : *it;
}

int ChooseFastest(std::span<const double> times, double margin) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(times.size()); ++i) {
    if (times[i] >= 0 && (best < 0 || times[i] < times[best])) best = i;
  }
  if (best > 0 && times[0] >= 0 && times[best] >= times[0] * (1.0 - margin)) return 0;
  return best;
}

bool ChosenAtOrAbove(const std::map<int64_t, bool>& by_rows, int64_t rows) {
  const auto it = by_rows.lower_bound(rows);
  return it != by_rows.end() && it->second;
}

}  // namespace tpserve
