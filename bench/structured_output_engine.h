// structured_output_bench --engine: what structured output costs per decode step inside the
// engine (EngineCore over a 1-rank CPU StepExecutor, dummy weights), free-text requests
// beside the same requests with a grammar, in one run. Printed, never asserted; results in
// docs/structured_output.md ("Cost in the engine").
#pragma once

#include <string>
#include <vector>

#include "coordinator/text/tokenizer.h"

namespace tpserve::bench {

struct EngineModeOptions {
  std::string model = "gemma-4-1b";  // a built-in shape (dummy weights)
  std::vector<int> batches = {1, 64};
  int decode_steps = 16;  // steps measured per run (every sequence decoding, none prefilling)
  int rounds = 3;         // each runs plain, schema and json_object once, the order rotating
  int threads = 0;        // CPU threads of the rank; 0: the machine's cores
  float temperature = 1.0f;
  int top_k = 64;  // Gemma 3's generation_config.json
  float top_p = 0.95f;
};

// `tokenizer` must be the model's: its vocabulary (the grammar's) must fit the model's.
// Returns the exit code.
int RunEngineMode(const Tokenizer& tokenizer, const EngineModeOptions& options);

}  // namespace tpserve::bench
