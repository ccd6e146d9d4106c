// Shared helpers of the CUDA tests (tests/cuda_*_test.cc): the skip without a device,
// RAII device arrays, bf16 data and the per-dtype |x - ref| <= atol + rtol * |ref| check.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/base.h"

// Every GPU test starts with this: a machine without a device skips with a clear reason.
#define TP_SKIP_WITHOUT_GPU()                                                                     \
  do {                                                                                            \
    if (::tpserve::testing::CudaDevices() == 0) {                                                 \
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount reports none): GPU test skipped";       \
    }                                                                                             \
  } while (0)

#define TP_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(cudaGetLastError())

namespace tpserve::testing {

inline int CudaDevices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// A device array of n T's, freed on destruction; copies are synchronous.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc of " << n * sizeof(T) << " bytes failed";
      p_ = nullptr;
    }
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { Upload(host); }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }
  void Upload(const std::vector<T>& host) {
    EXPECT_EQ(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
    EXPECT_EQ(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

inline std::vector<float> RandomVector(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F32ToBf16(v[i]);
  return out;
}
inline std::vector<float> FromBf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToF32(v[i]);
  return out;
}
// v rounded through bf16: what the GPU sees, given to the fp32 CPU reference.
inline std::vector<float> RoundBf16(std::vector<float> v) {
  for (float& x : v) x = Bf16ToF32(F32ToBf16(x));
  return v;
}

struct Tolerance {
  double atol;
  double rtol;
};
// One bf16 rounding of the output (2^-9 relative) plus fp32 summation-order noise.
inline constexpr Tolerance kBf16Elementwise{1e-3, 8e-3};
// Outputs of long fp32 reductions rounded to bf16 (GEMM, norms).
inline constexpr Tolerance kBf16Reduction{5e-3, 1.6e-2};
// Attention: probabilities are rounded to bf16 before P·V on tensor cores.
inline constexpr Tolerance kBf16Attention{1e-2, 2e-2};

// |got - want| <= atol + rtol * |want| everywhere; the message names the worst element.
inline ::testing::AssertionResult AllClose(const std::vector<float>& got, const std::vector<float>& want,
                                           Tolerance tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  double worst = 0;
  size_t worst_i = 0, bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    const double ratio = std::isnan(got[i]) != std::isnan(want[i]) ? 1e30 : err / (tol.atol + tol.rtol * std::abs(want[i]));
    if (ratio > 1.0) ++bad;
    if (ratio > worst) {
      worst = ratio;
      worst_i = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements outside atol " << tol.atol
                                       << " + rtol " << tol.rtol << "; worst at " << worst_i << ": got "
                                       << got[worst_i] << ", want " << want[worst_i] << " (" << worst
                                       << "x the tolerance)";
}

// Bit-for-bit equality of two bf16 (or any 16-bit) arrays; the message names the first
// difference.
inline ::testing::AssertionResult BitEqual(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " values differ; first at " << first
                                       << ": bits " << got[first] << " (" << Bf16ToF32(got[first]) << ") vs "
                                       << want[first] << " (" << Bf16ToF32(want[first]) << ")";
}

}  // namespace tpserve::testing
