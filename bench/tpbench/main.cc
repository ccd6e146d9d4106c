// tpbench: the serving benchmark client.
//   tpbench run --target grpc://localhost:50051 --concurrency 1,2,4,8,16 --out results/run1
//   tpbench run --target http://localhost:8000/v1 --api chat --request-rate 1,2,4 --out ...
//   tpbench report results/run1 results/run2 --out results/report
//   tpbench compare --target http://router:8080/v1 --models A,B --router-config r.json --out results/ab
// Method and metric definitions: docs/bench.md. Tested by tests/tpbench_test.sh.
#include <sys/stat.h>

#include <algorithm>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/tpbench/compare.h"
#include "bench/tpbench/grpc_target.h"
#include "bench/tpbench/metrics.h"
#include "bench/tpbench/openai_target.h"
#include "bench/tpbench/record.h"
#include "bench/tpbench/report.h"
#include "bench/tpbench/runner.h"
#include "bench/tpbench/workload.h"
#include "coordinator/api/process_info.h"
#include "coordinator/text/tokenizer.h"

// Target.
ABSL_FLAG(std::string, target, "", "grpc://HOST:PORT (tpserve) or an OpenAI-compatible base URL, http(s)://HOST[:PORT]/v1");
ABSL_FLAG(std::string, api, "completions", "completions (prompt text or token ids) or chat (one user message)");
ABSL_FLAG(std::string, model, "", "Model name sent in each request (empty: the server's default)");
ABSL_FLAG(bool, reuse_connections, true, "HTTP: keep connections open between requests (no handshake in TTFT)");
ABSL_FLAG(std::string, api_key_env, "", "Name of the environment variable holding the API key (e.g. GROQ_API_KEY)");
// Workload.
ABSL_FLAG(std::string, dataset, "random", "random, jsonl or sharegpt");
ABSL_FLAG(std::string, dataset_path, "", "The jsonl or sharegpt file");
ABSL_FLAG(int, num_prompts, 200, "Prompts prepared (cycled through)");
ABSL_FLAG(int, input_len, 128, "random: prompt tokens");
ABSL_FLAG(int, output_len, 128, "random: output tokens (max_tokens); jsonl: the default");
ABSL_FLAG(double, range_ratio, 0.0, "random: lengths drawn from [len*(1-r), len*(1+r)]");
ABSL_FLAG(int, fixed_output_len, 0, "jsonl/sharegpt: override every request's output length");
ABSL_FLAG(std::string, tokenizer, "", "tokenizer.json: exact random prompts as token ids, and token counts of files");
ABSL_FLAG(bool, ignore_eos, false, "Ask the server to ignore EOS so output lengths are exact (tpserve, vLLM)");
ABSL_FLAG(double, temperature, 0.0, "Sampling temperature sent with each request; negative: the server's default");
// Load.
ABSL_FLAG(std::string, concurrency, "",
          "Closed-loop levels: clients sending back to back (default 1,2,4,8,16; none when only --request-rate "
          "is given)");
ABSL_FLAG(std::string, request_rate, "", "Open-loop levels in requests/s (Poisson arrivals); replaces --concurrency unless both are given");
ABSL_FLAG(int, rounds, 10, "Rounds per level (closed loop: requests per client)");
ABSL_FLAG(int, round_size, 10, "Open loop: arrivals per round");
ABSL_FLAG(int, warmup, 1, "Warm-up requests before the levels, reported apart");
ABSL_FLAG(double, timeout, 120, "Per-request timeout in seconds");
ABSL_FLAG(uint64_t, seed, 0, "Seed for prompts and arrival times");
ABSL_FLAG(bool, progress, true, "Progress on stderr");
// Records.
ABSL_FLAG(std::string, out, "", "Directory for run.json, requests.jsonl and summary.json (run) or report.md (report)");
ABSL_FLAG(std::string, label, "", "Run label in reports (default: from api, tp and nodes)");
ABSL_FLAG(std::string, weights_source, "", "Checkpoint or source of the weights (default: what the server says)");
ABSL_FLAG(std::string, dtype, "", "The model's dtype, e.g. bfloat16 (default: what the server says)");
ABSL_FLAG(std::string, quantization, "",
          "How the weights are held, e.g. q4_k+q6_k, fp8, int4-awq (default: what the server says: tpserve's ModelInfo "
          "or /metrics)");
