// The serving benchmark: the real ServingEngine in-process (ranks as threads, LocalGroup)
// on a dummy-weight model, one seeded mixed-length workload and one KV memory budget, in
// one run: (a) continuous vs static batching throughput, (b) the paged KV cache's waste
// beside what contiguous max-length slots would waste, (c) the coordinator's share of
// step time at 64 decoding sequences, measured and projected onto a GPU step time.
// Not a test: numbers go to docs/serving.md.
//
//   build/bench/serving_bench [--json]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kernels/cpu/cpu_kernels.h"
#include "coordinator/engine/serving_engine.h"
#include "coordinator/text/tokenizer.h"
#include "launch/engine_setup.h"
#include "nlohmann/json.hpp"
#include "worker/communicator.h"
#include "worker/step_executor.h"
#include "worker/worker_loop.h"

ABSL_FLAG(std::string, model, "gemma-4-tiny", "Built-in model (dummy weights): gemma-4-tiny, gemma-4-1b, gemma-4-31b");
ABSL_FLAG(int, sliding_window, 256, "Window of the model's sliding layers: 256 is to max_model_len 2048 as Gemma 4's "
                                     "1024 is to 8192 (0: the preset's own, 16 for gemma-4-tiny: one block)");
ABSL_FLAG(int, tp, 1, "Tensor-parallel size (ranks as threads)");
ABSL_FLAG(int, threads, 0, "CPU threads in all, split across ranks (0: all cores)");
ABSL_FLAG(std::string, kv_cache_memory, "48MiB", "KV cache memory per rank, e.g. 48MiB");
ABSL_FLAG(bool, equal_kv_split, false, "Give every KV group the same number of blocks (the old rule) instead of "
                                       "SplitKvBlocks");
ABSL_FLAG(int, max_model_len, 2048, "Longest prompt + output; static batching reserves this much per sequence");
ABSL_FLAG(int, max_num_batched_tokens, 2048, "Tokens per step (prefill chunk size)");
ABSL_FLAG(int, max_num_seqs, 256, "Sequences running at once in continuous batching");
ABSL_FLAG(double, kv_watermark, 0.01, "Admit a waiting request only if every KV group keeps this fraction of its "
                                      "blocks free (SchedulerConfig::kv_watermark; 0: admit whenever it fits)");
ABSL_FLAG(int, requests, 64, "Requests in the workload");
ABSL_FLAG(int, min_prompt, 16, "Shortest prompt (tokens)");
ABSL_FLAG(int, max_prompt, 1024, "Longest prompt (tokens)");
ABSL_FLAG(int, min_output, 16, "Shortest output (tokens; ignore_eos, so exact)");
ABSL_FLAG(int, max_output, 1024, "Longest output (tokens)");
ABSL_FLAG(uint64_t, seed, 1, "Workload seed (lengths and prompt tokens)");
ABSL_FLAG(float, temperature, 0, "Sampling temperature of every request (0: greedy)");
ABSL_FLAG(int, overhead_seqs, 64, "(c): sequences decoding at once");
ABSL_FLAG(int, overhead_prompt, 32, "(c): prompt tokens per sequence");
ABSL_FLAG(int, overhead_decode, 64, "(c): tokens each sequence generates");
ABSL_FLAG(std::string, reference_model, "gemma-4-31b", "Projections: the model whose GPU step times they use");
ABSL_FLAG(double, reference_hbm_gbs, 4800, "Projections: GPU memory bandwidth, GB/s (H200: 4800)");
ABSL_FLAG(double, reference_tflops, 989, "(a) projection: GPU dense bf16 TFLOP/s (H200: 989)");
ABSL_FLAG(double, reference_step_ms, 0,
          "(c): GPU decode step time, ms (0: the reference model's bf16 weight bytes / --reference_hbm_gbs)");
ABSL_FLAG(std::string, tokenizer, TPSERVE_DEFAULT_TOKENIZER, "tokenizer.json the engine detokenizes with");
ABSL_FLAG(bool, json, false, "Also print one JSON object with every number");

