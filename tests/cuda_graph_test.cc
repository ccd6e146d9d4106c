// CUDA-graph decode steps: a decoder-layer-shaped step (embedding, norm, q/k/v
// projections, RoPE, KV write, paged attention, output projection, residual, LM head,
// softcap) on the CUDA backend, padded to a captured batch size and replayed with new
// inputs each step, gives the logits of the same steps run eagerly. And the backend's
// SpanTimer (events, no synchronize) beside capture. GPU test.
#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cuda_test_util.h"
#include "worker/cuda_backend.h"
#include "worker/cuda_graph_runner.h"

namespace tpserve {
namespace {

using testing::RandomVector;
using testing::ToBf16;

constexpr int64_t kVocab = 512, kHidden = 256, kHeads = 4, kKvHeads = 2, kHeadDim = 64, kBlock = 16;
constexpr int64_t kMaxBlocksPerSeq = 8, kNumBlocks = 64;

// Weights, fixed input buffers and the KV cache of a one-layer decoder on the backend.
struct TinyDecoder {
  explicit TinyDecoder(CudaBackend& b, int32_t max_batch) : backend(b), max_batch(max_batch) {
    auto up = [&](const std::vector<float>& v, DType dt) {
      auto buf = *b.Allocate(v.size() * DTypeSize(dt));
      if (dt == DType::kBF16) {
        const std::vector<uint16_t> h = ToBf16(v);
        b.CopyFromHost(buf->data(), h.data(), h.size() * 2);
      } else {
        b.CopyFromHost(buf->data(), v.data(), v.size() * 4);
      }
      return buf;
    };
    const float ws = 1.0f / std::sqrt(static_cast<float>(kHidden));
    embed = up(RandomVector(kVocab * kHidden, 1), DType::kBF16);
    norm = up(RandomVector(kHidden, 2, 0.5f, 1.5f), DType::kF32);
    wq = up(RandomVector(kHeads * kHeadDim * kHidden, 3, -ws, ws), DType::kBF16);
    wk = up(RandomVector(kKvHeads * kHeadDim * kHidden, 4, -ws, ws), DType::kBF16);
    wv = up(RandomVector(kKvHeads * kHeadDim * kHidden, 5, -ws, ws), DType::kBF16);
    wo = up(RandomVector(kHidden * kHeads * kHeadDim, 6, -ws, ws), DType::kBF16);
    std::vector<float> freq(kHeadDim / 2);
    for (int64_t i = 0; i < kHeadDim / 2; ++i) freq[i] = std::pow(1e4f, -2.0f * i / kHeadDim);
    inv_freq = up(freq, DType::kF32);
    const int64_t kv = kNumBlocks * kBlock * kKvHeads * kHeadDim;
    k_cache = *b.Allocate(kv * 2);
    v_cache = *b.Allocate(kv * 2);
    for (auto* buf : {&ids, &positions, &slots, &token_seq}) *buf = *b.Allocate(max_batch * 4);
    tables = *b.Allocate(max_batch * kMaxBlocksPerSeq * 4);
    for (auto* buf : {&h, &x, &o}) *buf = *b.Allocate(max_batch * kHidden * 2);
    for (auto* buf : {&q, &attn}) *buf = *b.Allocate(max_batch * kHeads * kHeadDim * 2);
    for (auto* buf : {&k, &v}) *buf = *b.Allocate(max_batch * kKvHeads * kHeadDim * 2);
    logits = *b.Allocate(max_batch * kVocab * 2);
  }

  void ResetCache() {
    const int64_t kv = kNumBlocks * kBlock * kKvHeads * kHeadDim;
    const std::vector<uint16_t> kh = ToBf16(RandomVector(kv, 7)), vh = ToBf16(RandomVector(kv, 8));
    backend.CopyFromHost(k_cache->data(), kh.data(), kh.size() * 2);
    backend.CopyFromHost(v_cache->data(), vh.data(), vh.size() * 2);
  }