ABSL_FLAG(std::string, kv_cache_dtype, "",
          "The KV cache's dtype, e.g. fp8 (default: what the server says: tpserve's ModelInfo or /metrics, vLLM's "
          "/metrics)");
ABSL_FLAG(std::string, gpu_model, "", "GPU model (default: what the server says, else unknown)");
ABSL_FLAG(int, gpu_count, -1, "GPU count (default: what the server says)");
ABSL_FLAG(std::string, driver_version, "", "GPU driver version (default: what the server says)");
ABSL_FLAG(std::string, cuda_version, "", "CUDA version (default: what the server says)");
ABSL_FLAG(std::string, kernels, "",
          "The server's kernel configuration, e.g. \"cuda: tuned+pdl, CUDA graphs\" (default: what the server says)");
ABSL_FLAG(int, nodes, 0, "Nodes the server spans (default: distinct rank hosts the server reports, else 1)");
ABSL_FLAG(int, tp_size, 0, "Tensor-parallel size (default: what the server says)");
ABSL_FLAG(int, pp_size, 0, "Pipeline-parallel size, stages (default: what the server says)");
ABSL_FLAG(int, max_model_len, 0, "Recorded, and prompts that do not fit are skipped (default: the server's)");
ABSL_FLAG(int, max_num_seqs, 0, "Recorded (default: what the server says)");
ABSL_FLAG(double, load_time_s, -1, "Server load time measured by the caller (e.g. bench/scaling.sh)");
ABSL_FLAG(std::string, meta, "", "Extra key=value pairs for the run record, comma-separated");
ABSL_FLAG(bool, fail_on_error, false, "Exit 3 when any request failed or timed out");
// SLOs (goodput).
ABSL_FLAG(double, goodput_ttft_ms, 0, "SLO: TTFT at most this (0 = none)");
ABSL_FLAG(double, goodput_tpot_ms, 0, "SLO: TPOT at most this (0 = none)");
ABSL_FLAG(double, goodput_e2e_ms, 0, "SLO: end-to-end latency at most this (0 = none)");
// Compare.
ABSL_FLAG(std::string, models, "", "compare: the two models, A,B (sent to --target, or to --target-a / --target-b)");
ABSL_FLAG(std::string, model_a, "", "compare: side A's model (instead of --models)");
ABSL_FLAG(std::string, model_b, "", "compare: side B's model (instead of --models)");
ABSL_FLAG(std::string, target_a, "", "compare: side A's target (default: --target)");
ABSL_FLAG(std::string, target_b, "", "compare: side B's target (default: --target)");
ABSL_FLAG(std::string, router_config, "",
          "compare: a `tpserve router` config whose price_per_mtok prices the backend that answered each request");
ABSL_FLAG(std::string, prices, "", "compare: MODEL=INPUT:OUTPUT USD per million tokens, comma-separated (over --router-config)");
// Report.
ABSL_FLAG(std::string, baselines, "", "Cloud baselines JSON for the report (e.g. bench/baselines/cloud.json)");

namespace tpserve::bench {
namespace {

int Fail(const std::string& message, int code = 2) {
  std::fprintf(stderr, "tpbench: %s\n", message.c_str());
  return code;
}

absl::StatusOr<std::vector<int>> ParseInts(const std::string& flag, const std::string& s) {
  std::vector<int> v;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipWhitespace())) {
    int x;
    if (!absl::SimpleAtoi(part, &x)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": \"", std::string(part), "\" is not an integer"));
    }
    v.push_back(x);
  }
  return v;
}

