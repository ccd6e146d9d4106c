// spec_decode_bench --mode mtp-cost: the cost model of Gemma 4's MTP drafter at batch 1
// (issue 18): per K, a 1-token decode step, a (K + 1)-token verification step and one
// drafter step, from alternated runs without and with the drafter's drafts on one engine,
// and the per-user speedup they allow at acceptance lengths 2..4 (a projection). Not a
// test: numbers go to docs/speculative_decoding.md ("Cost model of the MTP drafter").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "launch/engine_setup.h"
#include "worker/step_executor.h"

namespace tpserve {

struct MtpCostOptions {
  std::vector<int> ks;           // draft lengths K to measure
  int rounds = 3;                // per K: each round a run without drafts and one with
  int decode_steps = 12;         // decode steps measured per run
  std::vector<int32_t> prompt;   // the context before decoding
  std::string model_name;        // --model, for the report
  std::string drafter_name;      // --speculative-config's "model" the engine loaded
  int full_layers = 0;           // the model's layers before --layers truncated it
  int tp = 1;
};

// Runs on rank 0 (the other ranks run their worker loops); `engine` must have the drafter
// and `exec` its executor with it. Prints the report to stdout.
absl::Status RunMtpCost(StepExecutor& exec, const Engine& engine, const MtpCostOptions& options);

}  // namespace tpserve
