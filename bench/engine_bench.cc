// The engine benchmark: decode and prefill of a dummy-weight model (or a real checkpoint or
// GGUF file) at chosen tensor-parallel sizes and batch sizes, with the machine's measured
// memory bandwidth beside the achieved weight bandwidth, all in one run. Ranks run as threads of this process (the
// same code path as MPI ranks, communicator aside). Not a test: numbers go to docs/.
// --backend cuda runs the GPU measurements of bench/engine_bench_gpu.h instead.
//
//   build/bench/engine_bench --model gemma-4-1b --tp 1,2 --batch 1 --context 128
//   build/bench/engine_bench --model ~/.cache/tpserve/models/gemma-3-270m --tp 1,2   (real GGUF weights)
//   build/bench/engine_bench --model FILE.gguf --tp 1 --batch 1,8 --op_profile   (where a decode step's time goes)
//   build/bench/engine_bench --backend cuda --model gemma-4-31b --tp 1 --batch 1,8,64,256 --context 1024
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/engine_bench_gpu.h"
#include "bench/median.h"
#include "bench/op_profile.h"
#include "bench/stream.h"
#include "coordinator/engine/offline.h"
#include "nlohmann/json.hpp"
#include "launch/engine_setup.h"
#include "worker/backend.h"
#include "worker/gguf_model.h"
#include "worker/communicator.h"
#include "worker/model.h"
#include "worker/weight_source.h"
#include "worker/step_executor.h"
#include "worker/worker_loop.h"

ABSL_FLAG(std::string, model, "gemma-4-1b",
          "Built-in model (dummy weights): gemma-4-1b, gemma-4-31b, gemma-4-tiny; or a checkpoint directory or GGUF "
          "file (real weights; the cpu backend)");
ABSL_FLAG(std::string, tp, "1,2", "Tensor-parallel sizes to run, comma-separated");
ABSL_FLAG(std::string, batch, "1", "Decode batch sizes, comma-separated");
ABSL_FLAG(int, context, 128, "Prompt tokens per sequence before decoding");
ABSL_FLAG(int, decode_steps, 16, "Decode steps measured per configuration");
ABSL_FLAG(int, threads, 0, "Total CPU threads, split across ranks (default: all cores)");
ABSL_FLAG(std::string, dtype, "bfloat16", "Weight dtype");
ABSL_FLAG(bool, json, false, "Also print one JSON object per configuration");
ABSL_FLAG(bool, dequantize_weights, false,
          "cpu: widen a GGUF file's quantized weights to --dtype at load (as tpserve --dequantize-weights) instead "
          "of keeping the blocks");
ABSL_FLAG(std::string, kv_cache_dtype, "auto",
          "cpu: how the KV cache holds K and V, as tpserve --kv-cache-dtype: auto (fp32) | bfloat16 | fp8");
ABSL_FLAG(std::string, cpu_gemm, "sgemm", "cpu: the matmul path, auto | sgemm | onednn-bf16 | amx-bf16 (tpserve --cpu-gemm)");
ABSL_FLAG(std::string, cpu_quant_prefill, "auto", "cpu: prefill over quantized weights, auto | widen | int8 (tpserve "
          "--cpu-quant-prefill)");
ABSL_FLAG(std::string, backend, "cpu", "cpu | cuda (the GPU measurements: copy bandwidth, cuBLAS GEMM, prefill "
                                       "TFLOP/s, decode roofline, peak memory, KV blocks)");
ABSL_FLAG(double, gpu_memory_utilization, 0.9, "cuda: fraction of the GPU's memory the engine may use");
ABSL_FLAG(int, prefill_tokens, 2048, "cuda: tokens of the prefill measurement's prompt");
ABSL_FLAG(std::string, decode_mode, "both", "cuda: decode steps replayed from CUDA graphs (graphs), eager as "
                                           "--enforce-eager (eager), or both side by side (both)");
ABSL_FLAG(bool, op_profile, false,
          "TP 1: also time steps op by op (each op synchronized). cuda: one prefill step and one eager decode step "
          "at the first and the last batch; cpu: after each batch's measured run, 8 decode steps of the same batch");