absl::StatusOr<std::vector<double>> ParseDoubles(const std::string& flag, const std::string& s) {
  std::vector<double> v;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipWhitespace())) {
    double x;
    if (!absl::SimpleAtod(part, &x)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": \"", std::string(part), "\" is not a number"));
    }
    v.push_back(x);
  }
  return v;
}

SloSpec SloFromFlags() {
  SloSpec slo;
  slo.ttft_ms = absl::GetFlag(FLAGS_goodput_ttft_ms);
  slo.tpot_ms = absl::GetFlag(FLAGS_goodput_tpot_ms);
  slo.e2e_ms = absl::GetFlag(FLAGS_goodput_e2e_ms);
  return slo;
}

absl::StatusOr<std::unique_ptr<Target>> MakeTarget(const std::string& target, const std::string& model,
                                                   bool capture_output) {
  const std::string api = absl::GetFlag(FLAGS_api);
  if (api != "completions" && api != "chat") {
    return absl::InvalidArgumentError(absl::StrCat("--api must be completions or chat, got \"", api, "\""));
  }
  if (target.empty()) return absl::InvalidArgumentError("--target is required (grpc://HOST:PORT or http(s)://.../v1)");
  absl::string_view rest = target;
  if (absl::ConsumePrefix(&rest, "grpc://")) {
    return MakeGrpcTarget(
        {.address = std::string(rest), .model = model, .chat = api == "chat", .capture_output = capture_output});
  }
  if (!absl::StartsWith(target, "http://") && !absl::StartsWith(target, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--target \"", target, "\" must start with grpc://, http:// or https://"));
  }
  OpenAiTargetOptions o;
  o.base_url = target;
  o.chat = api == "chat";
  o.model = model;
  o.capture_output = capture_output;
  o.reuse_connections = absl::GetFlag(FLAGS_reuse_connections);
  const std::string key_env = absl::GetFlag(FLAGS_api_key_env);
  if (!key_env.empty()) {
    const char* key = std::getenv(key_env.c_str());
    if (key == nullptr || *key == '\0') {
      return absl::FailedPreconditionError(
          absl::StrCat("--api-key-env ", key_env, ": the environment variable is not set; export it or drop the flag"));
    }
    o.api_key = key;
  }
  return MakeOpenAiTarget(o);
}

WorkloadOptions WorkloadFromFlags(int max_model_len) {
  WorkloadOptions w;
  w.kind = absl::GetFlag(FLAGS_dataset);
  w.path = absl::GetFlag(FLAGS_dataset_path);
  w.num_prompts = absl::GetFlag(FLAGS_num_prompts);
  w.input_len = absl::GetFlag(FLAGS_input_len);
  w.output_len = absl::GetFlag(FLAGS_output_len);
  w.range_ratio = absl::GetFlag(FLAGS_range_ratio);
  w.fixed_output_len = absl::GetFlag(FLAGS_fixed_output_len);
  w.max_model_len = max_model_len;
  w.seed = absl::GetFlag(FLAGS_seed);
  return w;
}

// The prompts, with --ignore-eos and --temperature applied.
absl::StatusOr<std::vector<BenchRequest>> MakeWorkloadFromFlags(const WorkloadOptions& w) {
  std::unique_ptr<Tokenizer> tokenizer;
  if (!absl::GetFlag(FLAGS_tokenizer).empty()) {
    auto t = Tokenizer::FromFile(absl::GetFlag(FLAGS_tokenizer));
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("--tokenizer: ", t.status().message()));
    tokenizer = *std::move(t);
  }
  absl::StatusOr<std::vector<BenchRequest>> workload = MakeWorkload(w, tokenizer.get());
  if (!workload.ok()) return workload.status();
  for (BenchRequest& r : *workload) {
    r.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
    if (absl::GetFlag(FLAGS_temperature) >= 0) r.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  }
  return workload;
}

