// Invariant checks for CUDA runtime, cuBLAS and kernel launches: a failure is a bug (or a
// dead device) and aborts with file:line, like TP_CHECK. Used by every CUDA source.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#define TP_CUDA_CHECK(expr)                                                                      \
  do {                                                                                           \
    const cudaError_t _tp_err = (expr);                                                          \
    if (_tp_err != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: CUDA error %s: %s (%s)\n", __FILE__, __LINE__,                \
                   cudaGetErrorName(_tp_err), cudaGetErrorString(_tp_err), #expr);               \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

// After every kernel launch: a bad launch configuration shows up here, not three kernels later.
#define TP_CUDA_CHECK_LAUNCH() TP_CUDA_CHECK(cudaGetLastError())

#define TP_CUBLAS_CHECK(expr)                                                                    \
  do {                                                                                           \
    const int _tp_st = static_cast<int>(expr);                                                   \
    if (_tp_st != 0) {                                                                           \
      std::fprintf(stderr, "%s:%d: cuBLAS status %d (%s)\n", __FILE__, __LINE__, _tp_st, #expr);  \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)