ABSL_FLAG(std::string, kernels, "split",
          "cuda: kernel choices measured side by side on one engine (prefill and decode), comma-separated: split | "
          "bulk | tuned, each optionally +pdl (bulk: GEMVs stream weights with bulk copies; tuned: the fastest "
          "GEMV and cuBLASLt algorithm per weight shape and prefill tile per attention layout, measured at "
          "start-up; pdl: programmatic launch)");
ABSL_FLAG(int, num_layers, 0, "cuda: run the model's first N layers only (0: all); shortens the dummy load");

namespace tpserve {
namespace {

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> v;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipWhitespace())) {
    int x;
    if (absl::SimpleAtoi(part, &x) && x > 0) v.push_back(x);
  }
  return v;
}

struct Result {
  int tp = 0, threads_per_rank = 0, batch = 0;
  double load_s = 0;
  double prefill_ms = 0;        // whole prompt batch, one or more chunks
  double decode_step_ms = 0;    // median over decode steps
  double decode_step_max_ms = 0;
  double allreduce_share = 0;   // of decode step time
  // The engine core's own time per decode step (schedule, plan broadcast, update): median,
  // and its share of the whole step (forward + this).
  double coordinator_ms = 0;
  double coordinator_share = 0;
  int64_t weight_bytes = 0;     // all ranks together
  // --op_profile at TP 1: kProfiledSteps decode steps of the same batch, op by op, and the
  // cost of an empty synchronize pair (the floor of every row).
  std::vector<OpProfileRow> op_rows;
  double profiled_steps_ms = 0;
  double sync_us = 0;
  bool ok = false;
};

constexpr int kProfiledSteps = 8;

using bench::Median;

// Real weights from --model's checkpoint or GGUF file; dummy ones for a built-in shape.
absl::StatusOr<std::unique_ptr<WeightSource>> OpenSource(const std::string& model, const ModelConfig& config) {
  if (PresetModelConfig(model).ok()) return MakeDummySource(config, 1);
  if (IsGgufModelPath(model)) {
    TP_ASSIGN_OR_RETURN(std::string path, FindGgufFile(model));
    TP_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
    return OpenGgufSource(std::move(file));
  }
  return OpenCheckpointSource(model);
}

// The same batch again: its prefill untimed, then kProfiledSteps decode steps through the op
// profiler, then the rest of its tokens untimed (the core is left idle).
absl::Status ProfileDecode(EngineCore& core, const std::vector<std::vector<int32_t>>& prompts, SamplingParams params,
                           OpProfileBackend& profiler, Result* r) {
  params.max_tokens = kProfiledSteps + 2;
  const absl::Time now = absl::Now();
  for (size_t b = 0; b < prompts.size(); ++b) {
    TP_RETURN_IF_ERROR(core.AddRequest(absl::StrCat("profile-", b), prompts[b], params, now));
  }
  size_t started = 0;  // sequences with their first token: the prefill is done
  while (started < prompts.size()) {
    const EngineStep step = core.Step();
    if (step.num_seqs == 0) return absl::InternalError("the profiled batch did not start");
    for (const EngineOutput& o : step.outputs) {
      if (o.finish == FinishReason::kError) return absl::InternalError(o.error);
      if (!o.token_ids.empty() && o.num_output_tokens == static_cast<int32_t>(o.token_ids.size())) ++started;
    }
  }
  profiler.Start();
  for (int i = 0; i < kProfiledSteps; ++i) {
    const EngineStep step = core.Step();
    if (step.num_prefill_tokens > 0) return absl::InternalError("a profiled decode step had prefill tokens");
    r->profiled_steps_ms += step.forward_ms;
  }
  profiler.Stop();
  while (core.HasUnfinished()) core.Step();
  r->op_rows = profiler.Rows();
  r->sync_us = profiler.SyncUs();
  return absl::OkStatus();
}