void FillEnvironment(Target& target, RunRecord* run) {
  absl::StatusOr<ServerInfo> info = target.Info();
  ServerInfo i = info.ok() ? *info : ServerInfo{};
  auto pick = [](const std::string& flag, const std::string& server, const std::string& fallback) {
    return !flag.empty() ? flag : !server.empty() ? server : fallback;
  };
  run->model = pick(absl::GetFlag(FLAGS_model), i.model, "unknown");
  run->engine_version = pick("", i.engine_version, "unknown");
  run->weights_source = pick(absl::GetFlag(FLAGS_weights_source), i.weights, "unknown");
  run->dtype = pick(absl::GetFlag(FLAGS_dtype), i.dtype, "unknown");
  run->quantization = pick(absl::GetFlag(FLAGS_quantization), i.quantization, "unknown");
  run->kv_cache_dtype = pick(absl::GetFlag(FLAGS_kv_cache_dtype), i.kv_cache_dtype, "unknown");
  run->gpu_model = pick(absl::GetFlag(FLAGS_gpu_model), i.device, "unknown");
  run->driver_version = pick(absl::GetFlag(FLAGS_driver_version), i.driver_version, "unknown");
  run->cuda_version = pick(absl::GetFlag(FLAGS_cuda_version), i.cuda_version, "unknown");
  run->kernels = pick(absl::GetFlag(FLAGS_kernels), i.kernels, "unknown");
  run->speculative_config = info.ok() ? i.speculative_config : "";
  run->gpu_count = absl::GetFlag(FLAGS_gpu_count) >= 0 ? absl::GetFlag(FLAGS_gpu_count) : info.ok() ? i.device_count : -1;
  run->tp_size = absl::GetFlag(FLAGS_tp_size) > 0 ? absl::GetFlag(FLAGS_tp_size) : i.tp_size;
  run->pp_size = absl::GetFlag(FLAGS_pp_size) > 0 ? absl::GetFlag(FLAGS_pp_size) : i.pp_size;
  run->pipeline_stages = i.pipeline_stages;
  run->pipeline_micro_batches = i.pipeline_micro_batches;
  run->max_model_len = absl::GetFlag(FLAGS_max_model_len) > 0 ? absl::GetFlag(FLAGS_max_model_len) : i.max_model_len;
  run->max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs) > 0 ? absl::GetFlag(FLAGS_max_num_seqs) : i.max_num_seqs;
  std::vector<std::string> hosts = i.hosts;
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  run->nodes = absl::GetFlag(FLAGS_nodes) > 0 ? absl::GetFlag(FLAGS_nodes) : std::max<int>(1, hosts.size());
  if (!i.hosts.empty()) run->extra["rank_hosts"] = absl::StrJoin(i.hosts, ",");
  if (!info.ok()) run->extra["server_info"] = std::string(info.status().message());
}

