// `tpserve generate`: offline generation on every rank of the world (MPI processes, or
// threads when --tensor-parallel-size exceeds the MPI world). Tested by tests/cli_test.sh.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launch/engine_setup.h"
#include "launch/ranks.h"
#include "worker/communicator.h"

namespace tpserve {

struct GenerateCommandOptions {
  EngineOptions engine;
  ParallelSizes parallel;  // --tensor-parallel-size, --pipeline-parallel-size (launch/ranks.h)
  std::string prompt;            // text (needs a tokenizer)
  std::vector<int32_t> prompt_ids;
  std::string tokenizer;         // tokenizer.json path; default MODEL/tokenizer.json
  int32_t max_tokens = 16;
  int32_t logprobs = 0;
  bool ignore_eos = false;
  bool json = false;
  int64_t max_num_batched_tokens = 2048;
  // Unset: the model's generation config's temperature, else 0 (greedy).
  std::optional<float> temperature;
  std::optional<uint64_t> seed;  // the sampling seed (--seed)
  // auto | vllm | a folder holding generation_config.json (generation_defaults.h).
  std::string generation_config = "auto";
};

// Runs on every rank; returns the process exit code.
int RunGenerate(const GenerateCommandOptions& options, const WorldConfig& mpi_world);

}  // namespace tpserve