namespace tpserve {
namespace {

using json = nlohmann::json;

struct Request {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 0;
};

std::vector<Request> MakeWorkload(int64_t vocab, int n, int min_prompt, int max_prompt, int min_output,
                                  int max_output, int max_model_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Request> w(n);
  for (Request& r : w) {
    const int prompt = std::uniform_int_distribution<int>(min_prompt, max_prompt)(rng);
    const int output = std::uniform_int_distribution<int>(min_output, max_output)(rng);
    r.max_tokens = std::max(1, std::min(output, max_model_len - prompt));
    // Random ids: no two prompts share a prefix block, so the prefix cache stays out of it.
    std::uniform_int_distribution<int32_t> id(3, static_cast<int32_t>(vocab - 1));
    for (int i = 0; i < prompt; ++i) r.prompt.push_back(id(rng));
  }
  return w;
}

// What one mode measured.
struct RunResult {
  double wall_s = 0;
  int64_t generated = 0;
  int64_t steps = 0;
  double mean_batch = 0;  // sequences per step
  int64_t preemptions = 0;
  int64_t computed_tokens = 0;  // prompt, decode and recompute tokens the steps ran
  double coordinator_ms = 0, forward_ms = 0;  // sums over steps
  // KV occupancy integrated over step time, in bytes x ms (continuous mode's waste).
  double live_bytes_ms = 0, used_bytes_ms = 0, contiguous_bytes_ms = 0;
  std::vector<EngineStepStats> per_step;
  bool ok = true;
};

struct Setup {
  StepExecutor* executor;
  const Tokenizer* tokenizer;
  ServingConfig base;
  ModelInfo info;
  std::vector<double> bytes_per_token;  // per KV group
  int32_t block_size;
};

ServeRequest ToServe(const Request& r, const std::string& id, float temperature) {
  ServeRequest s;
  s.request_id = id;
  s.prompt_ids = r.prompt;
  s.params.max_tokens = r.max_tokens;
  s.params.ignore_eos = true;
  s.params.temperature = temperature;
  s.params.seed = 7;
  return s;
}

// Runs `requests` through a fresh ServingEngine (same model and KV memory) in batches of
// `batch` (all at once when batch >= requests): each batch is submitted, then drained to
// its last token before the next starts.
RunResult RunMode(const Setup& setup, int32_t max_num_seqs, const std::vector<Request>& requests, size_t batch,
                  float temperature) {
  RunResult r;
  ServingConfig sc = setup.base;
  sc.scheduler.max_num_seqs = max_num_seqs;
  const int64_t max_len = sc.scheduler.max_model_len;
  // The KV state after step k lasts through step k + 1: weight it by that step's time.
  double live = 0, used = 0, contiguous = 0;
  sc.on_step = [&](const EngineStepStats& st) {
    r.per_step.push_back(st);
    const double dt = st.forward_ms + st.coordinator_ms;
    r.live_bytes_ms += live * dt;
    r.used_bytes_ms += used * dt;
    r.contiguous_bytes_ms += contiguous * dt;
    live = used = contiguous = 0;
    for (size_t g = 0; g < setup.bytes_per_token.size(); ++g) {
      live += st.kv_live_tokens[g] * setup.bytes_per_token[g];
      used += static_cast<double>(st.scheduler.kv_blocks_used[g]) * setup.block_size * setup.bytes_per_token[g];
      contiguous += static_cast<double>(st.scheduler.num_running) * max_len * setup.bytes_per_token[g];
    }
  };
  ServingEngine engine(*setup.executor, *setup.tokenizer, sc, setup.info);
  std::thread loop([&] { engine.Run(); });
  const absl::Time t0 = absl::Now();
  for (size_t first = 0; first < requests.size() && r.ok; first += batch) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = first; i < std::min(requests.size(), first + batch); ++i) {
      auto s = engine.Submit(ToServe(requests[i], "r" + std::to_string(i), temperature));
      if (!s.ok()) {
        std::fprintf(stderr, "serving_bench: %s\n", std::string(s.status().message()).c_str());
        r.ok = false;
        break;
      }
      streams.push_back(*s);
    }
    for (auto& s : streams) {
      OutputEvent e;
      while (s->Next(&e, absl::Minutes(10))) {
        r.generated += static_cast<int64_t>(e.token_ids.size());
        if (e.finish != FinishReason::kNone) {
          if (e.finish != FinishReason::kLength) {
            std::fprintf(stderr, "serving_bench: request finished early: %s\n", e.error.c_str());
            r.ok = false;
          }
          break;
        }
      }
    }
  }
  r.wall_s = absl::ToDoubleSeconds(absl::Now() - t0);
  engine.Shutdown(absl::Seconds(1));
  loop.join();
  r.preemptions = engine.Stats().preemptions;
  r.steps = static_cast<int64_t>(r.per_step.size());
  double seqs = 0;
  for (const EngineStepStats& st : r.per_step) {
    seqs += st.num_seqs;
    r.computed_tokens += st.num_tokens;
    r.coordinator_ms += st.coordinator_ms;
    r.forward_ms += st.forward_ms;
  }
  r.mean_batch = r.steps > 0 ? seqs / r.steps : 0;
  return r;
}