int RunCommand() {
  absl::StatusOr<std::unique_ptr<Target>> target =
      MakeTarget(absl::GetFlag(FLAGS_target), absl::GetFlag(FLAGS_model), /*capture_output=*/false);
  if (!target.ok()) return Fail(std::string(target.status().message()));
  const std::string out_dir = absl::GetFlag(FLAGS_out);
  if (out_dir.empty()) return Fail("--out DIR is required: run.json and requests.jsonl go there");

  LoadOptions load;
  absl::StatusOr<std::vector<double>> rates = ParseDoubles("request-rate", absl::GetFlag(FLAGS_request_rate));
  if (!rates.ok()) return Fail(std::string(rates.status().message()));
  load.request_rates = *rates;
  // Given explicitly (even as the default's value), --concurrency runs beside --request-rate.
  const std::string concurrency = absl::GetFlag(FLAGS_concurrency);
  if (load.request_rates.empty() || !concurrency.empty()) {
    absl::StatusOr<std::vector<int>> c = ParseInts("concurrency", concurrency.empty() ? "1,2,4,8,16" : concurrency);
    if (!c.ok()) return Fail(std::string(c.status().message()));
    load.concurrencies = *c;
  } else {
    load.concurrencies.clear();
  }
  load.rounds = absl::GetFlag(FLAGS_rounds);
  load.round_size = absl::GetFlag(FLAGS_round_size);
  load.warmup_requests = absl::GetFlag(FLAGS_warmup);
  load.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout));
  load.seed = absl::GetFlag(FLAGS_seed);
  load.progress = absl::GetFlag(FLAGS_progress);
  if (absl::Status s = load.Validate(); !s.ok()) return Fail(std::string(s.message()));

  RunRecord run;
  run.run_id = Rfc3339(absl::Now());
  run.target = (*target)->Name();
  const bool grpc = absl::StartsWith(absl::GetFlag(FLAGS_target), "grpc://");
  run.api = grpc ? (absl::GetFlag(FLAGS_api) == "chat" ? "tpserve-grpc-chat" : "tpserve-grpc")
                 : absl::StrCat("openai-", absl::GetFlag(FLAGS_api));
  run.tpbench_version = absl::StrCat("tpbench ", EngineVersion());
  FillEnvironment(**target, &run);
  run.load_time_s = absl::GetFlag(FLAGS_load_time_s);
  run.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  for (absl::string_view kv : absl::StrSplit(absl::GetFlag(FLAGS_meta), ',', absl::SkipWhitespace())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first.empty() || p.second.empty()) return Fail(absl::StrCat("--meta: \"", std::string(kv), "\" is not key=value"));
    run.extra[p.first] = p.second;
  }
  if (!absl::GetFlag(FLAGS_label).empty()) run.extra["label"] = absl::GetFlag(FLAGS_label);

  WorkloadOptions w = WorkloadFromFlags(static_cast<int>(run.max_model_len));
  absl::StatusOr<std::vector<BenchRequest>> workload = MakeWorkloadFromFlags(w);
  if (!workload.ok()) return Fail(std::string(workload.status().message()));
  run.workload = DescribeWorkload(w);

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Fail(absl::StrCat("--out ", out_dir, ": ", ec.message()));
  std::ofstream jsonl(absl::StrCat(out_dir, "/requests.jsonl"), std::ios::trunc);
  if (!jsonl) return Fail(absl::StrCat("cannot write ", out_dir, "/requests.jsonl"));
  std::vector<RequestRecord> records;
  auto write_run = [&] {
    std::ofstream f(absl::StrCat(out_dir, "/run.json"), std::ios::trunc);
    f << ToJson(run).dump(2) << "\n";
    return static_cast<bool>(f);
  };
  write_run();  // a run that dies early still says what it was

  std::fprintf(stderr, "tpbench: %s (%s), %s; %s\n", run.target.c_str(), run.api.c_str(), run.model.c_str(),
               run.workload.c_str());
  Runner runner(**target, *std::move(workload), load, [&](const RequestRecord& r) {
    jsonl << ToJson(r).dump() << "\n" << std::flush;
    records.push_back(r);
  });
  absl::Status status = runner.Run(&run);
  if (!write_run()) return Fail(absl::StrCat("cannot write ", out_dir, "/run.json"), 1);
  if (!status.ok()) return Fail(std::string(status.message()), 1);

  const std::vector<LevelSummary> levels = SummarizeLevels(run, records, SloFromFlags());
  // Behind a router that spread the requests over several backends: each level's share per backend.
  const bool split = AnsweringBackends(records).size() > 1;
  const std::vector<LevelSummary> by_backend =
      split ? SummarizeByBackend(run, records, SloFromFlags()) : std::vector<LevelSummary>();
  nlohmann::json summary = nlohmann::json::array();
  for (const LevelSummary& l : levels) {
    nlohmann::json j = ToJson(l);
    if (split) {
      j["by_backend"] = nlohmann::json::array();
      for (const LevelSummary& b : by_backend) {
        if (b.concurrency == l.concurrency && b.request_rate == l.request_rate) j["by_backend"].push_back(ToJson(b));
      }
    }
    summary.push_back(std::move(j));
  }
  std::ofstream(absl::StrCat(out_dir, "/summary.json"), std::ios::trunc) << summary.dump(2) << "\n";
  std::printf("%s", FormatLevelTable(levels).c_str());
  if (split) std::printf("\nby backend (x-tpserve-backend):\n%s", FormatBackendTable(by_backend).c_str());
  std::printf("records: %s/requests.jsonl, %s/run.json\n", out_dir.c_str(), out_dir.c_str());

  bool any_failed = false;
  for (const RequestRecord& r : records) any_failed |= !r.outcome.success;
  if (any_failed && absl::GetFlag(FLAGS_fail_on_error)) return Fail("some requests failed (--fail-on-error)", 3);
  return 0;
}