// `mo`: the weights' dtype, whether GGUF blocks stay quantized, the KV cache's dtype.
Result RunOne(const std::string& model_name, const ModelConfig& config, const ModelOptions& mo, int tp,
              int threads_per_rank, int batch, int context, int decode_steps, const cpu::GemmChoice& gemm, bool op_profile,
              std::string* formats) {
  Result r;
  r.tp = tp;
  r.threads_per_rank = threads_per_rank;
  r.batch = batch;
  std::vector<int64_t> rank_weight_bytes(tp, 0);
  LocalGroup group(tp);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < tp; ++rank) {
    threads.emplace_back([&, rank] {
      auto comm = group.Rank(rank);
      const auto t0 = std::chrono::steady_clock::now();
      auto source = OpenSource(model_name, config);
      absl::Status st = comm->AgreeOnStatus(source.status());
      if (!st.ok()) {
        if (rank == 0) std::fprintf(stderr, "engine_bench: %s\n", std::string(st.message()).c_str());
        return;
      }
      std::unique_ptr<Backend> backend = MakeCpuBackend(BackendOptions{.threads = threads_per_rank, .cpu_gemm = gemm.path, .cpu_quant_prefill = gemm.quant_prefill});
      OpProfileBackend* profiler = nullptr;
      if (op_profile && tp == 1) {
        auto wrapped = std::make_unique<OpProfileBackend>(std::move(backend));
        profiler = wrapped.get();
        backend = std::move(wrapped);
      }
      auto model = Model::Load(config, **source, *backend, *comm, mo);
      st = comm->AgreeOnStatus(model.status());
      if (!st.ok()) {
        if (rank == 0) std::fprintf(stderr, "engine_bench: %s\n", std::string(st.message()).c_str());
        return;
      }
      const int64_t per_seq_blocks = (context + decode_steps + 15) / 16;
      st = comm->AgreeOnStatus((*model)->AllocateKvCache(per_seq_blocks * batch + 1));
      if (!st.ok()) return;
      rank_weight_bytes[rank] = (*model)->weight_bytes();
      if (rank == 0) *formats = (*model)->weight_formats().Describe(*mo.weight_dtype);
      if (rank != 0) {
        (void)RunWorkerLoop(**model, *comm);
        return;
      }
      r.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      StepExecutor exec(**model, *comm);
      // One prefill step for the whole batch, then decode steps of exactly `batch` sequences.
      SchedulerConfig sc = SchedulerConfigFor(**model, batch, std::max(2048, batch * context));
      sc.enable_prefix_caching = false;  // distinct prompts anyway; no hashing cost in the numbers
      sc.kv_watermark = 0;               // the cache is sized to the batch exactly
      EngineCore core(exec, sc);
      std::vector<std::vector<int32_t>> prompts(batch);
      for (int b = 0; b < batch; ++b) {
        for (int i = 0; i < context; ++i) prompts[b].push_back(static_cast<int32_t>((1000 + 7919 * (i + 31 * b)) % config.vocab_size));
      }
      SamplingParams gp;
      gp.temperature = 0;
      gp.max_tokens = decode_steps + 1;
      gp.ignore_eos = true;
      auto outs = GenerateOffline(core, prompts, gp);
      if (outs.ok() && profiler != nullptr) {
        absl::Status profiled = ProfileDecode(core, prompts, gp, *profiler, &r);
        if (!profiled.ok()) outs = profiled;
      }
      exec.Shutdown();
      if (!outs.ok()) {
        std::fprintf(stderr, "engine_bench: %s\n", std::string(outs.status().message()).c_str());
        return;
      }
      std::vector<double> decode_ms, coordinator_ms;
      double decode_total = 0, allreduce_total = 0, coordinator_total = 0;
      for (const StepSummary& s : outs->steps) {
        if (s.num_prefill_tokens > 0) {
          r.prefill_ms += s.forward_ms;
        } else {
          decode_ms.push_back(s.forward_ms);
          coordinator_ms.push_back(s.coordinator_ms);
          decode_total += s.forward_ms;
          allreduce_total += s.allreduce_ms;
          coordinator_total += s.coordinator_ms;
        }
      }
      r.coordinator_ms = Median(coordinator_ms);
      r.coordinator_share = coordinator_total / (decode_total + coordinator_total);
      r.decode_step_ms = Median(decode_ms);
      r.decode_step_max_ms = decode_ms.empty() ? 0 : *std::max_element(decode_ms.begin(), decode_ms.end());
      r.allreduce_share = decode_total > 0 ? allreduce_total / decode_total : 0;
      r.ok = true;
    });
  }
  for (auto& t : threads) t.join();
  for (int64_t b : rank_weight_bytes) r.weight_bytes += b;
  return r;
}

