// Timing kernel candidates against each other on a stream, for the measured kernel choice
// (worker/cuda_tuning.cc). Run by the GPU tests of that choice (tests/cuda_linear_test.cc,
// tests/cuda_model_test.cc); what it measures is checked by bench/cuda_kernels_bench.cu's
// sweeps, which time the same kernels their own way.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

namespace tpserve::cuda {

// Per-candidate time in microseconds of one run, for `count` candidates: `enqueue(i)`
// enqueues candidate i on `stream` and returns false (enqueuing nothing) where it cannot
// run, which reads -1. Each candidate runs once to warm up (lazy loading, first-use
// setup); then `rounds` rounds run every candidate in turn (so that clock or thermal drift
// does not favour one), each round timing enough back-to-back runs to fill about
// `round_us`; a candidate's time is its best round's mean. Each timed batch of runs is
// queued behind a kernel that holds the stream long enough for the host to enqueue the
// batch, so a microsecond kernel is timed on the GPU, not at the host's launch rate.
// Synchronizes the stream; not while it is being captured.
std::vector<double> TimeCandidates(cudaStream_t stream, int count, const std::function<bool(int)>& enqueue,
                                   double round_us = 500, int rounds = 3);

}  // namespace tpserve::cuda