// Median time to sample `rows` logit rows of `vocab` by the workers' rule on the CPU
// (cpu::SampleRows: what a CPU rank 0 runs inside the forward step).
double SamplingMs(int64_t vocab, int rows, float temperature) {
  RowSampling p;
  p.temperature = temperature;
  p.seed = 7;
  std::mt19937 gen(3);
  std::normal_distribution<float> dist(0, 3);
  std::vector<float> logits(static_cast<size_t>(vocab) * rows);
  for (float& x : logits) x = dist(gen);
  const std::vector<RowSampling> params(rows, p);
  const std::vector<int32_t> offsets(rows + 1, 0);
  std::vector<int32_t> out(rows);
  std::vector<double> ms;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<float> work = logits;  // SampleRows applies penalties in place
    const absl::Time t0 = absl::Now();
    cpu::SampleRows(work.data(), rows, vocab, params.data(), offsets.data(), nullptr, nullptr, out.data());
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double Pct(double x) { return 100.0 * x; }

// A run's time on the reference GPU, as a roofline (not measured): each step streams the
// reference model's bf16 weights once plus the KV its sequences hold (a bench group stands
// for the reference group of the same kind, sliding or full), or computes 2 x params FLOPs
// per token, whichever takes longer. Prefill chunks and recomputes count as tokens.
double ProjectedGpuSeconds(const RunResult& r, const ModelConfig& bench, const ModelConfig& ref, double bytes_per_s,
                           double flops) {
  std::vector<double> ref_bytes_per_token(ref.kv_group_windows.size(), 0);
  for (const LayerConfig& l : ref.layers) ref_bytes_per_token[l.kv_group] += 2.0 * l.num_kv_heads * l.head_dim * 2;
  std::vector<double> bytes_per_token;  // per bench group
  for (int32_t w : bench.kv_group_windows) {
    double b = 0;
    for (size_t g = 0; g < ref.kv_group_windows.size(); ++g) {
      if ((ref.kv_group_windows[g] > 0) == (w > 0)) b = ref_bytes_per_token[g];
    }
    bytes_per_token.push_back(b);
  }
  const double weight_bytes = static_cast<double>(ref.ParameterCount()) * 2;
  double seconds = 0;
  for (const EngineStepStats& st : r.per_step) {
    double kv = 0;
    for (size_t g = 0; g < bytes_per_token.size(); ++g) kv += st.kv_live_tokens[g] * bytes_per_token[g];
    seconds += std::max((weight_bytes + kv) / bytes_per_s, 2.0 * ref.ParameterCount() * st.num_tokens / flops);
  }
  return seconds;
}

int32_t SlidingWindow(const ModelConfig& c) {
  return c.kv_group_windows.empty() ? 0 : *std::max_element(c.kv_group_windows.begin(), c.kv_group_windows.end());
}

int Main() {
  auto config = PresetModelConfig(absl::GetFlag(FLAGS_model));
  auto reference = PresetModelConfig(absl::GetFlag(FLAGS_reference_model));
  auto kv_bytes = ParseByteSize(absl::GetFlag(FLAGS_kv_cache_memory));
  auto tokenizer = Tokenizer::FromFile(absl::GetFlag(FLAGS_tokenizer));
  for (const absl::Status& st : {config.status(), reference.status(), kv_bytes.status(), tokenizer.status()}) {
    if (!st.ok()) {
      std::fprintf(stderr, "serving_bench: %s\n", std::string(st.message()).c_str());
      return 2;
    }
  }
  const int window = absl::GetFlag(FLAGS_sliding_window);
  if (window > 0) {
    for (LayerConfig& l : config->layers) {
      if (l.sliding) l.sliding_window = window;
    }
    for (int32_t& w : config->kv_group_windows) {
      if (w > 0) w = window;
    }
  }
  const int tp = absl::GetFlag(FLAGS_tp);
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int max_model_len = absl::GetFlag(FLAGS_max_model_len);
  const float temperature = absl::GetFlag(FLAGS_temperature);
  const std::vector<Request> workload =
      MakeWorkload(config->vocab_size, absl::GetFlag(FLAGS_requests), absl::GetFlag(FLAGS_min_prompt),
                   absl::GetFlag(FLAGS_max_prompt), absl::GetFlag(FLAGS_min_output), absl::GetFlag(FLAGS_max_output),
                   max_model_len, absl::GetFlag(FLAGS_seed));
  const int overhead_seqs = absl::GetFlag(FLAGS_overhead_seqs);
  std::vector<Request> decode_batch(overhead_seqs);
  {
    std::mt19937_64 rng(absl::GetFlag(FLAGS_seed) + 1);
    std::uniform_int_distribution<int32_t> id(3, static_cast<int32_t>(config->vocab_size - 1));
    for (Request& r : decode_batch) {
      for (int i = 0; i < absl::GetFlag(FLAGS_overhead_prompt); ++i) r.prompt.push_back(id(rng));
      r.max_tokens = absl::GetFlag(FLAGS_overhead_decode);
    }
  }

  EngineOptions eo;
  eo.model = absl::GetFlag(FLAGS_model);
  eo.load_format = "dummy";
  eo.device = "cpu";  // the CPU serving numbers of docs/serving.md
  eo.dtype = "auto";
  eo.threads = std::max(1, threads / tp);
  eo.kv_cache_bytes = *kv_bytes;
  eo.max_model_len = max_model_len;
  eo.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  eo.dummy_seed = 1;
  eo.split_kv_by_need = !absl::GetFlag(FLAGS_equal_kv_split);

  json out;
  std::atomic<int> code{0};
  LocalGroup group(tp);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < tp; ++rank) {
    ranks.emplace_back([&, rank] {
      auto comm = group.Rank(rank);
      WorldConfig world{rank, tp, tp, rank, tp, "local"};
      auto engine = StartEngine(*config, eo, world, *comm);
      if (!engine.ok()) {
        if (rank == 0) std::fprintf(stderr, "serving_bench: %s\n", std::string(engine.status().message()).c_str());
        code = 1;
        return;
      }
      if (rank != 0) {
        (void)RunWorkerLoop(*engine->model, *comm);
        return;
      }
      StepExecutor executor(*engine->model, *comm);
      Setup setup{&executor, tokenizer->get(), {}, {}, {}, engine->model->block_size()};
      setup.base.scheduler = SchedulerConfigFor(*engine->model, /*max_num_seqs=*/256, eo.max_num_batched_tokens,
                                                max_model_len);
      setup.base.scheduler.kv_watermark = absl::GetFlag(FLAGS_kv_watermark);
      setup.base.max_queue = 1 << 20;
      setup.info.served_model_name = eo.model;
      double all_groups_per_token = 0;
      for (int64_t b : engine->model->KvBytesPerBlock()) {
        setup.bytes_per_token.push_back(static_cast<double>(b) / setup.block_size);
        all_groups_per_token += static_cast<double>(b) / setup.block_size;
      }
      // Static batching: a contiguous max_model_len slot per sequence, in every group.
      const int64_t static_batch =
          std::max<int64_t>(1, static_cast<int64_t>(*kv_bytes / (max_model_len * all_groups_per_token)));

      int64_t prompt_tokens = 0, output_tokens = 0;
      for (const Request& r : workload) {
        prompt_tokens += static_cast<int64_t>(r.prompt.size());
        output_tokens += r.max_tokens;
      }
      std::printf("serving_bench: %s (%.1fM params, dummy weights), sliding window %d, tp %d, %d CPU threads\n",
                  eo.model.c_str(), config->ParameterCount() / 1e6, SlidingWindow(*config), tp, threads);
      std::printf("workload: %zu requests (seed %llu), prompts %d-%d, outputs %d-%d tokens (ignore_eos): "
                  "%lld prompt + %lld output tokens\n",
                  workload.size(), static_cast<unsigned long long>(absl::GetFlag(FLAGS_seed)),
                  absl::GetFlag(FLAGS_min_prompt), absl::GetFlag(FLAGS_max_prompt), absl::GetFlag(FLAGS_min_output),
                  absl::GetFlag(FLAGS_max_output), static_cast<long long>(prompt_tokens),
                  static_cast<long long>(output_tokens));
      std::string blocks;
      for (size_t g = 0; g < engine->model->num_kv_blocks().size(); ++g) {
        blocks += (g ? ", " : "") + std::string(engine->config.kv_group_windows[g] ? "window " : "full ") +
                  std::to_string(engine->model->num_kv_blocks()[g]) + " blocks";
      }
      std::printf("KV cache: %s per rank, max_model_len %d, block %d, %s split: %s; static batch %lld\n\n",
                  absl::GetFlag(FLAGS_kv_cache_memory).c_str(), max_model_len, setup.block_size,
                  eo.split_kv_by_need ? "by-need" : "equal", blocks.c_str(), static_cast<long long>(static_batch));

      RunResult cont = RunMode(setup, absl::GetFlag(FLAGS_max_num_seqs), workload, workload.size(), temperature);
      RunResult stat = RunMode(setup, static_cast<int32_t>(static_batch), workload, static_batch, temperature);
      RunResult dec = RunMode(setup, overhead_seqs, decode_batch, decode_batch.size(), temperature);
      executor.Shutdown();
      if (!cont.ok || !stat.ok || !dec.ok) {
        code = 1;
        return;
      }

      // (a)
      auto tok_s = [](const RunResult& r) { return r.generated / r.wall_s; };
      std::printf("(a) throughput     %12s %12s %10s\n", "continuous", "static", "ratio");
      std::printf("generated tokens/s %12.1f %12.1f %9.2fx\n", tok_s(cont), tok_s(stat), tok_s(cont) / tok_s(stat));
      std::printf("wall time, s       %12.1f %12.1f\n", cont.wall_s, stat.wall_s);
      std::printf("engine steps       %12lld %12lld %9.2fx\n", static_cast<long long>(cont.steps),
                  static_cast<long long>(stat.steps), static_cast<double>(stat.steps) / cont.steps);
      std::printf("mean batch (seqs)  %12.1f %12.1f %9.2fx\n", cont.mean_batch, stat.mean_batch,
                  cont.mean_batch / stat.mean_batch);
      std::printf("preemptions        %12lld %12lld\n", static_cast<long long>(cont.preemptions),
                  static_cast<long long>(stat.preemptions));
      std::printf("tokens computed    %12lld %12lld  (prompts + outputs + recomputes after preemption)\n",
                  static_cast<long long>(cont.computed_tokens), static_cast<long long>(stat.computed_tokens));
      const double hbm = absl::GetFlag(FLAGS_reference_hbm_gbs) * 1e9;
      const double flops = absl::GetFlag(FLAGS_reference_tflops) * 1e12;
      const double gpu_cont = ProjectedGpuSeconds(cont, *config, *reference, hbm, flops);
      const double gpu_stat = ProjectedGpuSeconds(stat, *config, *reference, hbm, flops);
      std::printf("projected tokens/s %12.0f %12.0f %9.2fx  (not measured: %s on one GPU, roofline of each step)\n\n",
                  cont.generated / gpu_cont, stat.generated / gpu_stat, gpu_stat / gpu_cont,
                  absl::GetFlag(FLAGS_reference_model).c_str());

      // (b)
      const double waste = 1 - cont.live_bytes_ms / cont.used_bytes_ms;
      const double contiguous_waste = 1 - cont.live_bytes_ms / cont.contiguous_bytes_ms;
      std::printf("(b) KV waste in continuous mode, time-averaged, all groups weighted by bytes per token:\n");
      std::printf("paged (blocks of %d)             %6.2f%%\n", setup.block_size, Pct(waste));
      std::printf("contiguous max_model_len slots   %6.2f%%  (same sequences)\n\n", Pct(contiguous_waste));

      // (c) Steps where every sequence decodes.
      double coord = 0, fwd = 0;
      int64_t n = 0;
      for (const EngineStepStats& st : dec.per_step) {
        if (st.num_seqs == overhead_seqs && st.num_tokens == overhead_seqs) {
          coord += st.coordinator_ms;
          fwd += st.forward_ms;
          ++n;
        }
      }
      coord /= std::max<int64_t>(n, 1);
      fwd /= std::max<int64_t>(n, 1);
      const double ref_weight_bytes = static_cast<double>(reference->ParameterCount()) * 2;  // bf16
      double ref_step_ms = absl::GetFlag(FLAGS_reference_step_ms);
      if (ref_step_ms <= 0) ref_step_ms = ref_weight_bytes / (absl::GetFlag(FLAGS_reference_hbm_gbs) * 1e9) * 1e3;
      const double sample_here = SamplingMs(engine->config.vocab_size, overhead_seqs, temperature);
      const double sample_ref = SamplingMs(reference->vocab_size, overhead_seqs, temperature);
      std::printf("(c) coordinator overhead at %d decoding sequences (%lld steps measured, %lld preemptions)\n",
                  overhead_seqs, static_cast<long long>(n), static_cast<long long>(dec.preemptions));
      std::printf("%-34s %16s %14s %8s\n", "", "coordinator ms", "forward ms", "share");
      auto row = [](const char* what, double c, double f) {
        std::printf("%-34s %16.3f %14.3f %7.2f%%\n", what, c, f, Pct(c / (c + f)));
      };
      row("measured, per step", coord, fwd);
      row("whole continuous run (a), per step", cont.coordinator_ms / cont.steps, cont.forward_ms / cont.steps);
      std::printf("projection (not measured): %s on one GPU, decode step %.2f ms = %.1f GB bf16 weights / %.0f GB/s\n",
                  absl::GetFlag(FLAGS_reference_model).c_str(), ref_step_ms, ref_weight_bytes / 1e9,
                  absl::GetFlag(FLAGS_reference_hbm_gbs));
      row("  this coordinator", coord, ref_step_ms);
      std::printf("  (sampling, inside the forward on a CPU rank 0: %d rows, %.3f ms at vocab %lld, %.3f ms at vocab "
                  "%lld)\n", overhead_seqs,
                  sample_here, static_cast<long long>(engine->config.vocab_size), sample_ref,
                  static_cast<long long>(reference->vocab_size));

      out = {{"model", eo.model},
             {"params", config->ParameterCount()},
             {"sliding_window", SlidingWindow(*config)},
             {"tp", tp},
             {"threads", threads},
             {"kv_cache_bytes", *kv_bytes},
             {"kv_blocks", engine->model->num_kv_blocks()},
             {"kv_split", eo.split_kv_by_need ? "by_need" : "equal"},
             {"max_model_len", max_model_len},
             {"requests", workload.size()},
             {"seed", absl::GetFlag(FLAGS_seed)},
             {"prompt_tokens", prompt_tokens},
             {"output_tokens", output_tokens},
             {"static_batch", static_batch}};
      auto mode = [&](const RunResult& r) {
        return json{{"tokens_per_s", tok_s(r)},       {"wall_s", r.wall_s},         {"steps", r.steps},
                    {"mean_batch", r.mean_batch},       {"generated", r.generated},   {"preemptions", r.preemptions},
                    {"computed_tokens", r.computed_tokens}};
      };
      out["continuous"] = mode(cont);
      out["static"] = mode(stat);
      out["throughput_ratio"] = tok_s(cont) / tok_s(stat);
      out["steps_ratio"] = static_cast<double>(stat.steps) / cont.steps;
      out["projected_gpu_throughput_ratio"] = gpu_stat / gpu_cont;
      out["projected_gpu_tokens_per_s"] = {{"continuous", cont.generated / gpu_cont},
                                           {"static", stat.generated / gpu_stat}};
      out["kv_waste"] = waste;
      out["kv_waste_contiguous"] = contiguous_waste;
      out["overhead"] = {{"seqs", overhead_seqs},
                         {"steps_measured", n},
                         {"preemptions", dec.preemptions},
                         {"coordinator_ms_per_step", coord},
                         {"forward_ms_per_step", fwd},
                         {"share", coord / (coord + fwd)},
                         {"reference_model", absl::GetFlag(FLAGS_reference_model)},
                         {"reference_step_ms", ref_step_ms},
                         {"sampling_ms", sample_here},
                         {"sampling_ms_reference_vocab", sample_ref},
                         {"continuous_run_share", cont.coordinator_ms / (cont.coordinator_ms + cont.forward_ms)},
                         {"projected_share", coord / (coord + ref_step_ms)}};
    });
  }
  for (auto& t : ranks) t.join();
  if (code == 0 && absl::GetFlag(FLAGS_json)) std::printf("%s\n", out.dump().c_str());
  return code.load();
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tpserve::Main();
}
