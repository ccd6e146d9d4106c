// Micro-benchmark of the CUDA kernels at Gemma 4 31B shapes (TP 1): achieved GB/s or
// TFLOP/s of each next to the device's measured copy bandwidth. Not a test; run by
// bench/gpu_check.sh and by hand:
//   build/bench/cuda_kernels_bench [--device N] [--no_bulk] [--no_tune] [--no_wgmma] [--json]
// stdout is line-buffered and every row is printed (with --json, its JSON line too) as it
// is measured, so a kernel that traps late costs only the rows after it.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/sampling.h"

namespace tpserve::cuda {
namespace {

constexpr int kWarmup = 3, kIters = 20;

template <typename T>
T* Alloc(int64_t n) {
  T* p = nullptr;
  TP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), std::max<int64_t>(n, 1) * sizeof(T)));
  return p;
}
bf16* RandomBf16(int64_t n, uint32_t seed) {
  bf16* p = Alloc<bf16>(n);
  FillPattern(p, n, seed, nullptr);  // values in [-1, 1): zeros would flatter the tensor cores
  return p;
}
template <typename T>
T* Upload(const std::vector<T>& v) {
  T* p = Alloc<T>(static_cast<int64_t>(v.size()));
  TP_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// Median microseconds of `f` enqueued on `stream`.
double TimeUs(cudaStream_t stream, const std::function<void()>& f) {
  cudaEvent_t a, b;
  TP_CUDA_CHECK(cudaEventCreate(&a));
  TP_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < kWarmup; ++i) f();
  std::vector<double> us;
  for (int i = 0; i < kIters; ++i) {
    TP_CUDA_CHECK(cudaEventRecord(a, stream));
    f();
    TP_CUDA_CHECK(cudaEventRecord(b, stream));
    TP_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    TP_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1e3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// --json: every row also as one JSON line ("json: {...}", for tools/gpu_check_summary.py).
bool json_rows = false;

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

void Row(const char* kernel, const std::string& shape, double us, double amount, const char* unit, double peak) {
  const double rate = amount > 0 ? amount / (us * 1e-6) / (unit[0] == 'G' ? 1e9 : 1e12) : 0;
  char nums[160];
  std::snprintf(nums, sizeof(nums), "\"us\": %.3f, \"rate\": %.3f, \"unit\": \"%s\", \"peak\": %.1f", us, rate,
                amount > 0 ? unit : "", peak);
  if (amount <= 0) {  // a time only
    std::printf("%-22s %-44s %10.1f %10s\n", kernel, shape.c_str(), us, "-");
  } else {
    std::printf("%-22s %-44s %10.1f %10.1f %-7s", kernel, shape.c_str(), us, rate, unit);
    if (peak > 0) std::printf(" %5.0f%% of %.0f", 100.0 * rate / peak, peak);
    std::printf("\n");
  }
  if (json_rows) {
    std::printf("json: %s\n",
                ("{\"kernel\": " + JsonString(kernel) + ", \"shape\": " + JsonString(shape) + ", " + nums + "}").c_str());
  }
}

// (query, key) pairs a causal prompt of `tokens` tokens from position 0 attends to, each
// query seeing at most `window` keys (0: all before it).
double VisiblePairs(int32_t tokens, int32_t window) {
  double pairs = 0;
  for (int32_t t = 0; t < tokens; ++t) pairs += window > 0 ? std::min(t + 1, window) : t + 1;
  return pairs;
}

// Paged attention inputs: `seqs` sequences of `ctx` keys each in consecutive blocks,
// `q_per_seq` queries at the last positions of each.
struct AttnInputs {
  cpu::PagedAttentionParams p;
  int64_t tokens = 0;
  bf16 *q, *kc, *vc, *out;
  int32_t *seq, *pos, *tables;
};
AttnInputs MakeAttn(int32_t q_heads, int32_t kv_heads, int32_t head_dim, int32_t window, int32_t seqs, int32_t ctx,
                    int32_t q_per_seq) {
  AttnInputs a;
  a.p.num_q_heads = q_heads;
  a.p.num_kv_heads = kv_heads;
  a.p.head_dim = head_dim;
  a.p.block_size = 16;
  a.p.max_blocks_per_seq = (ctx + 15) / 16;
  a.p.scale = 0.0625f;
  a.p.sliding_window = window;
  std::vector<int32_t> seq, pos, tables;
  for (int32_t s = 0; s < seqs; ++s) {
    for (int32_t b = 0; b < a.p.max_blocks_per_seq; ++b) tables.push_back(s * a.p.max_blocks_per_seq + b);
    for (int32_t t = ctx - q_per_seq; t < ctx; ++t) {
      seq.push_back(s);
      pos.push_back(t);
    }
  }
  a.tokens = static_cast<int64_t>(seq.size());
  const int64_t slots = static_cast<int64_t>(tables.size()) * 16;
  a.q = RandomBf16(a.tokens * q_heads * head_dim, 1);
  a.kc = RandomBf16(slots * kv_heads * head_dim, 2);
  a.vc = RandomBf16(slots * kv_heads * head_dim, 3);
  a.out = Alloc<bf16>(a.tokens * q_heads * head_dim);
  a.seq = Upload(seq);
  a.pos = Upload(pos);
  a.tables = Upload(tables);
  return a;
}

int Main(int argc, char** argv) {
  int device = 0;
  // gpu_check passes the --no_* flags where the kernels' tests failed: a kernel that traps
  // would end the benchmark and lose the rows after it.
  bool no_bulk = false;   // skip the bulk GEMV and programmatic launch
  bool no_tune = false;   // skip the sweeps of GEMV block shapes and prefill tiles (start-up tuning's candidates)
  bool no_wgmma = false;  // skip the sm_90a wgmma prefill kernel
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) json_rows = true;
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--no_bulk") == 0) no_bulk = true;
    if (std::strcmp(argv[i], "--no_tune") == 0) no_tune = true;
    if (std::strcmp(argv[i], "--no_wgmma") == 0) no_wgmma = true;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("cuda_kernels_bench: no CUDA device\n");
    return 0;
  }
  TP_CUDA_CHECK(cudaSetDevice(device));
  const bool bulk = !no_bulk && GemvBulkSupported();
  cudaDeviceProp prop{};
  TP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  cudaStream_t st;
  TP_CUDA_CHECK(cudaStreamCreate(&st));

  // The copy bandwidth (bytes read + written) is the memory-bound kernels' ceiling.
  const int64_t copy_bytes = int64_t{1} << 31;
  bf16* src = RandomBf16(copy_bytes / 2, 9);
  bf16* dst = Alloc<bf16>(copy_bytes / 2);
  const double copy_us = TimeUs(st, [&] { TP_CUDA_CHECK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, st)); });
  const double peak_gbs = 2.0 * copy_bytes / (copy_us * 1e-6) / 1e9;
  std::printf("device %d: %s, %d SMs; device-to-device copy %.0f GB/s (read + write)\n", device, prop.name,
              prop.multiProcessorCount, peak_gbs);
  std::printf("%-22s %-44s %10s %10s %-7s\n", "kernel", "shape", "time_us", "rate", "unit");
  cudaFree(src);
  cudaFree(dst);

  const int64_t H = 5376, I = 21504;
  {  // Decode GEMV: the MLP's gate|up projection, W read once.
    bf16* w = RandomBf16(2 * I * H, 4);
    bf16* x = RandomBf16(8 * H, 5);
    bf16* y = Alloc<bf16>(8 * 2 * I);
    for (int64_t m : {1, 4}) {
      const double us = TimeUs(st, [&] { Gemv(x, m, H, w, DType::kBF16, 2 * I, y, st); });
      Row("gemv bf16", "m=" + std::to_string(m) + " k=5376 n=43008", us, 2.0 * I * H * 2, "GB/s", peak_gbs);
    }
    Gemm gemm;
    bf16* xs = RandomBf16(2048 * H, 6);
    bf16* ys = Alloc<bf16>(2048 * 2 * I);
    const double us = TimeUs(st, [&] { gemm.Run(xs, 2048, H, w, 2 * I, ys, st); });
    Row("gemm cuBLASLt bf16", "m=2048 k=5376 n=43008", us, 2.0 * 2048 * H * 2 * I, "TFLOP/s", 0);
    for (void* p : {static_cast<void*>(w), static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(xs),
                    static_cast<void*>(ys)}) {
      cudaFree(p);
    }
  }
  {  // Prefill GEMMs (2048 tokens, 31B at TP 1): every cuBLASLt heuristic candidate beside
     // the one the backend runs (candidate 0). n = 5376 gives 336 output tiles of 128 x 256:
     // 2.5 waves over 132 SMs, where another algorithm (split-K, other tiles) may win.
    struct Shape {
      const char* name;
      int64_t n, k;
    };
    Gemm gemm;
    bf16* xs = RandomBf16(2048 * I, 60);
    bf16* ys = Alloc<bf16>(2048 * 2 * I);
    for (const Shape& s : {Shape{"q|k|v sliding", 16384, H}, Shape{"o sliding", H, 8192}, Shape{"o global", H, 16384},
                           Shape{"gate|up", 2 * I, H}, Shape{"down", H, I}}) {
      bf16* w = RandomBf16(s.n * s.k, 61);
      const std::string shape = std::string(s.name) + " m=2048 n=" + std::to_string(s.n) + " k=" + std::to_string(s.k);
      for (int c = 0; c < Gemm::kMaxCandidates; ++c) {
        if (!gemm.RunCandidate(c, xs, 2048, s.k, w, s.n, ys, st)) break;
        const double us = TimeUs(st, [&] { gemm.RunCandidate(c, xs, 2048, s.k, w, s.n, ys, st); });
        Row(("gemm candidate " + std::to_string(c) + (c == 0 ? " (used)" : "")).c_str(), shape, us,
            2.0 * 2048 * s.n * s.k, "TFLOP/s", 0);
      }
      cudaFree(w);
    }
    cudaFree(xs);
    cudaFree(ys);
  }
  {  // Batch-1 decode: every projection shape of Gemma 4 31B at TP 1 (sliding / global
     // layers), our GEMV against cuBLASLt at m = 1, as a share of the copy bandwidth.
    struct Shape {
      const char* name;
      int64_t n, k;
    };
    // q|k|v run as one fused GEMV (global layers: q|k, as K = V); the separate k/v shapes
    // show what fusing them saved.
    const Shape shapes[] = {{"q|k|v sliding", 16384, H}, {"q|k global", 18432, H}, {"k|v alone sliding", 4096, H},
                            {"o sliding", H, 8192},      {"o global", H, 16384},    {"down", H, I},
                            {"lm_head", 262144, H}};
    Gemm gemm;
    bf16* x = RandomBf16(8 * I, 7);
    bf16* y = Alloc<bf16>(8 * 262144);
    for (const Shape& s : shapes) {
      // Enough copies of W to rotate through that no call finds its weights in the L2.
      const int64_t bytes = 2 * s.n * s.k;
      const int copies = static_cast<int>(std::max<int64_t>(1, ((int64_t{256} << 20) + bytes - 1) / bytes));
      std::vector<bf16*> ws;
      for (int c = 0; c < copies; ++c) ws.push_back(RandomBf16(s.n * s.k, 8 + c));
      int turn = 0;
      const std::string shape = std::string(s.name) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k);
      const double us = TimeUs(st, [&] { Gemv(x, 1, s.k, ws[turn++ % copies], DType::kBF16, s.n, y, st); });
      Row("gemv bf16 m=1", shape, us, bytes, "GB/s", peak_gbs);
      if (bulk) {
        const double bulk = TimeUs(st, [&] {
          Gemv(x, 1, s.k, ws[turn++ % copies], DType::kBF16, s.n, y, st, GemvLaunch{.bulk = true});
        });
        Row("gemv bulk m=1", shape, bulk, bytes, "GB/s", peak_gbs);
      }
      const double lt = TimeUs(st, [&] { gemm.Run(x, 1, s.k, ws[turn++ % copies], s.n, y, st); });
      Row("cuBLASLt m=1", shape, lt, bytes, "GB/s", peak_gbs);
      for (bf16* w : ws) cudaFree(w);
    }
    cudaFree(x);
    cudaFree(y);
  }
  if (!no_tune) {  // The m = 1 GEMV's block shape: the production {features 4, unroll 4, 2 blocks per SM}
     // against the other instantiated tunings, at the shapes batch-1 decode spends its time
     // in. Every tuning must give the production bits (checked here).
    struct Shape {
      const char* name;
      int64_t n, k;
    };
    for (const Shape& s : {Shape{"gate|up", 2 * I, H}, Shape{"q|k|v sliding", 16384, H}, Shape{"down", H, I}}) {
      const int64_t bytes = 2 * s.n * s.k;
      const int copies = static_cast<int>(std::max<int64_t>(1, ((int64_t{256} << 20) + bytes - 1) / bytes));
      std::vector<bf16*> ws;
      for (int c = 0; c < copies; ++c) ws.push_back(RandomBf16(s.n * s.k, 30 + c));
      bf16* x = RandomBf16(s.k, 29);
      bf16* want = Alloc<bf16>(s.n);
      bf16* got = Alloc<bf16>(s.n);
      Gemv(x, 1, s.k, ws[0], DType::kBF16, s.n, want, st);
      std::vector<uint16_t> want_h(s.n), got_h(s.n);
      TP_CUDA_CHECK(cudaMemcpyAsync(want_h.data(), want, s.n * 2, cudaMemcpyDeviceToHost, st));
      TP_CUDA_CHECK(cudaStreamSynchronize(st));
      for (const GemvTuning& t : GemvTunings()) {
        GemvWithTuning(t, x, s.k, ws[0], s.n, got, st);
        TP_CUDA_CHECK(cudaMemcpyAsync(got_h.data(), got, s.n * 2, cudaMemcpyDeviceToHost, st));
        TP_CUDA_CHECK(cudaStreamSynchronize(st));
        int turn = 0;
        const double us = TimeUs(st, [&] { GemvWithTuning(t, x, s.k, ws[turn++ % copies], s.n, got, st); });
        const std::string name = "gemv tune " + std::to_string(t.features) + "/" + std::to_string(t.unroll) + "/" +
                                 std::to_string(t.min_blocks) + (got_h == want_h ? "" : " BITS DIFFER");
        Row(name.c_str(), std::string(s.name) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k), us, bytes,
            "GB/s", peak_gbs);
      }
      for (bf16* w : ws) cudaFree(w);
      for (void* p : {static_cast<void*>(x), static_cast<void*>(want), static_cast<void*>(got)}) cudaFree(p);
    }
  }
  {  // Batch-1 decode's layer as the CUDA backend launches it (31B sliding layer, TP 1, one
     // sequence over 1024 keys), kLayers layers with their own weights so none stays in the
     // L2: residual norm, q|k|v GEMV, decode attention, o GEMV, residual norm, gate|up GEMV,
     // gated activation, down GEMV. Each GemvLaunch choice eager and replayed from a CUDA
     // graph; the rate is the weights read per layer over the layer's time, against the
     // copy bandwidth (the batch-1 roofline's ceiling). Every choice must give the same
     // bits (checked).
    constexpr int kLayers = 8;
    const int64_t qkv = 8192 + 4096 + 4096;
    struct LayerWeights {
      bf16 *qkv, *o, *gate_up, *down;
    };
    std::vector<LayerWeights> lw;
    for (int l = 0; l < kLayers; ++l) {
      lw.push_back({RandomBf16(qkv * H, 40 + 4 * l), RandomBf16(H * 8192, 41 + 4 * l), RandomBf16(2 * I * H, 42 + 4 * l),
                    RandomBf16(H * I, 43 + 4 * l)});
    }
    const int64_t layer_bytes = 2 * (qkv * H + H * 8192 + 2 * I * H + H * I);
    AttnInputs at = MakeAttn(32, 16, 256, 1024, 1, 1024, 1);
    const size_t ws_bytes = DecodeAttentionWorkspaceBytes(at.tokens, at.p, prop.multiProcessorCount);
    void* attn_ws = Alloc<uint8_t>(static_cast<int64_t>(ws_bytes));
    std::vector<float> ones(I, 1.0f);
    float* norm_w = Upload(ones);
    bf16* h = RandomBf16(H, 50);
    bf16* x = Alloc<bf16>(H);
    bf16* kk = Alloc<bf16>(4096);
    bf16* vv = Alloc<bf16>(4096);
    bf16* attn = Alloc<bf16>(8192);
    bf16* o = Alloc<bf16>(H);
    bf16* gu = Alloc<bf16>(2 * I);
    bf16* act = Alloc<bf16>(I);
    bf16* h0 = RandomBf16(H, 51);
    auto layers = [&](const GemvLaunch& launch) {
      TP_CUDA_CHECK(cudaMemcpyAsync(h, h0, H * 2, cudaMemcpyDeviceToDevice, st));
      RmsNorm(h, norm_w, 1, H, 1e-6f, cpu::NormKind::kScale, x, st);
      for (const LayerWeights& w : lw) {
        GemvOutputs out;
        out.count = 3;
        out.y[0] = at.q;
        out.cols[0] = 8192;
        out.y[1] = kk;
        out.cols[1] = 4096;
        out.y[2] = vv;
        out.cols[2] = 4096;
        GemvSplit(x, 1, H, w.qkv, DType::kBF16, out, st, launch);
        DecodeAttention(at.q, at.kc, at.vc, at.seq, at.pos, at.tokens, at.tables, at.p, prop.multiProcessorCount,
                        attn_ws, ws_bytes, attn, st);
        Gemv(attn, 1, 8192, w.o, DType::kBF16, H, o, st, launch);
        ResidualNorm(o, norm_w, h, 1.0f, norm_w, 1, H, 1e-6f, cpu::NormKind::kScale, x, st);
        Gemv(x, 1, H, w.gate_up, DType::kBF16, 2 * I, gu, st, launch);
        GatedActivation(gu, 1, I, cpu::Activation::kGeluTanh, act, st);
        Gemv(act, 1, I, w.down, DType::kBF16, H, o, st, launch);
        ResidualNorm(o, norm_w, h, 1.0f, norm_w, 1, H, 1e-6f, cpu::NormKind::kScale, x, st);
      }
    };
    auto result = [&] {
      std::vector<uint16_t> v(H);
      TP_CUDA_CHECK(cudaMemcpyAsync(v.data(), x, H * 2, cudaMemcpyDeviceToHost, st));
      TP_CUDA_CHECK(cudaStreamSynchronize(st));
      return v;
    };
    layers(GemvLaunch{});
    const std::vector<uint16_t> want = result();
    std::vector<GemvLaunch> launches = {GemvLaunch{}};
    if (bulk) {
      launches.insert(launches.end(), {GemvLaunch{.pdl = true}, GemvLaunch{.bulk = true},
                                       GemvLaunch{.bulk = true, .pdl = true}});
    }
    const std::string shape = "31B sliding, 1 seq x 1024 keys, x" + std::to_string(kLayers);
    for (const GemvLaunch& launch : launches) {
      std::string name = std::string("layer ") + (launch.bulk ? "bulk" : "split") + (launch.pdl ? "+pdl" : "");
      layers(launch);
      const bool same = result() == want;
      const double eager = TimeUs(st, [&] { layers(launch); }) / kLayers;
      Row((name + " eager" + (same ? "" : " BITS DIFFER")).c_str(), shape, eager, layer_bytes, "GB/s", peak_gbs);
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      TP_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      layers(launch);
      TP_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
      TP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      TP_CUDA_CHECK(cudaGraphLaunch(exec, st));
      const bool graph_same = result() == want;
      const double replay = TimeUs(st, [&] { TP_CUDA_CHECK(cudaGraphLaunch(exec, st)); }) / kLayers;
      Row((name + " graph" + (graph_same ? "" : " BITS DIFFER")).c_str(), shape, replay, layer_bytes, "GB/s",
          peak_gbs);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
    for (const LayerWeights& w : lw) {
      for (bf16* p : {w.qkv, w.o, w.gate_up, w.down}) cudaFree(p);
    }
    for (void* p : {static_cast<void*>(at.q), static_cast<void*>(at.kc), static_cast<void*>(at.vc),
                    static_cast<void*>(at.out), static_cast<void*>(at.seq), static_cast<void*>(at.pos),
                    static_cast<void*>(at.tables), attn_ws, static_cast<void*>(norm_w), static_cast<void*>(h),
                    static_cast<void*>(x), static_cast<void*>(kk), static_cast<void*>(vv), static_cast<void*>(attn),
                    static_cast<void*>(o), static_cast<void*>(gu), static_cast<void*>(act), static_cast<void*>(h0)}) {
      cudaFree(p);
    }
  }
  {  // Batch-1 decode's small ops, fused against op by op (launch gaps included: kernels
     // back to back on one stream, as an eager decode step runs them).
    const int64_t T = 1, qh = 32, kvh = 16, D = 256;
    bf16* q = RandomBf16(T * qh * D, 11);
    bf16* k = RandomBf16(T * kvh * D, 12);
    bf16* v = RandomBf16(T * kvh * D, 13);
    bf16* kc = Alloc<bf16>(64 * kvh * D);
    bf16* vc = Alloc<bf16>(64 * kvh * D);
    std::vector<float> ones(D, 1.0f), freq(D / 2, 1e-3f), hw(H, 1.0f);
    float* dn = Upload(ones);
    float* df = Upload(freq);
    float* dh = Upload(hw);
    int32_t* pos = Upload(std::vector<int32_t>{1000});
    int32_t* slot = Upload(std::vector<int32_t>{7});
    AttentionPrologueArgs a;
    a.q = q;
    a.k = k;
    a.v = v;
    a.tokens = T;
    a.q_heads = qh;
    a.kv_heads = kvh;
    a.head_dim = D;
    a.q_norm = dn;
    a.k_norm = dn;
    a.positions = pos;
    a.inv_freq = df;
    a.slot_mapping = slot;
    a.k_cache = kc;
    a.v_cache = vc;
    const std::string shape = "T=1 q/kv=32/16 d=256";
    Row("prologue fused", shape, TimeUs(st, [&] { AttentionPrologue(a, st); }), 0, "GB/s", 0);
    Row("prologue op by op", shape, TimeUs(st, [&] {
          RmsNorm(q, dn, T * qh, D, 1e-6f, cpu::NormKind::kScale, q, st);
          RmsNorm(k, dn, T * kvh, D, 1e-6f, cpu::NormKind::kScale, k, st);
          Rope(q, T, qh, D, pos, df, 1.0f, st);
          Rope(k, T, kvh, D, pos, df, 1.0f, st);
          WriteKv(k, v, slot, T, kvh, D, kc, vc, st);
        }), 0, "GB/s", 0);
    bf16* o = RandomBf16(T * H, 14);
    bf16* h = RandomBf16(T * H, 15);
    bf16* x = Alloc<bf16>(T * H);
    Row("residual_norm fused", "T=1 dim=5376 post+scale+next", TimeUs(st, [&] {
          ResidualNorm(o, dh, h, 1.0f, dh, T, H, 1e-6f, cpu::NormKind::kScale, x, st);
        }), 0, "GB/s", 0);
    Row("residual_norm op by op", "T=1 dim=5376 post+scale+next", TimeUs(st, [&] {
          RmsNorm(o, dh, T, H, 1e-6f, cpu::NormKind::kScale, o, st);
          Add(h, o, DType::kBF16, T * H, h, st);
          Scale(h, DType::kBF16, T * H, 1.0f, st);
          RmsNorm(h, dh, T, H, 1e-6f, cpu::NormKind::kScale, x, st);
        }), 0, "GB/s", 0);
    for (void* p : {static_cast<void*>(q), static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(kc),
                    static_cast<void*>(vc), static_cast<void*>(dn), static_cast<void*>(df), static_cast<void*>(dh),
                    static_cast<void*>(pos), static_cast<void*>(slot), static_cast<void*>(o), static_cast<void*>(h),
                    static_cast<void*>(x)}) {
      cudaFree(p);
    }
  }
  {  // RMSNorm over a prefill chunk.
    bf16* x = RandomBf16(4096 * H, 7);
    std::vector<float> w(H, 1.0f);
    float* dw = Upload(w);
    const double us = TimeUs(st, [&] { RmsNorm(x, dw, 4096, H, 1e-6f, cpu::NormKind::kScale, x, st); });
    Row("rms_norm", "rows=4096 dim=5376", us, 2.0 * 4096 * H * 2, "GB/s", peak_gbs);
    cudaFree(x);
    cudaFree(dw);
  }
  struct DecodeCase {
    const char* name;
    int32_t q, kv, d, window, seqs, ctx;
  };
  for (const DecodeCase& c : {DecodeCase{"decode attn global", 32, 4, 512, 0, 1, 32768},
                              DecodeCase{"decode attn global", 32, 4, 512, 0, 32, 4096},
                              DecodeCase{"decode attn sliding", 32, 16, 256, 1024, 64, 4096},
                              // engine_bench's decode step: 64 sequences of 1024 keys.
                              DecodeCase{"decode attn global", 32, 4, 512, 0, 64, 1024},
                              DecodeCase{"decode attn sliding", 32, 16, 256, 1024, 64, 1024}}) {
    AttnInputs a = MakeAttn(c.q, c.kv, c.d, c.window, c.seqs, c.ctx, 1);
    const size_t ws_bytes = DecodeAttentionWorkspaceBytes(a.tokens, a.p, prop.multiProcessorCount);
    void* ws = Alloc<uint8_t>(static_cast<int64_t>(ws_bytes));
    const double us = TimeUs(st, [&] {
      DecodeAttention(a.q, a.kc, a.vc, a.seq, a.pos, a.tokens, a.tables, a.p, prop.multiProcessorCount, ws, ws_bytes,
                      a.out, st);
    });
    const int64_t keys = c.window > 0 ? std::min(c.window, c.ctx) : c.ctx;
    Row(c.name,
        "seqs=" + std::to_string(c.seqs) + " ctx=" + std::to_string(c.ctx) + " q/kv=" + std::to_string(c.q) + "/" +
            std::to_string(c.kv) + " d=" + std::to_string(c.d),
        us, 2.0 * c.seqs * keys * c.kv * c.d * 2, "GB/s", peak_gbs);
  }
  {  // Prefill: one causal 4096-token sequence, sliding-layer and global-layer shapes.
    for (int32_t d : {256, 512}) {
      const int32_t kv = d == 256 ? 16 : 4, T = 4096;
      AttnInputs a = MakeAttn(32, kv, d, 0, 1, T, T);
      const size_t ws_bytes = PrefillAttentionWorkspaceBytes(a.tokens);
      void* ws = Alloc<uint8_t>(static_cast<int64_t>(ws_bytes));
      const double us = TimeUs(st, [&] {
        PrefillAttention(a.q, a.kc, a.vc, a.seq, a.pos, a.tokens, a.tables, a.p, ws, ws_bytes, a.out, st);
      });
      Row("prefill attn causal", "tokens=4096 q/kv=32/" + std::to_string(kv) + " d=" + std::to_string(d), us,
          4.0 * VisiblePairs(T, 0) * 32 * d, "TFLOP/s", 0);
    }
  }
  if (!no_tune) {  // The prefill kernel's tile shapes (keys per K/V tile / 16-row warps per CTA) on the
     // 31B's 2048-token prompt: sliding layers (window 1024, d 256) and global layers
     // (causal, d 512); the production shape is 32/4 for both.
    for (int32_t d : {256, 512}) {
      const int32_t kv = d == 256 ? 16 : 4, T = 2048, window = d == 256 ? 1024 : 0;
      AttnInputs a = MakeAttn(32, kv, d, window, 1, T, T);
      const size_t ws_bytes = PrefillAttentionWorkspaceBytes(a.tokens);
      void* ws = Alloc<uint8_t>(static_cast<int64_t>(ws_bytes));
      const double pairs = VisiblePairs(T, window);
      const std::string shape = "tokens=2048 q/kv=32/" + std::to_string(kv) + " d=" + std::to_string(d) +
                                (window > 0 ? " window=1024" : " causal");
      for (const PrefillTuning& t : PrefillAttentionTunings(d)) {
        const double us = TimeUs(st, [&] {
          PrefillAttentionWithTuning(t, a.q, a.kc, a.vc, a.seq, a.pos, a.tokens, a.tables, a.p, ws, ws_bytes, a.out,
                                     st);
        });
        const std::string name = "prefill tune " + std::to_string(t.block_keys) + "/" + std::to_string(t.row_warps);
        Row(name.c_str(), shape, us, 4.0 * pairs * 32 * d, "TFLOP/s", 0);
      }
      cudaFree(ws);
    }
  }
  {  // Sampling over Gemma's vocabulary.
    const int64_t rows = 64, V = 262144;
    std::vector<float> logits(rows * V);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 2654435761u) % 1000) / 100.0f;
    float* dl = Upload(logits);
    std::vector<SamplingParams> params(rows);
    for (auto& p : params) {
      p.top_k = 50;
      p.top_p = 0.9f;
    }
    SamplingParams* dp = Upload(params);
    int32_t* out = Alloc<int32_t>(rows);
    const double us = TimeUs(st, [&] { Sample(dl, rows, V, dp, out, st); });
    Row("sample top-k+top-p", "rows=64 vocab=262144", us, 1.0 * rows * V * 4, "GB/s", peak_gbs);
    const double us_argmax = TimeUs(st, [&] { Argmax(dl, DType::kF32, rows, V, out, st); });
    Row("argmax", "rows=64 vocab=262144", us_argmax, 1.0 * rows * V * 4, "GB/s", peak_gbs);
  }
  // Last, as they have never run on a GPU before: the sm_90a prefill kernels (1: S on
  // wgmma; 2: P·V too) beside the production mma.sync kernel on the 31B's sliding-layer
  // prompt and a causal 4096-token one, and how far each output is from production's.
  const std::vector<PrefillTuning> wgmma = no_wgmma ? std::vector<PrefillTuning>{} : PrefillAttentionWgmmaTunings(256);
  if (!wgmma.empty()) {
    for (const int32_t window : {1024, 0}) {
      const int32_t T = window > 0 ? 2048 : 4096;
      AttnInputs a = MakeAttn(32, 16, 256, window, 1, T, T);
      const size_t ws_bytes = PrefillAttentionWorkspaceBytes(a.tokens);
      void* ws = Alloc<uint8_t>(static_cast<int64_t>(ws_bytes));
      bf16* ref = Alloc<bf16>(a.tokens * 32 * 256);
      const double pairs = VisiblePairs(T, window);
      const std::string shape = "tokens=" + std::to_string(T) + " q/kv=32/16 d=256" +
                                (window > 0 ? " window=1024" : " causal");
      const double base_us = TimeUs(st, [&] {
        PrefillAttention(a.q, a.kc, a.vc, a.seq, a.pos, a.tokens, a.tables, a.p, ws, ws_bytes, ref, st);
      });
      Row("prefill mma.sync", shape, base_us, 4.0 * pairs * 32 * 256, "TFLOP/s", 0);
      const int64_t n = a.tokens * 32 * 256;
      std::vector<uint16_t> want(n), got(n);
      TP_CUDA_CHECK(cudaMemcpy(want.data(), ref, n * 2, cudaMemcpyDeviceToHost));
      for (const PrefillTuning& wg : wgmma) {
        const double us = TimeUs(st, [&] {
          PrefillAttentionWithTuning(wg, a.q, a.kc, a.vc, a.seq, a.pos, a.tokens, a.tables, a.p, ws, ws_bytes, a.out,
                                     st);
        });
        const std::string name = "prefill wgmma " + std::to_string(wg.wgmma);
        Row(name.c_str(), shape, us, 4.0 * pairs * 32 * 256, "TFLOP/s", 0);
        TP_CUDA_CHECK(cudaMemcpy(got.data(), a.out, n * 2, cudaMemcpyDeviceToHost));
        double max_diff = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double d = std::fabs(static_cast<double>(Bf16ToF32(got[i])) - Bf16ToF32(want[i]));
          max_diff = std::isnan(d) ? INFINITY : std::max(max_diff, d);
        }
        std::printf("prefill wgmma vs mma.sync (variant %d, %s): max |diff| %.3g\n", wg.wgmma, shape.c_str(), max_diff);
      }
      for (void* p : {static_cast<void*>(ws), static_cast<void*>(ref)}) cudaFree(p);
    }
  }
  return 0;
}

}  // namespace
}  // namespace tpserve::cuda

int main(int argc, char** argv) { return tpserve::cuda::Main(argc, argv); }