int MainGpu() {
  bench::GpuBenchOptions o;
  o.model = absl::GetFlag(FLAGS_model);
  o.dtype = absl::GetFlag(FLAGS_dtype);
  o.tp = ParseList(absl::GetFlag(FLAGS_tp));
  o.batch = ParseList(absl::GetFlag(FLAGS_batch));
  o.context = absl::GetFlag(FLAGS_context);
  o.decode_steps = std::max(1, absl::GetFlag(FLAGS_decode_steps));
  o.prefill_tokens = std::max(1, absl::GetFlag(FLAGS_prefill_tokens));
  o.gpu_memory_utilization = absl::GetFlag(FLAGS_gpu_memory_utilization);
  o.num_layers = absl::GetFlag(FLAGS_num_layers);
  o.json = absl::GetFlag(FLAGS_json);
  o.decode_mode = absl::GetFlag(FLAGS_decode_mode);
  o.op_profile = absl::GetFlag(FLAGS_op_profile);
  o.kernels = absl::StrSplit(absl::GetFlag(FLAGS_kernels), ',', absl::SkipWhitespace());
  for (const std::string& k : o.kernels) {
    if (auto parsed = ParseKernelOptions(k); !parsed.ok()) {
      std::fprintf(stderr, "engine_bench: --kernels: %s\n", std::string(parsed.status().message()).c_str());
      return 2;
    }
  }
  if (o.kernels.empty()) o.kernels = {"split"};
  if (absl::GetFlag(FLAGS_kv_cache_dtype) != "auto") {
    std::fprintf(stderr, "engine_bench: --kv_cache_dtype is a CPU measurement (the CUDA backend's cache is bf16)\n");
    return 2;
  }
  if (o.decode_mode != "graphs" && o.decode_mode != "eager" && o.decode_mode != "both") {
    std::fprintf(stderr, "engine_bench: --decode_mode \"%s\" is not one of graphs, eager, both\n", o.decode_mode.c_str());
    return 2;
  }
  return bench::RunGpuEngineBench(o);
}