int ReportCommand(const std::vector<std::string>& dirs) {
  if (dirs.empty()) return Fail("report: give one or more run directories (each with run.json and requests.jsonl)");
  const std::string out_dir = absl::GetFlag(FLAGS_out);
  if (out_dir.empty()) return Fail("report: --out DIR is required");
  std::vector<ReportRun> runs;
  for (const std::string& dir : dirs) {
    absl::StatusOr<ReportRun> run = LoadReportRun(dir);
    if (!run.ok()) return Fail(std::string(run.status().message()));
    runs.push_back(*std::move(run));
  }
  std::vector<Baseline> baselines;
  if (!absl::GetFlag(FLAGS_baselines).empty()) {
    absl::StatusOr<std::vector<Baseline>> b = ReadBaselines(absl::GetFlag(FLAGS_baselines));
    if (!b.ok()) return Fail(std::string(b.status().message()));
    baselines = *std::move(b);
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Fail(absl::StrCat("--out ", out_dir, ": ", ec.message()));
  absl::StatusOr<std::string> md = WriteReport(runs, baselines, SloFromFlags(), out_dir);
  if (!md.ok()) return Fail(std::string(md.status().message()), 1);
  std::printf("report: %s/report.md (%zu runs)\n", out_dir.c_str(), runs.size());
  return 0;
}


// One side of `tpbench compare`: its load (each prompt once) with its output kept, written as a
// run directory (OUT/a, OUT/b) that `tpbench report` also reads.
absl::Status RunCompareSide(CompareSide& side, const std::vector<BenchRequest>& workload, const LoadOptions& load,
                            int concurrency, const std::string& dir) {
  absl::StatusOr<std::unique_ptr<Target>> target = MakeTarget(side.target, side.model, /*capture_output=*/true);
  if (!target.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("side ", side.name, ": ", target.status().message()));
  }
  RunRecord& run = side.run;
  run.run_id = Rfc3339(absl::Now());
  run.target = (*target)->Name();
  run.api = absl::StartsWith(side.target, "grpc://") ? (absl::GetFlag(FLAGS_api) == "chat" ? "tpserve-grpc-chat" : "tpserve-grpc")
                                                    : absl::StrCat("openai-", absl::GetFlag(FLAGS_api));
  run.model = side.model.empty() ? "unknown" : side.model;
  run.tpbench_version = absl::StrCat("tpbench ", EngineVersion());
  run.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  run.extra["label"] = absl::StrCat("compare ", side.name, ": ", run.model);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("--out: cannot create ", dir, ": ", ec.message()));
  std::ofstream jsonl(absl::StrCat(dir, "/requests.jsonl"), std::ios::trunc);
  if (!jsonl) return absl::PermissionDeniedError(absl::StrCat("cannot write ", dir, "/requests.jsonl"));
  std::fprintf(stderr, "tpbench compare: side %s, %s at %s\n", side.name.c_str(), run.model.c_str(), run.target.c_str());
  Runner runner(**target, workload, load, [&](const RequestRecord& r) {
    jsonl << ToJson(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n" << std::flush;
    side.records.push_back(r);
  });
  const absl::Status status = runner.RunEachOnce(concurrency, &run);
  std::ofstream(absl::StrCat(dir, "/run.json"), std::ios::trunc) << ToJson(run).dump(2) << "\n";
  return status;
}

