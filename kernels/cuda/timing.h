// Timing kernel candidates against each other on a stream, for the measured kernel choice
// (Gemm::Tune, the CUDA backend's GEMV tuning). Synchronizes the stream; not while
// capturing. Used only where a GPU runs (tests/cuda_linear_test.cc exercises it).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

namespace tpserve::cuda {

// Per-candidate time in microseconds of one run, for `count` candidates: `enqueue(i)`
// enqueues candidate i on `stream` and returns false (enqueuing nothing) where it cannot
// run, which reads -1. Each candidate runs once to warm up; then `rounds` rounds run every
// candidate in turn (so that clock or thermal drift does not favour one), each round timing
// enough back-to-back runs to fill about `round_us`; a candidate's time is its best round's
// mean.
std::vector<double> TimeCandidates(cudaStream_t stream, int count, const std::function<bool(int)>& enqueue,
                                   double round_us = 500, int rounds = 3);

}  // namespace tpserve::cuda
