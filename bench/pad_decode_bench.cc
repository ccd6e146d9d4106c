// Host time of padding a decode step for a CUDA-graph replay (PadDecodeStep), at the 31B's
// table width on one H200 (4954 blocks per group at 0.9, engine_bench) with 66 used columns
// (1040 tokens of 16), 2 KV groups. Not a test; numbers in docs/gpu_backend.md.
//   build/bench/pad_decode_bench
#include <chrono>
#include <cstdio>

#include "worker/decode_graphs.h"

int main() {
  constexpr int kCols = 66, kWidth = 4954, kReps = 200;
  for (int batch : {1, 64, 256}) {
    tpserve::StepPlan p;
    for (int s = 0; s < batch; ++s) {
      p.token_ids.push_back(1);
      p.positions.push_back(1040);
      p.token_seq.push_back(s);
      p.logit_rows.push_back(s);
    }
    p.num_seqs = batch;
    p.kv.resize(2);
    for (auto& g : p.kv) {
      g.max_blocks_per_seq = kCols;
      g.block_tables.assign(static_cast<size_t>(batch) * kCols, 3);
      g.slot_mapping.assign(batch, 5);
    }
    size_t entries = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) entries = tpserve::PadDecodeStep(p, batch, kWidth).kv[0].block_tables.size();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kReps;
    std::printf("batch %3d: PadDecodeStep %8.1f us, %zu table entries per group to upload\n", batch, us, entries);
  }
  return 0;
}
