// `tpserve generate`. Tested by tests/cli_test.sh.
#include "launch/generate_command.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/api/process_info.h"
#include "coordinator/engine/generation_defaults.h"
#include "coordinator/engine/offline.h"
#include "launch/model_text.h"
#include "worker/gguf_model.h"
#include "launch/ranks.h"
#include "coordinator/text/tokenizer.h"
#include "nlohmann/json.hpp"
#include "worker/step_executor.h"
#include "worker/worker_loop.h"

namespace tpserve {
namespace {

using json = nlohmann::json;

struct RankResult {
  int code = 0;
};

// Rank 0's part after the engine is up: tokenize, generate, print.
// `gguf`: the model's GGUF file, opened once for start-up (null when the model is not GGUF).
absl::Status Coordinate(const GenerateCommandOptions& o, const GenerationDefaults& defaults, Engine& engine,
                        Communicator& comm, const WorldConfig& world, std::optional<ModelText> model_text) {
  StepExecutor executor(*engine.model, comm, engine.drafter.get());
  struct ShutdownOnExit {
    StepExecutor& e;
    ~ShutdownOnExit() { e.Shutdown(); }
  } guard{executor};

  std::unique_ptr<Tokenizer> tokenizer;
  if (model_text.has_value()) {
    tokenizer = std::move(model_text->tokenizer);
    // A tokenizer file for another model is caught here. A GGUF file's own tokenizer may end
    // past the embedding (transformers adds Llama 3's <|endoftext|> as id 128256): the engine
    // refuses such an id in a prompt by itself.
    const bool own_gguf = o.tokenizer.empty() && IsGgufModelPath(o.engine.model);
    if (!own_gguf && tokenizer->vocab_size() > engine.config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(model_text->source, ": the tokenizer has ", tokenizer->vocab_size(),
                                                     " tokens but the model's vocab_size is ",
                                                     engine.config.vocab_size));
    }
  }
  std::vector<int32_t> prompt = o.prompt_ids;
  if (!o.prompt.empty()) {
    if (!prompt.empty()) return absl::InvalidArgumentError("pass --prompt or --prompt-ids, not both");
    prompt = tokenizer->Encode(o.prompt, /*add_special_tokens=*/true);
  }
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty: pass --prompt TEXT or --prompt-ids 1,2,3");

  SchedulerConfig sc = SchedulerConfigFor(*engine.model, /*max_num_seqs=*/1,
                                         static_cast<int32_t>(o.max_num_batched_tokens), o.engine.max_model_len);
  if (tokenizer) {
    for (int32_t id : tokenizer->eos_ids()) {
      if (std::find(sc.eos_token_ids.begin(), sc.eos_token_ids.end(), id) == sc.eos_token_ids.end()) {
        sc.eos_token_ids.push_back(id);
      }
    }
  }
  TP_RETURN_IF_ERROR(sc.Validate());
  EngineCore core(executor, WithSpeculation(sc, o.engine.speculative), o.seed,
                  MakeDraftProposer(o.engine.speculative, executor));
  SamplingParams params;
  params.max_tokens = o.max_tokens;
  // generate's own default is greedy; the model's generation config comes before it, and
  // --temperature before both.
  params.temperature = 0;
  ExplicitSamplingFields given;
  given.temperature = o.temperature.has_value();
  ApplyGenerationDefaults(defaults, given, params);
  if (o.temperature.has_value()) params.temperature = *o.temperature;
  params.seed = o.seed;
  params.logprobs = o.logprobs;
  params.ignore_eos = o.ignore_eos;
  TP_ASSIGN_OR_RETURN(OfflineResult result, GenerateOffline(core, {prompt}, params));
  const GenerationOutput& out = result.outputs[0];
  std::string text = tokenizer ? tokenizer->Decode(out.output_ids, /*skip_special_tokens=*/true) : "";

