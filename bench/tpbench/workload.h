// tpbench workloads: the prompts (and output lengths) a run sends. Random prompts of
// given lengths, a JSONL prompt file, or a ShareGPT conversation file; all seeded and
// deterministic. Tested by tests/tpbench_load_test.cc.
#ifndef TPSERVE_BENCH_TPBENCH_WORKLOAD_H_
#define TPSERVE_BENCH_TPBENCH_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/tpbench/target.h"

namespace tpserve {
class Tokenizer;
}

namespace tpserve::bench {

struct WorkloadOptions {
  std::string kind = "random";  // random | jsonl | sharegpt
  std::string path;             // the file, for jsonl and sharegpt
  int num_prompts = 100;        // prompts to prepare (the runner cycles through them)
  // random: lengths drawn uniformly from [len * (1 - range_ratio), len * (1 + range_ratio)]
  // as vLLM's random dataset does.
  int input_len = 128;
  int output_len = 128;
  double range_ratio = 0.0;
  // jsonl/sharegpt: output length when the file does not give one (0 = take the reply's
  // length in ShareGPT, else output_len).
  int fixed_output_len = 0;
  int max_model_len = 0;  // when > 0, prompts whose input + output exceed it are skipped
  uint64_t seed = 0;
};

// Tokenizer may be null: random prompts then become words of a fixed English word list
// (about one token each; lengths are then approximate and the server's usage counts), and
// file prompts carry no token count. With a tokenizer, random prompts are exact token ids
// (also decoded to text for chat targets).
absl::StatusOr<std::vector<BenchRequest>> MakeWorkload(const WorkloadOptions& options, const Tokenizer* tokenizer);

// "random in=128 out=128 range=0" / "sharegpt FILE (n prompts)": for the run record.
std::string DescribeWorkload(const WorkloadOptions& options);

}  // namespace tpserve::bench

#endif  // TPSERVE_BENCH_TPBENCH_WORKLOAD_H_