  // Host -> fixed device buffers, padded to `batch` (padding: position -1, slot -1).
  void Upload(int32_t batch, const std::vector<int32_t>& pos) {
    std::vector<int32_t> id(batch, 0), p(batch, -1), slot(batch, -1), seq(batch, 0), table(batch * kMaxBlocksPerSeq);
    for (int32_t i = 0; i < batch; ++i) {
      for (int32_t j = 0; j < kMaxBlocksPerSeq; ++j) table[i * kMaxBlocksPerSeq + j] = i * kMaxBlocksPerSeq + j;
      seq[i] = i;
      if (i < static_cast<int32_t>(pos.size())) {
        id[i] = (pos[i] * 31 + i * 7) % kVocab;
        p[i] = pos[i];
        slot[i] = table[i * kMaxBlocksPerSeq + pos[i] / kBlock] * kBlock + pos[i] % kBlock;
      }
    }
    backend.CopyFromHost(ids->data(), id.data(), batch * 4);
    backend.CopyFromHost(positions->data(), p.data(), batch * 4);
    backend.CopyFromHost(slots->data(), slot.data(), batch * 4);
    backend.CopyFromHost(token_seq->data(), seq.data(), batch * 4);
    backend.CopyFromHost(tables->data(), table.data(), table.size() * 4);
  }

  // Device work only: what a captured decode step contains.
  void Step(int32_t batch) {
    const DType bf = DType::kBF16;
    const Tensor th{h->data(), bf, batch, kHidden}, tx{x->data(), bf, batch, kHidden}, to{o->data(), bf, batch, kHidden};
    const Tensor tq{q->data(), bf, batch, kHeads * kHeadDim}, ta{attn->data(), bf, batch, kHeads * kHeadDim};
    const Tensor tk{k->data(), bf, batch, kKvHeads * kHeadDim}, tv{v->data(), bf, batch, kKvHeads * kHeadDim};
    const Tensor tl{logits->data(), bf, batch, kVocab};
    const auto* pos = static_cast<const int32_t*>(positions->data());
    backend.Embedding(static_cast<const int32_t*>(ids->data()), batch, Tensor{embed->data(), bf, kVocab, kHidden}, 0,
                      1.0f, th);
    backend.RmsNorm(th, static_cast<const float*>(norm->data()), 1e-6f, cpu::NormKind::kScale, tx);
    backend.Linear(tx, Tensor{wq->data(), bf, kHeads * kHeadDim, kHidden}, nullptr, tq);
    backend.Linear(tx, Tensor{wk->data(), bf, kKvHeads * kHeadDim, kHidden}, nullptr, tk);
    backend.Linear(tx, Tensor{wv->data(), bf, kKvHeads * kHeadDim, kHidden}, nullptr, tv);
    backend.Rope(tq, kHeadDim, pos, static_cast<const float*>(inv_freq->data()), 1.0f);
    backend.Rope(tk, kHeadDim, pos, static_cast<const float*>(inv_freq->data()), 1.0f);
    backend.WriteKv(tk, tv, static_cast<const int32_t*>(slots->data()), kHeadDim, cpu::KvCacheDType::kF32,
                    k_cache->data(), v_cache->data());
    cpu::PagedAttentionParams ap;
    ap.num_q_heads = kHeads;
    ap.num_kv_heads = kKvHeads;
    ap.head_dim = kHeadDim;
    ap.block_size = kBlock;
    ap.max_blocks_per_seq = kMaxBlocksPerSeq;
    ap.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    backend.PagedAttention(tq, k_cache->data(), v_cache->data(), static_cast<const int32_t*>(token_seq->data()), pos,
                           static_cast<const int32_t*>(tables->data()), ap, ta);
    backend.Linear(ta, Tensor{wo->data(), bf, kHidden, kHeads * kHeadDim}, nullptr, to);
    backend.Synchronize();  // as before a host all-reduce; a no-op while capturing
    backend.Add(th, to, th);
    backend.RmsNorm(th, static_cast<const float*>(norm->data()), 1e-6f, cpu::NormKind::kScale, tx);
    backend.Linear(tx, Tensor{embed->data(), bf, kVocab, kHidden}, nullptr, tl);
    backend.Softcap(tl, 30.0f);
  }

  std::vector<float> Logits(int32_t rows) {
    std::vector<uint16_t> raw(rows * kVocab);
    backend.CopyToHost(raw.data(), logits->data(), raw.size() * 2);
    return testing::FromBf16(raw);
  }