  double prefill_ms = 0, decode_ms = 0, allreduce_ms = 0, pipeline_ms = 0, total_ms = 0, draft_ms = 0;
  double stages_busy_ms = 0, wall_ms = 0;  // the pipeline's bubble: 1 - busy / (stages x wall)
  int64_t decode_steps = 0;
  std::vector<double> step_ms;
  for (const StepSummary& s : result.steps) {
    const bool prefill = s.num_prefill_tokens > 0;
    (prefill ? prefill_ms : decode_ms) += s.forward_ms;
    if (!prefill) ++decode_steps;
    allreduce_ms += s.allreduce_ms;
    pipeline_ms += s.pipeline_ms;
    stages_busy_ms += s.stages_busy_ms;
    wall_ms += s.forward_ms + s.coordinator_ms + s.draft_ms;
    total_ms += s.forward_ms;
    step_ms.push_back(s.forward_ms);
    // Drafts (proposed after each step, the prefill's last included) serve the decode.
    draft_ms += s.draft_ms;
    decode_ms += s.draft_ms;
  }
  // Every output token but the first (sampled by the last prefill step) came from a decode
  // step; with speculative decoding a step may give several.
  const int64_t decode_tokens = std::max<int64_t>(0, static_cast<int64_t>(out.output_ids.size()) - 1);
  const double decode_tok_s = decode_ms > 0 ? decode_tokens / (decode_ms / 1000.0) : 0;
  if (o.json) {
    json j;
    j["model"] = o.engine.model;
    j["weights"] = engine.weights_description;
    j["architecture"] = std::string(ArchName(engine.config.arch));
    j["weight_dtype"] = std::string(DTypeName(engine.model->weight_dtype()));
    j["quantization"] = engine.model->weight_formats().Summary();
    j["weight_formats"] = engine.model->weight_formats().Describe(engine.model->weight_dtype());
    j["kv_cache_dtype"] = engine.kv_cache_dtype;
    j["tensor_parallel_size"] = world.tp_size;
    j["pipeline_parallel_size"] = world.pp_size;
    j["pipeline_stages"] = DescribeStages(engine.stage_bounds);
    j["communicator"] = engine.device_comm ? engine.device_comm->name() : comm.name();
    j["device"] = std::string(DeviceKindName(engine.device));
    j["backend"] = engine.backend->name();
    j["cpu_huge_pages"] = engine.cpu_huge_pages;  // "" on cuda
    j["node"] = world.node;
    j["prompt"] = o.prompt;
    j["prompt_ids"] = out.prompt_ids;
    j["output_ids"] = out.output_ids;
    j["text"] = text;
    j["finish_reason"] = out.finish_reason;
    j["output_logprobs"] = out.output_logprobs;
    json lp = json::array();
    for (const auto& step : out.top_logprobs) {
      json a = json::array();
      for (const auto& [id, p] : step) a.push_back({{"id", id}, {"logprob", p}});
      lp.push_back(a);
    }
    j["logprobs"] = lp;
    j["load_time_s"] = engine.load_seconds;
    j["prefill_ms"] = prefill_ms;
    j["decode_tok_s"] = decode_tok_s;
    j["allreduce_share"] = total_ms > 0 ? allreduce_ms / total_ms : 0;
    j["pipeline_share"] = total_ms > 0 ? pipeline_ms / total_ms : 0;
    // One prompt runs one step at a time: with S stages the bubble is at least 1 - 1/S.
    j["pipeline_bubble"] =
        world.pp_size > 1 && wall_ms > 0 ? std::max(0.0, 1.0 - stages_busy_ms / (world.pp_size * wall_ms)) : 0.0;
    j["step_ms"] = step_ms;
    j["kv_blocks"] = engine.model->num_kv_blocks();
    // What a decode step reads of rank 0's KV cache: per KV group, bytes per cached token (all
    // its layers, keys and values) and the window it attends over (0: every position), so that
    // a bench can count the bytes a step reads beside the weights.
    json kv_groups = json::array();
    const std::vector<int64_t> kv_block_bytes = engine.model->KvBytesPerBlock();
    for (size_t g = 0; g < kv_block_bytes.size(); ++g) {
      kv_groups.push_back({{"bytes_per_token", kv_block_bytes[g] / engine.model->block_size()},
                           {"window", engine.config.kv_group_windows.at(g)}});
    }
    j["kv_groups"] = kv_groups;
    j["tuned_products"] = engine.tune_report.products;
    j["decode_steps"] = decode_steps;
    // Host memory (issue 21): rank 0's weights (and those of every rank in its process: thread
    // ranks share one), its process's resident set before load, at its peak right after load
    // and at its peak now (generation's activations included); then every rank's weights and
    // peak after load.
    const RankMemory& m0 = engine.rank_memory.at(0);
    j["weight_bytes"] = m0.weight_bytes;
    j["process_weight_bytes"] = m0.process_weight_bytes;
    j["rss_before_load_bytes"] = m0.rss_before_load_bytes;
    j["load_peak_rss_bytes"] = m0.peak_rss_after_load_bytes;
    j["peak_rss_bytes"] = ReadProcessMemory().peak_rss_bytes;
    json rank_weights = json::array(), rank_peaks = json::array();
    for (const RankMemory& m : engine.rank_memory) {
      rank_weights.push_back(m.weight_bytes);
      rank_peaks.push_back(m.peak_rss_after_load_bytes);
    }
    j["rank_weight_bytes"] = rank_weights;
    j["rank_load_peak_rss_bytes"] = rank_peaks;
    if (o.engine.speculative.enabled()) {
      const SpecDecodeStats& spec = result.spec;
      j["speculative_config"] = json::parse(o.engine.speculative.ToJson());
      j["spec_decode"] = {{"num_drafts", spec.num_drafts},
                          {"num_draft_tokens", spec.num_draft_tokens},
                          {"num_accepted_tokens", spec.num_accepted_tokens},
                          {"accepted_per_position", spec.accepted_per_pos},
                          {"mean_acceptance_length", spec.mean_acceptance_length()},
                          {"draft_ms", draft_ms}};
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    if (tokenizer) {
      std::printf("%s\n", text.c_str());
    } else {
      std::string ids;
      for (int32_t id : out.output_ids) absl::StrAppend(&ids, ids.empty() ? "" : ",", id);
      std::printf("%s\n", ids.c_str());
    }
    std::fprintf(stderr,
                 "tpserve: %s on %s, tp=%d (%s)%s, load %.2f s; prefill %zu tokens in %.1f ms; decode %lld tokens at %.1f "
                 "tok/s; all-reduce %.1f%% of step time; finish: %s\n",
                 std::string(ArchName(engine.config.arch)).c_str(), engine.backend->name().c_str(), world.tp_size,
                 (engine.device_comm ? engine.device_comm->name() : comm.name()).c_str(),
                 world.pp_size > 1
                     ? absl::StrCat(", pp=", world.pp_size, " (", DescribeStages(engine.stage_bounds), ")").c_str()
                     : "",
                 engine.load_seconds, out.prompt_ids.size(), prefill_ms, static_cast<long long>(decode_tokens),
                 decode_tok_s, total_ms > 0 ? 100.0 * allreduce_ms / total_ms : 0.0, out.finish_reason.c_str());
    if (const std::string tuning = DescribeTuning(engine.tune_report); !tuning.empty()) {
      std::fprintf(stderr, "tpserve: %s\n", tuning.c_str());
    }
    std::fprintf(stderr, "tpserve: weights in memory (rank 0): %s\n",
                 engine.model->weight_formats().Describe(engine.model->weight_dtype()).c_str());
    std::fprintf(stderr, "tpserve: KV cache: %s\n", engine.kv_cache_note.c_str());
    if (!engine.cpu_gemm.description.empty()) {
      std::fprintf(stderr, "tpserve: matmuls: %s\n", engine.cpu_gemm.description.c_str());
    }
    if (!engine.cpu_huge_pages.empty()) {
      std::fprintf(stderr, "tpserve: huge pages: %s\n", engine.cpu_huge_pages.c_str());
    }
    if (!engine.cpu_threads_note.empty()) {
      std::fprintf(stderr, "tpserve: CPU threads: %s\n", engine.cpu_threads_note.c_str());
    }
    if (o.engine.speculative.enabled()) {
      std::fprintf(stderr,
                   "tpserve: speculative decoding: %lld decode steps, %lld of %lld draft tokens accepted, mean "
                   "acceptance length %.2f; drafting %.1f ms\n",
                   static_cast<long long>(decode_steps), static_cast<long long>(result.spec.num_accepted_tokens),
                   static_cast<long long>(result.spec.num_draft_tokens), result.spec.mean_acceptance_length(),
                   draft_ms);
    }
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

int RunRank(const GenerateCommandOptions& o, const WorldConfig& world, Communicator& comm) {
  EngineOptions eo = o.engine;
  eo.max_num_seqs = 1;  // one prompt: steps sample one row
  // --model's GGUF file, parsed once for the config, the weights, the tokenizer and the
  // defaults. Where it fails, each of those opens it again and reports why, as a plain
  // model path would.
  if (auto gguf = OpenGgufModel(eo.model, eo.load_format); gguf.ok()) eo.gguf = *std::move(gguf);
  // Rank 0 alone samples, so it alone reads the model's sampling defaults; a bad flag or file
  // stops every rank before the weights load.
  GenerationDefaults defaults;
  absl::Status read = absl::OkStatus();
  // Rank 0's tokenizer, built before the weights load: a GGUF file's vocabulary (262,144
  // tokens for Gemma) takes ~80 MB of short-lived tables while it is built, which after the
  // weights were on top of them (the 270M Q4_K_M file's peak RSS 385 MiB against 306 after
  // load); before, the heap they leave is what the weights' small buffers reuse.
  std::optional<ModelText> text;
  if (comm.rank() == 0) {
    absl::StatusOr<GenerationDefaults> loaded = LoadModelGenerationDefaults(o.generation_config, o.engine.model, eo.gguf.get());
    if (loaded.ok()) {
      defaults = *std::move(loaded);
    } else {
      read = loaded.status();
    }
    if (read.ok() && (!o.prompt.empty() || !o.tokenizer.empty() || ModelHasTokenizer(o.engine.model))) {
      if (o.tokenizer.empty() && !ModelHasTokenizer(o.engine.model)) {
        read = absl::InvalidArgumentError("--prompt needs a tokenizer: pass --tokenizer PATH/tokenizer.json");
      } else {
        absl::StatusOr<ModelText> loaded_text = LoadModelText(o.engine.model, o.tokenizer, /*with_chat=*/false, eo.gguf.get());
        if (loaded_text.ok()) {
          text = *std::move(loaded_text);
        } else {
          read = loaded_text.status();
        }
      }
    }
  }
  if (absl::Status agreed = comm.AgreeOnStatus(read); !agreed.ok()) {
    if (comm.rank() == 0) std::fprintf(stderr, "tpserve: error: %s\n", std::string(agreed.message()).c_str());
    return 1;
  }
  for (const std::string& line : DescribeGenerationDefaults(defaults)) {
    std::fprintf(stderr, "tpserve: %s\n", line.c_str());
  }

  auto engine = StartEngine(eo, world, comm);
  if (!engine.ok()) {
    if (comm.rank() == 0 || !absl::StartsWith(engine.status().message(), "rank ")) {
      std::fprintf(stderr, "tpserve: error (rank %d): %s\n", comm.rank(), std::string(engine.status().message()).c_str());
    }
    return 1;
  }
  if (comm.rank() != 0) {
    absl::Status st = RunWorkerLoop(*engine->model, comm, engine->drafter.get());
    return st.ok() ? 0 : 1;
  }
  std::fprintf(stderr, "tpserve: memory: %s\n", DescribeLoadMemory(*engine).c_str());
  absl::Status st = Coordinate(o, defaults, *engine, comm, world, std::move(text));
  if (!st.ok()) {
    std::fprintf(stderr, "tpserve: error: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int RunGenerate(const GenerateCommandOptions& o, const WorldConfig& mpi_world) {
  return RunOnRanks(mpi_world, o.parallel,
                    [&](const WorldConfig& world, Communicator& comm) { return RunRank(o, world, comm); });
}

}  // namespace tpserve
