// Host-side rules of replayed decode steps. Tested by tests/decode_graphs_test.cc.
#include "worker/decode_graphs.h"

#include <algorithm>

namespace tpserve {

std::vector<int32_t> DefaultCudaGraphBatchSizes(int32_t max_num_seqs) {
  const int32_t cap = std::clamp<int32_t>(max_num_seqs, 1, 256);
  std::vector<int32_t> sizes;
  for (int32_t s : {1, 2, 4}) {
    sizes.push_back(s);
    if (s >= cap) return sizes;
  }
  for (int32_t s = 8;; s += 8) {
    sizes.push_back(s);
    if (s >= cap) return sizes;
  }
}

int32_t DecodeBlockTableWidth(int64_t max_model_len, int32_t block_size) {
  return static_cast<int32_t>((std::max<int64_t>(max_model_len, 1) + block_size - 1) / block_size);
}

bool IsReplayableDecode(const StepPlan& plan, int32_t width, int32_t block_size) {
  const int64_t T = plan.num_tokens();
  if (T == 0 || plan.num_seqs != T || static_cast<int64_t>(plan.logit_rows.size()) != T) return false;
  if (!plan.sampling.empty() && static_cast<int64_t>(plan.sampling.size()) != T) return false;
  std::vector<bool> seen(T, false);
  for (int64_t i = 0; i < T; ++i) {
    if (plan.logit_rows[i] != i) return false;
    const int32_t s = plan.token_seq[i];
    if (s < 0 || s >= T || seen[s]) return false;
    seen[s] = true;
    if (plan.positions[i] / block_size >= width) return false;
  }
  return true;
}

StepPlan PadDecodeStep(const StepPlan& plan, int32_t padded, int32_t width) {
  const int32_t T = static_cast<int32_t>(plan.num_tokens());
  StepPlan p;
  p.token_ids = plan.token_ids;
  p.positions = plan.positions;
  p.token_seq = plan.token_seq;
  p.token_ids.resize(padded, 0);
  p.positions.resize(padded, -1);
  for (int32_t i = T; i < padded; ++i) p.token_seq.push_back(i);
  p.num_seqs = padded;
  p.kv.resize(plan.kv.size());
  for (size_t g = 0; g < plan.kv.size(); ++g) {
    const KvGroupPlan& in = plan.kv[g];
    KvGroupPlan& out = p.kv[g];
    out.slot_mapping = in.slot_mapping;
    out.slot_mapping.resize(padded, -1);
    const int32_t cols = std::min(in.max_blocks_per_seq, width);
    out.max_blocks_per_seq = cols;
    out.block_tables.assign(static_cast<size_t>(padded) * cols, -1);
    for (int32_t s = 0; s < plan.num_seqs; ++s) {
      std::copy_n(in.block_tables.begin() + static_cast<size_t>(s) * in.max_blocks_per_seq, cols,
                  out.block_tables.begin() + static_cast<size_t>(s) * cols);
    }
  }
  p.logit_rows.resize(padded);
  for (int32_t r = 0; r < padded; ++r) p.logit_rows[r] = r;
  return p;
}

}  // namespace tpserve