int CompareCommand() {
  const std::string out_dir = absl::GetFlag(FLAGS_out);
  if (out_dir.empty()) return Fail("compare: --out DIR is required (compare.md, compare.json, plots and records go there)");
  CompareSide a, b;
  a.name = "A";
  b.name = "B";
  const std::string models = absl::GetFlag(FLAGS_models);
  if (!models.empty()) {
    if (!absl::GetFlag(FLAGS_model_a).empty() || !absl::GetFlag(FLAGS_model_b).empty()) {
      return Fail("compare: give --models A,B or --model-a/--model-b, not both");
    }
    const std::vector<std::string> names = absl::StrSplit(models, ',');
    if (names.size() != 2 || names[0].empty() || names[1].empty()) {
      return Fail(absl::StrCat("compare: --models \"", models, "\" must name exactly two models, A,B"));
    }
    a.model = names[0];
    b.model = names[1];
  } else {
    a.model = absl::GetFlag(FLAGS_model_a);
    b.model = absl::GetFlag(FLAGS_model_b);
  }
  a.target = absl::GetFlag(FLAGS_target_a).empty() ? absl::GetFlag(FLAGS_target) : absl::GetFlag(FLAGS_target_a);
  b.target = absl::GetFlag(FLAGS_target_b).empty() ? absl::GetFlag(FLAGS_target) : absl::GetFlag(FLAGS_target_b);
  if (a.target.empty() || b.target.empty()) {
    return Fail("compare: give --target (both sides) or --target-a and --target-b");
  }
  if (!absl::GetFlag(FLAGS_model).empty()) return Fail("compare: use --models A,B or --model-a/--model-b, not --model");
  if (a.target == b.target && a.model == b.model) {
    return Fail("compare: both sides are the same target and model; give two models (--models A,B) or two targets");
  }
  if (absl::GetFlag(FLAGS_temperature) != 0) {
    return Fail("compare: outputs are compared under greedy sampling; --temperature must be 0 (the default)");
  }
  const std::string concurrency_flag = absl::GetFlag(FLAGS_concurrency);
  int concurrency = 1;
  if (!concurrency_flag.empty() && (!absl::SimpleAtoi(concurrency_flag, &concurrency) || concurrency < 1 ||
                                    concurrency > 4096)) {
    return Fail(absl::StrCat("compare: --concurrency \"", concurrency_flag,
                             "\" must be one number in [1, 4096] (compare runs one level)"));
  }
  if (!absl::GetFlag(FLAGS_request_rate).empty()) return Fail("compare: --request-rate is not supported (closed loop only)");

  // Prices: --prices by model, else the router config's price of the backend that answered.
  absl::StatusOr<std::map<std::string, Price>> prices = ParsePrices(absl::GetFlag(FLAGS_prices));
  if (!prices.ok()) return Fail(std::string(prices.status().message()));
  for (const auto& [model, price] : *prices) {
    if (model != a.model && model != b.model) {
      return Fail(absl::StrCat("--prices: \"", model, "\" is neither side's model (", a.model, ", ", b.model, ")"));
    }
  }
  auto book = std::make_shared<PriceBook>();
  if (const std::string path = absl::GetFlag(FLAGS_router_config); !path.empty()) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Fail(absl::StrCat("--router-config: cannot open ", path));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    absl::StatusOr<PriceBook> parsed = PriceBook::FromRouterConfig(text);
    if (!parsed.ok()) return Fail(absl::StrCat("--router-config ", path, ": ", parsed.status().message()));
    *book = *std::move(parsed);
  }
  for (CompareSide* side : {&a, &b}) {
    if (auto it = prices->find(side->model); it != prices->end()) {
      side->price_source = "--prices";
      side->price_of = [price = it->second](const RequestRecord&) { return std::optional<Price>(price); };
    } else if (!book->empty()) {
      side->price_source = "the router config (price_per_mtok of the backend that answered)";
      side->price_of = [book, model = side->model, target = side->target](const RequestRecord& r) {
        return book->Lookup(model, r.outcome.backend.empty() ? target : r.outcome.backend);
      };
    } else {
      side->price_source = "nowhere (no --prices or --router-config)";
    }
  }

  WorkloadOptions w = WorkloadFromFlags(absl::GetFlag(FLAGS_max_model_len));
  absl::StatusOr<std::vector<BenchRequest>> workload = MakeWorkloadFromFlags(w);
  if (!workload.ok()) return Fail(std::string(workload.status().message()));
  for (BenchRequest& r : *workload) r.temperature = 0.0f;
  LoadOptions load;
  load.concurrencies = {concurrency};
  load.rounds = 1;
  load.warmup_requests = absl::GetFlag(FLAGS_warmup);
  load.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout));
  load.seed = absl::GetFlag(FLAGS_seed);
  load.progress = absl::GetFlag(FLAGS_progress);
  if (absl::Status s = load.Validate(); !s.ok()) return Fail(std::string(s.message()));

  // The sides run one after the other, so neither's load slows the other's.
  for (CompareSide* side : {&a, &b}) {
    const std::string dir = absl::StrCat(out_dir, "/", absl::AsciiStrToLower(side->name));
    if (absl::Status s = RunCompareSide(*side, *workload, load, concurrency, dir); !s.ok()) {
      return Fail(std::string(s.message()), absl::IsInvalidArgument(s) ? 2 : 1);
    }
  }
  CompareInput input{.api = a.run.api, .workload = DescribeWorkload(w), .concurrency = concurrency,
                     .num_prompts = static_cast<int>(workload->size()), .a = std::move(a), .b = std::move(b)};
  absl::StatusOr<std::string> md = WriteCompare(input, out_dir);
  if (!md.ok()) return Fail(std::string(md.status().message()), 1);
  std::printf("%s", md->c_str());
  std::printf("compare: %s/compare.md, %s/compare.json; records in %s/a and %s/b\n", out_dir.c_str(), out_dir.c_str(),
              out_dir.c_str(), out_dir.c_str());
  bool any_failed = false;
  for (const CompareSide* side : {&input.a, &input.b}) {
    for (const RequestRecord& r : side->records) any_failed |= !r.outcome.success;
  }
  if (any_failed && absl::GetFlag(FLAGS_fail_on_error)) return Fail("some requests failed (--fail-on-error)", 3);
  return 0;
}
}  // namespace
}  // namespace tpserve::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tpbench run --target grpc://HOST:PORT|http(s)://HOST/v1 [--concurrency 1,2,4,8,16 | --request-rate R,...] "
      "--out DIR\n  tpbench report RUN_DIR... --out DIR [--baselines FILE]\n  tpbench compare --target URL --models A,B "
      "| --target-a URL --model-a A --target-b URL --model-b B [--router-config FILE] [--prices A=IN:OUT,...] "
      "--out DIR\nSee docs/bench.md.");
  // Accept --flag-name as well as --flag_name, as tpserve does.
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args) {
    if (!absl::StartsWith(a, "--")) continue;
    const size_t end = std::min(a.find('='), a.size());
    for (size_t i = 2; i < end; ++i) {
      if (a[i] == '-') a[i] = '_';
    }
  }
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  std::vector<char*> positional = absl::ParseCommandLine(static_cast<int>(cargs.size()), cargs.data());
  if (positional.size() < 2) {
    return tpserve::bench::Fail("usage: tpbench run ... | tpbench report RUN_DIR... | tpbench compare ... (see --help)");
  }
  const std::string command = positional[1];
  if (command == "run") {
    if (positional.size() > 2) return tpserve::bench::Fail(absl::StrCat("run: unexpected argument \"", positional[2], "\""));
    return tpserve::bench::RunCommand();
  }
  if (command == "report") return tpserve::bench::ReportCommand({positional.begin() + 2, positional.end()});
  if (command == "compare") {
    if (positional.size() > 2) {
      return tpserve::bench::Fail(absl::StrCat("compare: unexpected argument \"", positional[2], "\""));
    }
    return tpserve::bench::CompareCommand();
  }
  return tpserve::bench::Fail(absl::StrCat("unknown command \"", command, "\": use run, report or compare"));
}
