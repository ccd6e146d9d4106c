// `engine_bench --backend cuda`: in one run, the GPU's copy bandwidth and a cuBLAS bf16
// GEMM (bench/gpu_peaks.h), then per tensor-parallel size the engine started as `tpserve`
// starts it (StartEngine, --device cuda, KV cache from --gpu-memory-utilization) on
// dummy weights: prefill of one long prompt (TFLOP/s beside the GEMM), decode steps at
// each batch over a given context (weight GB/s beside the copy bandwidth), the all-reduce
// share, peak GPU memory and KV blocks; decode replayed from CUDA graphs beside eager. Ranks are threads of this process on GPU
// rank % devices. Not a test: run by bench/gpu_check.sh, numbers go to docs/.
#pragma once

#include <string>
#include <vector>

#include "worker/backend.h"

namespace tpserve::bench {

struct GpuBenchOptions {
  std::string model = "gemma-4-31b";  // built-in model (dummy weights)
  std::string dtype = "bfloat16";     // weight dtype
  std::vector<int> tp = {1};          // tensor-parallel sizes, one engine start each
  std::vector<int> batch = {1};       // decode batch sizes
  int context = 1024;                 // tokens in each sequence's KV cache before decoding
  int decode_steps = 16;              // measured decode steps per batch (after 2 warm-up steps)
  int prefill_tokens = 2048;          // the prompt of the prefill measurement
  double gpu_memory_utilization = 0.9;
  int num_layers = 0;                 // 0: the model's; N: its first N layers (shorter load)
  bool json = false;                  // also one JSON object per tensor-parallel size
  // Decode steps replayed from CUDA graphs ("graphs", as tpserve runs them), eager
  // ("eager", as --enforce-eager), or both on the same engine, side by side ("both").
  // Where the engine has no graphs (ranks sharing a GPU), every row is eager.
  std::string decode_mode = "both";
  // TP 1: one more prefill step and one more eager decode step at the first and at the
  // last batch size, timed op by op (bench/op_profile.h), printed as tables after the others.
  bool op_profile = false;
  // Kernel choices (KernelOptions), each measured on the same engine, prefill and decode:
  // "split" (the register-load GEMV, cuBLASLt's heuristic), "bulk" (bulk-copy GEMV),
  // "tuned" (what start-up measured fastest per weight shape), each optionally with "+pdl"
  // (programmatic launch). The engine starts with the first (tuning at start-up where any
  // is "tuned"); the op profiles use it.
  std::vector<std::string> kernels = {"split"};
};

// Prints the table (and JSON); returns the process exit code.
int RunGpuEngineBench(const GpuBenchOptions& options);

}  // namespace tpserve::bench