int Main() {
  const std::string backend = absl::GetFlag(FLAGS_backend);
  if (backend == "cuda") return MainGpu();
  if (backend != "cpu") {
    std::fprintf(stderr, "engine_bench: --backend \"%s\" is not one of cpu, cuda\n", backend.c_str());
    return 2;
  }
  EngineOptions eo;
  eo.model = absl::GetFlag(FLAGS_model);
  if (PresetModelConfig(eo.model).ok()) eo.load_format = "dummy";
  auto config = ResolveModelConfig(eo);
  if (!config.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  auto dtype = ParseDType(absl::GetFlag(FLAGS_dtype));
  if (!dtype.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n", std::string(dtype.status().message()).c_str());
    return 2;
  }
  auto gemm = cpu::ChooseGemmPath(absl::GetFlag(FLAGS_cpu_gemm), absl::GetFlag(FLAGS_cpu_quant_prefill));
  if (!gemm.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n", std::string(gemm.status().message()).c_str());
    return 2;
  }
  ModelOptions mo;
  mo.weight_dtype = *dtype;
  mo.keep_quantized = !absl::GetFlag(FLAGS_dequantize_weights);
  const absl::StatusOr<cpu::KvCacheDType> kv = KvCacheDTypeFor(absl::GetFlag(FLAGS_kv_cache_dtype), DeviceKind::kCpu);
  if (!kv.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n", std::string(kv.status().message()).c_str());
    return 2;
  }
  mo.kv_cache_dtype = *kv;
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int context = absl::GetFlag(FLAGS_context);
  const int steps = absl::GetFlag(FLAGS_decode_steps);

  std::printf("engine_bench: %s (%.2fB params, %s weights, %s), %d CPU threads in all, context %d, %d decode steps\n",
              eo.model.c_str(), config->ParameterCount() / 1e9, eo.load_format == "dummy" ? "dummy" : "real",
              std::string(DTypeName(*dtype)).c_str(), threads, context, steps);
  std::printf("matmuls: %s; KV cache %s\n", gemm->description.c_str(), cpu::KvCacheDTypeName(mo.kv_cache_dtype));
  const double triad_gbs = bench::MeasureTriadBandwidthGBs(threads);
  std::printf("STREAM triad bandwidth (%d threads): %.2f GB/s\n\n", threads, triad_gbs);
  std::printf("%4s %7s %6s %9s %11s %11s %10s %12s %9s %10s %9s %8s\n", "tp", "thr/rk", "batch", "load s",
              "prefill ms", "step ms", "tok/s", "weight GB/s", "of triad", "allreduce", "coord ms", "coord");
  std::vector<Result> results;
  for (int batch : ParseList(absl::GetFlag(FLAGS_batch))) {
    for (int tp : ParseList(absl::GetFlag(FLAGS_tp))) {
      const int per_rank = std::max(1, threads / tp);
      std::string formats;
      Result r = RunOne(eo.model, *config, mo, tp, per_rank, batch, context, steps, *gemm,
                        absl::GetFlag(FLAGS_op_profile), &formats);
      if (!r.ok) return 1;
      if (results.empty()) std::printf("weights in memory (rank 0): %s\n", formats.c_str());
      // Each decode step streams every weight once (the tied embedding as the LM head).
      const double weight_gbs = r.weight_bytes / (r.decode_step_ms / 1e3) / 1e9;
      std::printf("%4d %7d %6d %9.2f %11.1f %11.2f %10.1f %12.2f %8.0f%% %9.1f%% %9.3f %7.2f%%\n", r.tp,
                  r.threads_per_rank, r.batch, r.load_s, r.prefill_ms, r.decode_step_ms,
                  batch / (r.decode_step_ms / 1e3), weight_gbs, 100.0 * weight_gbs / triad_gbs,
                  100.0 * r.allreduce_share, r.coordinator_ms, 100.0 * r.coordinator_share);
      if (absl::GetFlag(FLAGS_json)) {
        nlohmann::json j = {{"model", absl::GetFlag(FLAGS_model)}, {"tp", r.tp}, {"threads_per_rank", r.threads_per_rank},
                            {"batch", batch}, {"context", context}, {"load_s", r.load_s}, {"prefill_ms", r.prefill_ms},
                            {"decode_step_ms", r.decode_step_ms}, {"decode_step_max_ms", r.decode_step_max_ms},
                            {"weight_gbs", weight_gbs}, {"triad_gbs", triad_gbs}, {"allreduce_share", r.allreduce_share},
                            {"coordinator_ms", r.coordinator_ms}, {"coordinator_share", r.coordinator_share},
                            {"weight_bytes", r.weight_bytes}, {"weight_formats", formats},
                            {"cpu_gemm", gemm->description}, {"kv_cache_dtype", cpu::KvCacheDTypeName(mo.kv_cache_dtype)}};
        std::printf("%s\n", j.dump().c_str());
      }
      results.push_back(r);
    }
  }
  for (const Result& r : results) {
    if (r.op_rows.empty()) continue;
    PrintOpProfile(absl::StrCat("batch ", r.batch, ", ", kProfiledSteps, " decode steps"), r.op_rows,
                   kProfiledSteps, r.profiled_steps_ms / kProfiledSteps, r.sync_us);
  }
  // TP scaling at each batch: step time at TP = t over TP = first.
  std::printf("\n");
  for (size_t i = 1; i < results.size(); ++i) {
    if (results[i].batch == results[0].batch) {
      std::printf("decode step time TP=%d / TP=%d at batch %d: %.2f\n", results[i].tp, results[0].tp, results[i].batch,
                  results[i].decode_step_ms / results[0].decode_step_ms);
    }
  }
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tpserve::Main();
}
