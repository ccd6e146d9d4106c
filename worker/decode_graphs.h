// Decode steps replayed from CUDA graphs, as the model sees them: the StepGraphs interface
// (no CUDA types; worker/cuda_graph_runner.h implements it, made by the CUDA backend's
// Backend::MakeStepGraphs) and the host-side rules: which steps replay, how a step is padded
// to a captured batch size, the fixed block-table width, the default list of sizes.
// Tested by tests/decode_graphs_test.cc (CPU) and tests/cuda_model_test.cc (GPU).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "worker/step.h"

namespace tpserve {

// Captures a step's device work once per padded batch size and replays it (see
// CudaGraphRunner for the contract a step must keep).
class StepGraphs {
 public:
  virtual ~StepGraphs() = default;
  // The smallest captured size >= n, or 0 when n exceeds them all (run that step eagerly).
  virtual int32_t PaddedBatchSize(int32_t n) const = 0;
  // Runs `step` for batch size `padded`: eagerly the first time, captured and launched the
  // second, replayed after. A failed capture still runs the step (eagerly) and returns the
  // error; that size stays eager.
  virtual absl::Status Run(int32_t padded, const std::function<void()>& step) = 0;
  virtual bool captured(int32_t padded) const = 0;
  // Drops every graph (the buffers they read moved).
  virtual void Clear() = 0;
};

// vLLM's capture sizes: 1, 2, 4, then every multiple of 8, up to the first that holds
// min(max_num_seqs, 256) sequences.
std::vector<int32_t> DefaultCudaGraphBatchSizes(int32_t max_num_seqs);

// Columns of a replayed step's block tables: every sequence's table padded to
// ceil(max_model_len / block_size), so the decode attention's launch shape (its partition
// count derives from the width) never changes between replays.
int32_t DecodeBlockTableWidth(int64_t max_model_len, int32_t block_size);

// Whether a (validated) plan may replay a graph of `padded` >= its tokens: a decode step
// (every token its sequence's only token, num_seqs = tokens, logit rows 0..T-1, sampling
// rows absent or one per logit row) whose positions all fall inside `width` blocks.
bool IsReplayableDecode(const StepPlan& plan, int32_t width, int32_t block_size);

// The plan the graph of batch size `padded` runs: the T tokens as they are, then padding
// tokens (id 0, position -1, slot -1, each its own sequence whose block-table row is all
// -1), block tables of the plan's columns (at most `width`: the replayed step's tables are
// `width` wide on the device, and Model::UploadStep copies only these columns into them;
// no kernel reads a column past a sequence's last block), logit rows 0..padded-1.
// Sampling and penalty entries are not copied (sampling runs after the replay, on the
// first T rows). Position -1 makes attention write zeros and slot -1 skips the KV write.
StepPlan PadDecodeStep(const StepPlan& plan, int32_t padded, int32_t width);

}  // namespace tpserve
