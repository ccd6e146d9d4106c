// OpProfileBackend: see op_profile.h. Tested by tests/op_profile_test.cc.
#include "bench/op_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

double Us(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

std::string Shape(const char* op, int64_t m, int64_t n, int64_t k) {
  return absl::StrCat(op, " m=", m, " n=", n, " k=", k);
}

}  // namespace

template <typename Label, typename F>
void OpProfileBackend::Timed(Label&& label, F&& f) {
  if (!recording_) {
    f();
    return;
  }
  const std::string op = label();
  inner().Synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  inner().Synchronize();
  OpProfileRow& r = rows_[op];
  r.op = op;
  ++r.calls;
  r.total_us += Us(t0, std::chrono::steady_clock::now());
}

void OpProfileBackend::Start() {
  rows_.clear();
  recording_ = true;
}

void OpProfileBackend::Stop() { recording_ = false; }

std::vector<OpProfileRow> OpProfileBackend::Rows() const {
  std::vector<OpProfileRow> out;
  for (const auto& [op, row] : rows_) out.push_back(row);
  std::sort(out.begin(), out.end(),
            [](const OpProfileRow& a, const OpProfileRow& b) { return a.total_us > b.total_us; });
  return out;
}

double OpProfileBackend::SyncUs() {
  std::vector<double> us;
  for (int i = 0; i < 101; ++i) {
    inner().Synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    inner().Synchronize();
    us.push_back(Us(t0, std::chrono::steady_clock::now()));
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

void OpProfileBackend::CopyFromHost(void* dst, const void* src, size_t bytes) {
  Timed([&] { return std::string("copy_from_host"); }, [&] { inner().CopyFromHost(dst, src, bytes); });
}
void OpProfileBackend::CopyFromHost2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                                      size_t row_bytes, size_t rows) {
  Timed([&] { return std::string("copy_from_host"); },
        [&] { inner().CopyFromHost2D(dst, dst_pitch, src, src_pitch, row_bytes, rows); });
}
void OpProfileBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  Timed([&] { return std::string("copy_to_host"); }, [&] { inner().CopyToHost(dst, src, bytes); });
}
void OpProfileBackend::Embedding(const int32_t* ids, int64_t n, const Tensor& table, int64_t vocab_start, float scale,
                                 Tensor out) {
  Timed([&] { return std::string("embedding"); }, [&] { inner().Embedding(ids, n, table, vocab_start, scale, out); });
}
void OpProfileBackend::RmsNorm(const Tensor& x, const float* w, float eps, cpu::NormKind kind, Tensor out) {
  Timed([&] { return std::string(absl::StrCat("rms_norm dim=", x.cols)); },
        [&] { inner().RmsNorm(x, w, eps, kind, out); });
}
void OpProfileBackend::Linear(const Tensor& x, const Tensor& w, const float* bias, Tensor y) {
  Timed([&] { return std::string(Shape("linear", x.rows, w.rows, w.cols)); }, [&] { inner().Linear(x, w, bias, y); });
}
void OpProfileBackend::Rope(Tensor x, int64_t head_dim, const int32_t* positions, const float* inv_freq,
                            float attn_factor) {
  Timed([&] { return std::string("rope"); }, [&] { inner().Rope(x, head_dim, positions, inv_freq, attn_factor); });
}
void OpProfileBackend::GatedActivation(const Tensor& gate_up, cpu::Activation act, Tensor out) {
  Timed([&] { return std::string("gated_activation"); }, [&] { inner().GatedActivation(gate_up, act, out); });
}
void OpProfileBackend::Softcap(Tensor x, float cap) {
  Timed([&] { return std::string("softcap"); }, [&] { inner().Softcap(x, cap); });
}
void OpProfileBackend::Add(const Tensor& a, const Tensor& b, Tensor out) {
  Timed([&] { return std::string("add"); }, [&] { inner().Add(a, b, out); });
}
void OpProfileBackend::Scale(Tensor x, float s) {
  Timed([&] { return std::string("scale"); }, [&] { inner().Scale(x, s); });
}
void OpProfileBackend::Copy(const Tensor& src, Tensor dst) {
  Timed([&] { return std::string("copy"); }, [&] { inner().Copy(src, dst); });
}
void OpProfileBackend::GatherRows(const Tensor& x, const int32_t* rows, int64_t n, Tensor out) {
  Timed([&] { return std::string("gather_rows"); }, [&] { inner().GatherRows(x, rows, n, out); });
}
void OpProfileBackend::WriteKv(const Tensor& k, const Tensor& v, const int32_t* slot_mapping, int64_t head_dim,
                               cpu::KvCacheDType kv_dtype, void* k_cache, void* v_cache) {
  Timed([&] { return std::string("write_kv"); },
        [&] { inner().WriteKv(k, v, slot_mapping, head_dim, kv_dtype, k_cache, v_cache); });
}
void OpProfileBackend::PagedAttention(const Tensor& q, const void* k_cache, const void* v_cache,
                                      const int32_t* token_seq, const int32_t* token_pos, const int32_t* block_tables,
                                      const cpu::PagedAttentionParams& p, Tensor out) {
  Timed(
      [&] {
        return std::string(absl::StrCat("attention d=", p.head_dim, p.sliding_window > 0 ? " sliding" : " full"));
      },
      [&] { inner().PagedAttention(q, k_cache, v_cache, token_seq, token_pos, block_tables, p, out); });
}
void OpProfileBackend::LinearSplit(const Tensor& x, const Tensor& w, const float* bias, std::span<const Tensor> outs) {
  Timed(
      [&] { return std::string(absl::StrCat(Shape("linear_split", x.rows, w.rows, w.cols), " parts=", outs.size())); },
      [&] { inner().LinearSplit(x, w, bias, outs); });
}
void OpProfileBackend::AttentionPrologue(Tensor q, Tensor k, Tensor v, const AttentionPrologueParams& p) {
  Timed([&] { return std::string(absl::StrCat("attention_prologue d=", p.head_dim)); },
        [&] { inner().AttentionPrologue(q, k, v, p); });
}
void OpProfileBackend::ResidualNorm(Tensor o, const float* post_w, Tensor h, float scale, const float* next_w,
                                    float eps, cpu::NormKind kind, Tensor x) {
  Timed([&] { return std::string("residual_norm"); },
        [&] { inner().ResidualNorm(o, post_w, h, scale, next_w, eps, kind, x); });
}
void OpProfileBackend::SampleShards(const void* shards, int tp, int64_t rows, int64_t shard_cols, int64_t vocab,
                                    const RowSampling* params, const int32_t* offsets, const int32_t* token_ids,
                                    const int32_t* counts, int32_t* out) {
  Timed([&] { return std::string("sample"); },
        [&] { inner().SampleShards(shards, tp, rows, shard_cols, vocab, params, offsets, token_ids, counts, out); });
}

void PrintOpProfile(const std::string& what, const std::vector<OpProfileRow>& rows, int steps, double step_ms,
                    double sync_us) {
  double sum_us = 0;
  int64_t calls = 0;
  for (const OpProfileRow& row : rows) {
    sum_us += row.total_us;
    calls += row.calls;
  }
  const double per_step = 1.0 / std::max(1, steps);
  std::printf("\nop profile: %s, each op synchronized (%.0f ops a step; a step took %.2f ms timed so, its ops "
              "%.2f ms, of which %.2f ms synchronization at %.1f us per op)\n",
              what.c_str(), calls * per_step, step_ms, sum_us / 1e3 * per_step, calls * sync_us / 1e3 * per_step,
              sync_us);
  std::printf("%-52s %9s %10s %10s %7s\n", "op", "calls", "ms", "us/call", "share");
  for (const OpProfileRow& row : rows) {
    std::printf("%-52s %9.1f %10.3f %10.1f %6.1f%%\n", row.op.c_str(), row.calls * per_step,
                row.total_us / 1e3 * per_step, row.total_us / row.calls, 100.0 * row.total_us / sum_us);
  }
}

}  // namespace tpserve