  CudaBackend& backend;
  int32_t max_batch;
  std::unique_ptr<Buffer> embed, norm, wq, wk, wv, wo, inv_freq, k_cache, v_cache;
  std::unique_ptr<Buffer> ids, positions, slots, token_seq, tables, h, x, o, q, attn, k, v, logits;
};

class CudaGraphTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(CudaGraphTest, ReplayedDecodeStepsMatchEagerSteps) {
  TP_SKIP_WITHOUT_GPU();
  const int32_t real = GetParam();
  auto backend = MakeCudaBackend(BackendOptions{});
  ASSERT_TRUE(backend.ok()) << backend.status();
  TinyDecoder dec(**backend, 8);
  CudaGraphRunner runner((*backend)->stream(), {1, 2, 4, 8});
  const int32_t padded = runner.PaddedBatchSize(real);
  ASSERT_GT(padded, real - 1);
  // Four decode steps; sequence i starts at position 5 + 9 i (its earlier keys are the
  // random cache contents).
  auto positions = [&](int step) {
    std::vector<int32_t> p;
    for (int32_t i = 0; i < real; ++i) p.push_back(5 + 9 * i + step);
    return p;
  };
  std::vector<std::vector<float>> graph_logits, eager_logits;
  dec.ResetCache();
  for (int step = 0; step < 4; ++step) {
    dec.Upload(padded, positions(step));
    ASSERT_TRUE(runner.Run(padded, [&] { dec.Step(padded); }).ok());
    EXPECT_EQ(runner.captured(padded), step >= 1);
    graph_logits.push_back(dec.Logits(real));
  }
  dec.ResetCache();
  for (int step = 0; step < 4; ++step) {
    dec.Upload(padded, positions(step));
    dec.Step(padded);
    eager_logits.push_back(dec.Logits(real));
  }
  for (int step = 0; step < 4; ++step) {
    for (float v : graph_logits[step]) ASSERT_TRUE(std::isfinite(v));
    EXPECT_TRUE(testing::AllClose(graph_logits[step], eager_logits[step], testing::kBf16Attention)) << "step " << step;
  }
  // Replays must see the new inputs: consecutive steps differ.
  EXPECT_FALSE(testing::AllClose(graph_logits[2], graph_logits[3], {1e-6, 0}));
}

// 3 real rows pad to 4 (the GEMV path); 5 pad to 8 (the cuBLASLt path).
INSTANTIATE_TEST_SUITE_P(Batches, CudaGraphTest, ::testing::Values(1, 3, 5));

// The CUDA backend's SpanTimer: events around enqueued work, read once it has completed;
// Take empties it; a span begun while the stream is captured is not timed (a replay times
// nothing).
TEST(CudaSpanTimerTest, TimesEnqueuedWorkAndNotCapturedSpans) {
  TP_SKIP_WITHOUT_GPU();
  auto backend = MakeCudaBackend(BackendOptions{});
  ASSERT_TRUE(backend.ok()) << backend.status();
  CudaBackend& b = **backend;
  const size_t bytes = size_t{64} << 20;
  auto buf = b.Allocate(bytes);
  ASSERT_TRUE(buf.ok()) << buf.status();
  std::unique_ptr<SpanTimer> timer = b.MakeSpanTimer();
  for (int i = 0; i < 3; ++i) {
    timer->Begin();
    ASSERT_EQ(cudaMemsetAsync((*buf)->data(), i, bytes, b.stream()), cudaSuccess);
    timer->End();
  }
  b.Synchronize();
  const double us = timer->TakeUs();
  EXPECT_GT(us, 0.0);
  EXPECT_LT(us, 10e6);
  EXPECT_EQ(timer->TakeUs(), 0.0);

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(b.stream(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  timer->Begin();
  const cudaError_t set = cudaMemsetAsync((*buf)->data(), 7, bytes, b.stream());
  timer->End();
  ASSERT_EQ(cudaStreamEndCapture(b.stream(), &graph), cudaSuccess);
  ASSERT_EQ(set, cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, b.stream()), cudaSuccess);
  b.Synchronize();
  EXPECT_EQ(timer->TakeUs(), 0.0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace tpserve
