// What the CPU kernel tests share (tests/cpu_kernels_test.cc, tests/cpu_attention_test.cc):
// element-wise closeness to a double-precision reference, and random inputs.
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve::cpu::testing_util {

// |got - want| <= atol + rtol * |want|, per element.
struct Tolerance {
  double atol;
  double rtol;
};

inline ::testing::AssertionResult AllClose(const std::vector<float>& got, const std::vector<double>& want,
                                           Tolerance tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  int bad = 0;
  ::testing::AssertionResult result = ::testing::AssertionFailure();
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol.atol + tol.rtol * std::abs(want[i]))) {  // NaN fails too
      if (++bad <= 5) result << "\n  [" << i << "] got " << got[i] << " want " << want[i];
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return result << "\n  " << bad << " of " << got.size() << " elements out of tolerance";
}

inline std::vector<float> RandomFloats(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

}  // namespace tpserve::cpu::testing_util
