// engine_bench --backend cuda (engine_bench_gpu.h). Decode steps are driven by hand-made
// step plans over a KV cache that was never prefilled: step time depends on how much KV
// attention reads, not on its values, and it spares a 31B prefill of batch x context tokens.
// Every step samples greedily on the GPU (only token ids reach the host), as serving does.
// Decode runs replayed from CUDA graphs and eagerly on the same engine, side by side.
#include "bench/engine_bench_gpu.h"
#include "bench/median.h"
#include "bench/op_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/gpu_peaks.h"
#include "launch/engine_setup.h"
#include "nlohmann/json.hpp"
#include "worker/device.h"
#include "worker/step_executor.h"
#include "worker/worker_loop.h"

namespace tpserve::bench {
namespace {

constexpr int kWarmupDecodeSteps = 2;
constexpr int kPrefillReps = 3;
constexpr size_t kCopyBytes = size_t{1} << 31;
constexpr int kPeakReps = 10;

std::string Fixed(double v, const char* unit, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f%s", digits, v, unit);
  return buf;
}

double GiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

// Where `batch` decoding sequences keep their KV: blocks of their own when the cache holds
// them all, else (shared) one copy of the context's blocks that every sequence reads plus
// blocks of its own for the tokens it decodes. Every group gets the same layout.
struct DecodeLayout {
  bool fits = false;
  bool shared = false;
  int32_t blocks_per_seq = 0;
  std::vector<int32_t> block_tables;  // [batch, blocks_per_seq]
  int64_t blocks_needed = 0;          // with blocks of their own
};

DecodeLayout LayoutDecode(int batch, int context, int steps, int32_t block_size, int64_t num_blocks) {
  DecodeLayout d;
  d.blocks_per_seq = (context + steps - 1) / block_size + 1;
  d.blocks_needed = static_cast<int64_t>(batch) * d.blocks_per_seq;
  const int32_t bps = d.blocks_per_seq;
  const int32_t common = context / block_size;  // blocks holding only context tokens
  const int32_t own = bps - common;
  if (d.blocks_needed <= num_blocks) {
    d.fits = true;
    for (int32_t i = 0; i < batch * bps; ++i) d.block_tables.push_back(i);
  } else if (common + static_cast<int64_t>(batch) * own <= num_blocks) {
    d.fits = d.shared = true;
    for (int32_t s = 0; s < batch; ++s) {
      for (int32_t b = 0; b < bps; ++b) d.block_tables.push_back(b < common ? b : common + s * own + (b - common));
    }
  }
  return d;
}

// Greedy sampling on the workers for every logit row, as serving on a GPU does: only
// token ids come back to the host.
void SampleGreedyOnWorkers(StepPlan& p) {
  RowSampling greedy;
  greedy.temperature = 0.0f;
  p.sampling.assign(p.logit_rows.size(), greedy);
  p.penalty_offsets.assign(p.logit_rows.size() + 1, 0);
}

StepPlan DecodePlan(const DecodeLayout& d, int batch, int32_t pos, int32_t block_size, size_t groups, int64_t vocab) {
  StepPlan p;
  p.num_seqs = batch;
  KvGroupPlan kv;
  kv.max_blocks_per_seq = d.blocks_per_seq;
  kv.block_tables = d.block_tables;
  for (int32_t s = 0; s < batch; ++s) {
    p.token_ids.push_back(static_cast<int32_t>((1000 + 7919 * static_cast<int64_t>(s)) % vocab));
    p.positions.push_back(pos);
    p.token_seq.push_back(s);
    kv.slot_mapping.push_back(d.block_tables[s * d.blocks_per_seq + pos / block_size] * block_size + pos % block_size);
    p.logit_rows.push_back(s);
  }
  p.kv.assign(groups, kv);
  SampleGreedyOnWorkers(p);
  return p;
}

StepPlan PrefillPlan(int tokens, int32_t block_size, size_t groups, int64_t vocab) {
  StepPlan p;
  p.num_seqs = 1;
  KvGroupPlan kv;
  kv.max_blocks_per_seq = (tokens + block_size - 1) / block_size;
  for (int32_t b = 0; b < kv.max_blocks_per_seq; ++b) kv.block_tables.push_back(b);
  for (int32_t t = 0; t < tokens; ++t) {
    p.token_ids.push_back(static_cast<int32_t>((1000 + 7919 * static_cast<int64_t>(t)) % vocab));
    p.positions.push_back(t);
    p.token_seq.push_back(0);
    kv.slot_mapping.push_back(t);
  }
  p.logit_rows.push_back(tokens - 1);
  p.kv.assign(groups, kv);
  SampleGreedyOnWorkers(p);
  return p;
}

struct DecodeResult {
  int batch = 0;
  std::string kv = "own";   // own | shared | skipped
  std::string mode = "eager";  // graphs | eager
  std::string kernels = "split";  // GpuBenchOptions::kernels
  double step_ms = 0, step_max_ms = 0, allreduce_share = 0;
  double eager_step_ms = 0;  // graphs rows measured beside eager: the eager row's step time
};

struct TpResult {
  int tp = 0;
  std::string error;
  double load_s = 0;
  int64_t weight_bytes = 0;  // all ranks
  std::vector<int64_t> kv_blocks;
  int64_t kv_budget_bytes = 0;
  int32_t block_size = 16;
  std::string communicator;
  struct Prefill {
    std::string kernels;  // GpuBenchOptions::kernels
    double ms = 0, allreduce_share = 0;
  };
  std::vector<Prefill> prefill;  // one per kernel choice; empty where the prompt does not fit
  TuneReport tune_report;        // rank 0's start-up tuning (any "tuned" kernels)
  std::vector<DecodeResult> decode;
  bool graphs = false;  // the engine replays decode steps from CUDA graphs
  int64_t peak_used_bytes = 0, total_bytes = 0;
  // --op_profile: one prefill step and one eager decode step at the first and at the
  // last batch size, op by op.
  struct OpProfile {
    std::string step;  // what was profiled
    std::vector<OpProfileRow> rows;
    double step_ms = 0, sync_us = 0;
  };
  std::vector<OpProfile> op_profiles;
};


// One Execute, timed on the host (plan broadcast, the step and the logits included).
absl::StatusOr<std::pair<double, double>> TimedStep(StepExecutor& exec, const StepPlan& plan) {
  StepTimes times;
  const auto t0 = std::chrono::steady_clock::now();
  TP_RETURN_IF_ERROR(exec.Execute(plan, &times).status());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return std::make_pair(ms, times.allreduce_us / 1e3);
}

// One step through the profiler (it synchronizes around every op), as an OpProfile.
absl::StatusOr<TpResult::OpProfile> ProfileStep(StepExecutor& exec, const StepPlan& plan, OpProfileBackend& profiler,
                                                std::string step) {
  TpResult::OpProfile p;
  p.step = std::move(step);
  profiler.Start();
  auto t = TimedStep(exec, plan);
  profiler.Stop();
  TP_RETURN_IF_ERROR(t.status());
  p.rows = profiler.Rows();
  p.step_ms = t->first;
  p.sync_us = profiler.SyncUs();
  return p;
}

// A measurement as soon as it is taken ("progress: ..." on stdout, flushed): the tables come
// at the end of the run, and a crash before then would otherwise leave nothing.
void Progress(const std::string& line) {
  std::printf("progress: %s\n", line.c_str());
  std::fflush(stdout);
}

// Rank 0's measurements once the engine is up.
// `set_graphs` turns replays on or off on every rank (between steps).
// `set_kernels` switches every rank's kernels (GpuBenchOptions::kernels).
absl::Status Measure(const GpuBenchOptions& o, Engine& engine, StepExecutor& exec,
                     const std::function<void(bool)>& set_graphs,
                     const std::function<void(const std::string&)>& set_kernels, OpProfileBackend* profiler,
                     TpResult& r) {
  const ModelConfig& c = engine.config;
  const size_t groups = c.kv_group_windows.size();
  const int32_t bs = engine.model->block_size();
  const int64_t blocks = *std::min_element(r.kv_blocks.begin(), r.kv_blocks.end());
  auto sample = [&] {
    auto mem = CudaDeviceMemory(engine.gpu);
    if (mem.ok()) {
      r.peak_used_bytes = std::max(r.peak_used_bytes, mem->total_bytes - mem->free_bytes);
      r.total_bytes = mem->total_bytes;
    }
  };
  sample();
  // Prefill: one prompt of prefill_tokens tokens, one step, with each kernel choice.
  if ((o.prefill_tokens + bs - 1) / bs <= blocks) {
    const StepPlan plan = PrefillPlan(o.prefill_tokens, bs, groups, c.vocab_size);
    for (const std::string& kernels : o.kernels) {
      set_kernels(kernels);
      std::vector<double> ms;
      double allreduce = 0, total = 0;
      for (int i = 0; i <= kPrefillReps; ++i) {
        TP_ASSIGN_OR_RETURN(auto t, TimedStep(exec, plan));
        if (i == 0) continue;  // warm-up
        ms.push_back(t.first);
        total += t.first;
        allreduce += t.second;
      }
      r.prefill.push_back({kernels, Median(ms), total > 0 ? allreduce / total : 0});
      Progress(absl::StrCat("prefill ", o.prefill_tokens, " tokens, kernels ", kernels, ": ",
                            Fixed(r.prefill.back().ms, " ms", 2)));
      sample();
    }
    set_kernels(o.kernels.front());
    if (profiler != nullptr) {
      TP_ASSIGN_OR_RETURN(auto p, ProfileStep(exec, plan, *profiler,
                                              absl::StrCat("one prefill step of ", o.prefill_tokens, " tokens")));
      r.op_profiles.push_back(std::move(p));
    }
  }
  // Decode at each batch over `context` tokens of KV, replayed from CUDA graphs and/or
  // eager on the same KV (the warm-up steps capture a batch's graph).
  const int steps = kWarmupDecodeSteps + o.decode_steps;
  std::vector<std::string> modes;
  if (engine.model->cuda_graphs() && o.decode_mode != "eager") modes.push_back("graphs");
  if (modes.empty() || o.decode_mode != "graphs") modes.push_back("eager");
  for (int batch : o.batch) {
    const DecodeLayout layout = LayoutDecode(batch, o.context, steps, bs, blocks);
    if (!layout.fits) {
      DecodeResult d;
      d.batch = batch;
      d.kv = "skipped";
      std::fprintf(stderr, "engine_bench: batch %d x context %d needs %lld KV blocks per group; the cache holds %lld\n",
                   batch, o.context, static_cast<long long>(layout.blocks_needed), static_cast<long long>(blocks));
      r.decode.push_back(d);
      continue;
    }
    for (const std::string& kernels : o.kernels) {
      set_kernels(kernels);
      const size_t first = r.decode.size();
      for (const std::string& mode : modes) {
        DecodeResult d;
        d.batch = batch;
        d.kv = layout.shared ? "shared" : "own";
        d.mode = mode;
        d.kernels = kernels;
        set_graphs(mode == "graphs");
        std::vector<double> ms;
        double allreduce = 0, total = 0;
        for (int s = 0; s < steps; ++s) {
          const StepPlan plan = DecodePlan(layout, batch, o.context + s, bs, groups, c.vocab_size);
          TP_ASSIGN_OR_RETURN(auto t, TimedStep(exec, plan));
          if (s < kWarmupDecodeSteps) continue;
          ms.push_back(t.first);
          total += t.first;
          allreduce += t.second;
        }
        d.step_ms = Median(ms);
        d.step_max_ms = *std::max_element(ms.begin(), ms.end());
        d.allreduce_share = total > 0 ? allreduce / total : 0;
        r.decode.push_back(d);
        Progress(absl::StrCat("decode batch ", batch, " ", mode, " ", kernels, ": ", Fixed(d.step_ms, " ms", 3)));
        sample();
      }
      if (r.decode.size() - first == 2) r.decode[first].eager_step_ms = r.decode[first + 1].step_ms;
    }
    set_kernels(o.kernels.front());
    if (profiler != nullptr && (batch == o.batch.front() || batch == o.batch.back())) {
      // The last measured position again (its KV slot is rewritten with the same values).
      set_graphs(false);
      const StepPlan plan = DecodePlan(layout, batch, o.context + steps - 1, bs, groups, c.vocab_size);
      TP_ASSIGN_OR_RETURN(auto p, ProfileStep(exec, plan, *profiler,
                                              absl::StrCat("one eager decode step, batch ", batch, ", kernels ",
                                                           o.kernels.front())));
      r.op_profiles.push_back(std::move(p));
    }
    set_graphs(true);
  }
  return absl::OkStatus();
}

}  // namespace


namespace {

TpResult RunTp(const GpuBenchOptions& o, const ModelConfig& config, int tp) {
  TpResult r;
  r.tp = tp;
  EngineOptions eo;
  eo.model = o.model;
  eo.load_format = "dummy";
  eo.dtype = o.dtype;
  eo.device = "cuda";
  eo.gpu_memory_utilization = o.gpu_memory_utilization;
  const int max_batch = *std::max_element(o.batch.begin(), o.batch.end());
  eo.max_num_batched_tokens = std::max(o.prefill_tokens, max_batch);
  eo.max_num_seqs = max_batch;
  eo.split_kv_by_need = false;  // every group the same blocks, as the hand-made plans assume
  eo.dummy_seed = 1;
  eo.enforce_eager = o.decode_mode == "eager";
  eo.kernels = *ParseKernelOptions(o.kernels.front());  // checked by the caller
  eo.tune_kernels = std::any_of(o.kernels.begin(), o.kernels.end(),
                                [](const std::string& k) { return ParseKernelOptions(k)->tuned; });
  // The longest sequence the bench makes, as a server would be told with --max-model-len:
  // replayed decode steps upload block tables that wide (the model's 262144 positions
  // would make them 16384 blocks wide).
  eo.max_model_len = std::min<int64_t>(config.max_position_embeddings,
                                       std::max(o.prefill_tokens, o.context + kWarmupDecodeSteps + o.decode_steps));
  OpProfileBackend* profiler = nullptr;
  if (o.op_profile && tp == 1) {
    eo.wrap_backend = [&](std::unique_ptr<Backend> b) -> std::unique_ptr<Backend> {
      auto p = std::make_unique<OpProfileBackend>(std::move(b));
      profiler = p.get();
      return p;
    };
  }
  std::vector<int64_t> weight_bytes(tp, 0);
  std::vector<Model*> models(tp, nullptr);
  LocalGroup group(tp);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < tp; ++rank) {
    threads.emplace_back([&, rank] {
      auto comm = group.Rank(rank);
      const WorldConfig world{rank, tp, tp, rank, tp, "local"};
      const auto t0 = std::chrono::steady_clock::now();
      auto engine = StartEngine(config, eo, world, *comm);
      if (!engine.ok()) {
        if (rank == 0) r.error = std::string(engine.status().message());
        return;
      }
      weight_bytes[rank] = engine->model->weight_bytes();
      models[rank] = engine->model.get();
      comm->Barrier();  // every rank's model is in `models` before rank 0 measures
      if (rank != 0) {
        (void)RunWorkerLoop(*engine->model, *comm);
        return;
      }
      r.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      r.kv_blocks = engine->model->num_kv_blocks();
      r.kv_budget_bytes = engine->kv_budget_bytes;
      r.block_size = engine->model->block_size();
      r.communicator = engine->device_comm ? engine->device_comm->name() : comm->name();
      r.graphs = engine->model->cuda_graphs();
      r.tune_report = engine->tune_report;
      StepExecutor exec(*engine->model, *comm);
      // Other ranks read the flag when the next plan arrives, after rank 0 set it.
      auto set_graphs = [&](bool on) {
        for (Model* m : models) m->set_cuda_graphs_enabled(on);
      };
      auto set_kernels = [&](const std::string& name) {
        const KernelOptions k = *ParseKernelOptions(name);  // checked by the caller
        for (Model* m : models) m->set_kernel_options(k);
      };
      absl::Status st = Measure(o, *engine, exec, set_graphs, set_kernels, profiler, r);
      exec.Shutdown();
      if (!st.ok()) r.error = std::string(st.message());
    });
  }
  for (auto& t : threads) t.join();
  for (int64_t b : weight_bytes) r.weight_bytes += b;
  return r;
}

}  // namespace

int RunGpuEngineBench(const GpuBenchOptions& o) {
  auto config = PresetModelConfig(o.model);
  absl::Status st = config.status();
  if (st.ok()) {
    st = KeepFirstLayers(*config, o.num_layers);
    if (!st.ok()) st = absl::InvalidArgumentError(absl::StrCat("--num_layers: ", st.message()));
  }
  if (st.ok() && (o.tp.empty() || o.batch.empty())) st = absl::InvalidArgumentError("--tp and --batch need values");
  if (st.ok() && CudaDeviceCount() == 0) {
    st = absl::FailedPreconditionError(BuiltWithCuda() ? "--backend cuda: no CUDA device is visible"
                                                        : "--backend cuda: engine_bench was built without CUDA");
  }
  if (!st.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  const int full_layers = PresetModelConfig(o.model)->num_layers;
  auto facts = DescribeCudaDevice(0);
  const std::string gpu = facts.ok() ? facts->name : "?";
  std::printf("engine_bench: %s (%.2fB params, %d of %d layers%s, dummy weights, %s) on %d x %s (driver CUDA %s, "
              "runtime %s), --gpu-memory-utilization %.2f\n",
              o.model.c_str(), config->ParameterCount() / 1e9, config->num_layers, full_layers,
              config->num_layers < full_layers ? " (--num_layers: load time)" : "", o.dtype.c_str(),
              CudaDeviceCount(), gpu.c_str(), CudaVersionString(facts.ok() ? facts->driver_version : 0).c_str(),
              CudaVersionString(facts.ok() ? facts->runtime_version : 0).c_str(), o.gpu_memory_utilization);
  // The GPU's own rates, before any model is loaded.
  const int64_t gemm_m = o.prefill_tokens, gemm_n = 2 * config->intermediate_size, gemm_k = config->hidden_size;
  auto copy_gbs = MeasureDeviceCopyGBs(0, kCopyBytes, kPeakReps);
  auto gemm_tflops = MeasureCublasBf16GemmTflops(0, gemm_m, gemm_n, gemm_k, kPeakReps);
  if (!copy_gbs.ok() || !gemm_tflops.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n",
                 std::string((copy_gbs.ok() ? gemm_tflops.status() : copy_gbs.status()).message()).c_str());
    return 1;
  }
  std::printf("device-to-device copy (%zu MiB, read + write): %.0f GB/s\n", kCopyBytes >> 20, *copy_gbs);
  std::printf("cuBLAS bf16 GEMM m=%lld n=%lld k=%lld (the largest prefill GEMM at TP 1): %.0f TFLOP/s\n",
              static_cast<long long>(gemm_m), static_cast<long long>(gemm_n), static_cast<long long>(gemm_k),
              *gemm_tflops);
  // Prefill FLOPs: 2 x matmul params x tokens (the embedding is a lookup and the LM head runs
  // on one row; attention's own FLOPs are printed beside, not counted in the target).
  const int64_t embed_params = config->vocab_size * config->hidden_size * (config->tie_word_embeddings ? 1 : 2);
  const double matmul_params = static_cast<double>(config->ParameterCount() - embed_params);

  int code = 0;
  for (int tp : o.tp) {
    TpResult r = RunTp(o, *config, tp);
    if (!r.error.empty()) {
      std::fprintf(stderr, "engine_bench: tp %d: %s\n", tp, r.error.c_str());
      code = 1;
      if (r.load_s <= 0) continue;  // the engine never started: nothing was measured
      // A later measurement failed: what was measured before it is still worth printing.
      std::printf("\ntp %d stopped early (%s); what it measured before that follows\n", tp, r.error.c_str());
    }
    std::printf("\ntp %d (%s): load %.1f s, weights %.2f GiB, KV cache %.2f GiB per rank = %s blocks per group of %d "
                "tokens, peak GPU memory %.2f of %.2f GiB\n",
                tp, r.communicator.c_str(), r.load_s, GiB(r.weight_bytes), GiB(r.kv_budget_bytes),
                absl::StrJoin(r.kv_blocks, "/").c_str(), r.block_size, GiB(r.peak_used_bytes), GiB(r.total_bytes));
    if (const std::string tuning = DescribeTuning(r.tune_report); !tuning.empty()) {
      std::printf("%s (rank 0):\n", tuning.c_str());
      for (const std::string& line : r.tune_report.lines) std::printf("  %s\n", line.c_str());
    }
    auto tflops = [&](double ms) { return 2.0 * matmul_params * o.prefill_tokens / (ms / 1e3) / 1e12; };
    // The same step counting attention's products too (what MFU figures usually count).
    const double attention_flops = config->PrefillAttentionFlops(o.prefill_tokens);
    auto all_tflops = [&](double ms) { return tflops(ms) + attention_flops / (ms / 1e3) / 1e12; };
    for (const TpResult::Prefill& p : r.prefill) {
      std::printf("prefill %d tokens, kernels %s: %.1f ms, %.0f tok/s, %.0f TFLOP/s = %.0f%% of the GEMM (target "
                  "70%%; with attention's %.2f TFLOP: %.0f TFLOP/s = %.0f%%), all-reduce %.1f%%\n",
                  o.prefill_tokens, p.kernels.c_str(), p.ms, o.prefill_tokens / (p.ms / 1e3), tflops(p.ms),
                  100.0 * tflops(p.ms) / *gemm_tflops, attention_flops / 1e12, all_tflops(p.ms),
                  100.0 * all_tflops(p.ms) / *gemm_tflops, 100.0 * p.allreduce_share);
    }
    if (r.prefill.empty()) {
      std::printf("prefill %d tokens: skipped (more KV blocks than the cache holds)\n", o.prefill_tokens);
    }
    std::printf("%4s %6s %8s %10s %7s %9s %10s %10s %12s %9s %10s %9s\n", "tp", "batch", "context", "KV", "mode",
                "kernels", "step ms", "tok/s", "weight GB/s", "of copy", "allreduce", "vs eager");
    nlohmann::json decode = nlohmann::json::array();
    for (const DecodeResult& d : r.decode) {
      if (d.kv == "skipped") {
        std::printf("%4d %6d %8d %10s %10s\n", tp, d.batch, o.context, "too big", "-");
        decode.push_back({{"batch", d.batch}, {"kv", d.kv}});
        continue;
      }
      // Every decode step streams every weight once (the tied embedding as the LM head).
      const double weight_gbs = r.weight_bytes / (d.step_ms / 1e3) / 1e9;
      const std::string speedup = d.eager_step_ms > 0 ? Fixed(d.eager_step_ms / d.step_ms, "x", 2) : "";
      std::printf("%4d %6d %8d %10s %7s %9s %10.2f %10.0f %12.0f %8.0f%% %9s %9s\n", tp, d.batch, o.context,
                  d.kv.c_str(), d.mode.c_str(), d.kernels.c_str(), d.step_ms, d.batch / (d.step_ms / 1e3), weight_gbs, 100.0 * weight_gbs / *copy_gbs,
                  d.mode == "graphs" ? "-" : Fixed(100.0 * d.allreduce_share, "%", 1).c_str(),
                  speedup.c_str());
      nlohmann::json row = {{"batch", d.batch},     {"kv", d.kv}, {"mode", d.mode}, {"kernels", d.kernels},
                            {"step_ms", d.step_ms},
                            {"step_max_ms", d.step_max_ms}, {"tok_s", d.batch / (d.step_ms / 1e3)},
                            {"weight_gbs", weight_gbs}, {"of_copy", weight_gbs / *copy_gbs},
                            {"allreduce_share", d.allreduce_share}};
      if (d.eager_step_ms > 0) row["graph_speedup"] = d.eager_step_ms / d.step_ms;
      decode.push_back(row);
    }
    std::printf("(mode graphs: decode replayed from CUDA graphs, whose all-reduce time cannot be measured; "
                "eager: as --enforce-eager%s)\n", r.graphs ? "" : "; this engine has no graphs (staged communicator)");
    if (std::any_of(r.decode.begin(), r.decode.end(), [](const DecodeResult& d) { return d.kv == "shared"; })) {
      std::printf("(KV shared: the batch's own context blocks do not fit, so its sequences read one copy of them)\n");
    }
    for (const TpResult::OpProfile& p : r.op_profiles) {
      PrintOpProfile(p.step, p.rows, 1, p.step_ms, p.sync_us);
    }
    if (o.json) {
      nlohmann::json j = {{"backend", "cuda"},
                          {"model", o.model},
                          {"layers", config->num_layers},
                          {"model_layers", full_layers},
                          {"dtype", o.dtype},
                          {"gpu", gpu},
                          {"tp", tp},
                          {"communicator", r.communicator},
                          {"gpu_memory_utilization", o.gpu_memory_utilization},
                          {"copy_gbs", *copy_gbs},
                          {"gemm_tflops", *gemm_tflops},
                          {"load_s", r.load_s},
                          {"weight_bytes", r.weight_bytes},
                          {"kv_budget_bytes", r.kv_budget_bytes},
                          {"kv_blocks", r.kv_blocks},
                          {"peak_gpu_memory_bytes", r.peak_used_bytes},
                          {"gpu_memory_total_bytes", r.total_bytes},
                          {"context", o.context},
                          {"cuda_graphs", r.graphs},
                          {"decode", decode}};
      nlohmann::json prefill = nlohmann::json::array();
      for (const TpResult::Prefill& p : r.prefill) {
        prefill.push_back({{"tokens", o.prefill_tokens}, {"kernels", p.kernels},
                           {"ms", p.ms},                 {"tflops", tflops(p.ms)},
                           {"of_gemm", tflops(p.ms) / *gemm_tflops}, {"allreduce_share", p.allreduce_share},
                           {"tflops_with_attention", all_tflops(p.ms)},
                           {"of_gemm_with_attention", all_tflops(p.ms) / *gemm_tflops}});
      }
      if (!r.prefill.empty()) j["prefill"] = prefill.front();  // the first kernel choice (as before)
      j["prefill_by_kernels"] = prefill;
      j["tuned_kernels"] = {{"products", r.tune_report.products},
                            {"changed", r.tune_report.changed},
                            {"seconds", r.tune_report.seconds},
                            {"lines", r.tune_report.lines}};
      if (!r.error.empty()) j["error"] = r.error;
      std::printf("%s\n", j.dump().c_str());
    }
  }
  return code;
}

}  // namespace tpserve::bench
