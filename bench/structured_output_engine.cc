// structured_output_bench --engine (see the header). Per batch size, rounds of three runs
// (plain, a typical schema, json_object), each a fresh EngineCore over the same model, the
// same prompts and seeds; the medians of the steps in which every sequence decodes.
#include "bench/structured_output_engine.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/cpu_time.h"
#include "bench/median.h"
#include "coordinator/engine/engine_core.h"
#include "coordinator/structured/grammar_compiler.h"
#include "coordinator/structured/token_matcher.h"
#include "coordinator/structured/token_vocabulary.h"
#include "kernels/base.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/row_sampling.h"
#include "launch/engine_setup.h"
#include "worker/communicator.h"
#include "worker/step.h"
#include "worker/step_executor.h"

namespace tpserve::bench {
namespace {

// What a client typically sends: strings, an integer, an enum, an array and a nested object.
constexpr char kTypicalSchema[] = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "role": {"enum": ["admin", "editor", "viewer"]},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "address": {"type": "object", "properties": {
      "street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string"}},
      "required": ["street", "city"]}
  },
  "required": ["name", "age", "role", "tags", "address"]
})";

enum Variant { kPlain = 0, kSchema = 1, kJsonObject = 2, kNumVariants = 3 };
constexpr const char* kVariantName[] = {"plain", "schema", "json_object"};

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Medians over one run's measured steps (ms); the mask work is replayed outside the step
// (below), summed over the step's rows.
struct RunStats {
  double wall = 0, cpu = 0, forward = 0, output = 0, coordinator = 0, mask = 0;
  double allowed = 0;  // median allowed tokens per mask
  int steps = 0, measured = 0, finished = 0;
  std::vector<int32_t> sample;  // row 0's output since its last replacement
  std::vector<uint64_t> masks;  // the last measured step's, [batch, mask words] by row
};

SamplingParams RequestParams(const EngineModeOptions& o, int max_tokens) {
  SamplingParams p;
  p.temperature = o.temperature;
  p.top_k = o.top_k;
  p.top_p = o.top_p;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;  // free text never ends early; a grammar still ends at its EOS
  return p;
}

// The seed of a row's n-th request (n > 0: it replaced one whose grammar ended).
uint64_t RowSeed(int row, int batch, int n) { return static_cast<uint64_t>(row) + static_cast<uint64_t>(batch) * n; }

// One run: `batch` requests decode; a request that finishes (its grammar ended) is
// replaced at once by a new one with the next seed of its row, and the steps that prefill
// a replacement are left out, so every measured step decodes exactly `batch` sequences.
//
// The scheduler's mask work is replayed between steps on a mirror of every sequence's
// TokenMatcher, as Scheduler::BuildStepPlan and Update do it (copy the matcher, fill the
// mask, accept the sampled token), on the same states: thread CPU time, outside the timed
// step.
absl::StatusOr<RunStats> RunOnce(Model& model, Communicator& comm, const EngineModeOptions& o, int batch,
                                 const std::vector<int32_t>& prompt,
                                 const std::shared_ptr<const CompiledGrammar>& grammar) {
  const int max_steps = 3 * o.decode_steps + 8;
  StepExecutor exec(model, comm);
  SchedulerConfig sc = SchedulerConfigFor(model, batch, std::max<int32_t>(2048, batch * prompt.size()));
  sc.enable_prefix_caching = false;  // every prompt is the same: each run computes its own
  EngineCore core(exec, sc);
  const int64_t words = LogitEdits::mask_words(model.config().vocab_size);
  SamplingParams params = RequestParams(o, max_steps + 1);
  params.grammar = grammar;

  absl::flat_hash_map<std::string, int> row_of;
  std::vector<std::optional<TokenMatcher>> mirror(batch);
  std::vector<int> generation(batch, 0);
  RunStats r;
  auto submit = [&](int row) -> absl::Status {
    SamplingParams p = params;
    p.seed = RowSeed(row, batch, generation[row]);
    const std::string id = absl::StrCat(row, ".", generation[row]++);
    TP_RETURN_IF_ERROR(core.Validate(prompt, p));
    TP_RETURN_IF_ERROR(core.AddRequest(id, prompt, std::move(p), absl::Now()));
    row_of[id] = row;
    if (grammar != nullptr) mirror[row].emplace(grammar);
    if (row == 0) r.sample.clear();
    return absl::OkStatus();
  };
  for (int row = 0; row < batch; ++row) TP_RETURN_IF_ERROR(submit(row));

  std::vector<double> wall, cpu, forward, output, coordinator, mask_ms, allowed;
  std::vector<uint64_t> step_masks(grammar != nullptr ? batch * words : 0);
  BitMask mask;
  while (static_cast<int>(wall.size()) < o.decode_steps && r.steps < max_steps) {
    const double cpu0 = ProcessCpuSeconds(), wall0 = WallSeconds();
    EngineStep step = core.Step();
    const double wall_s = WallSeconds() - wall0, cpu_s = ProcessCpuSeconds() - cpu0;
    ++r.steps;
    TP_RETURN_IF_ERROR(step.error);
    double mask_s = 0;
    std::vector<int> resubmit;
    for (const EngineOutput& out : step.outputs) {
      const auto it = row_of.find(out.request_id);
      if (it == row_of.end()) return absl::InternalError(absl::StrCat("unknown request ", out.request_id));
      const int row = it->second;
      if (row == 0) r.sample.insert(r.sample.end(), out.token_ids.begin(), out.token_ids.end());
      if (grammar != nullptr) {
        for (const int32_t token : out.token_ids) {
          double t0 = ThreadCpuSeconds();
          const TokenMatcher before = *mirror[row];
          FillNextTokenMask(before, &mask);
          mask_s += ThreadCpuSeconds() - t0;
          allowed.push_back(mask.Count());
          const absl::Span<const uint64_t> m = mask.words();
          std::copy_n(m.begin(), std::min<size_t>(m.size(), words), step_masks.begin() + row * words);
          t0 = ThreadCpuSeconds();
          const bool accepted = mirror[row]->AcceptToken(token);
          mask_s += ThreadCpuSeconds() - t0;
          if (!accepted) return absl::InternalError(absl::StrCat("the mirror refused token ", token));
        }
      }
      if (out.finish == FinishReason::kError) return absl::InternalError(out.error);
      if (out.finish != FinishReason::kNone) {
        ++r.finished;
        row_of.erase(it);
        resubmit.push_back(row);
      }
    }
    for (const int row : resubmit) TP_RETURN_IF_ERROR(submit(row));
    if (step.num_prefill_tokens > 0 || step.num_seqs != batch) continue;
    wall.push_back(wall_s * 1e3);
    cpu.push_back(cpu_s * 1e3);
    forward.push_back(step.forward_ms);
    output.push_back(step.output_ms);
    coordinator.push_back(step.coordinator_ms);
    mask_ms.push_back(mask_s * 1e3);
    r.masks = step_masks;
  }
  for (const std::string& id : core.UnfinishedIds()) (void)core.Abort(id);
  r.measured = static_cast<int>(wall.size());
  if (grammar == nullptr && r.measured < o.decode_steps) {
    // Free text never ends early: the batch was cut by the KV cache (preemptions).
    return absl::ResourceExhaustedError(absl::StrCat("only ", r.measured, " of ", r.steps, " steps decoded all ", batch,
                                                     " sequences: the KV cache is too small for this batch"));
  }
  r.wall = Median(wall);
  r.cpu = Median(cpu);
  r.forward = Median(forward);
  r.output = Median(output);
  r.coordinator = Median(coordinator);
  r.mask = Median(mask_ms);
  r.allowed = Median(allowed);
  return r;
}

// The logit rows of the first decode step of `batch` free-text requests (the plain runs'
// prompt and seeds), [batch, vocab]: what rank 0 samples from in the runs above.
absl::StatusOr<std::vector<float>> CaptureLogits(Model& model, Communicator& comm, const EngineModeOptions& o,
                                                 int batch, const std::vector<int32_t>& prompt) {
  StepExecutor exec(model, comm);
  SchedulerConfig sc = SchedulerConfigFor(model, batch, std::max<int32_t>(2048, batch * prompt.size()));
  sc.enable_prefix_caching = false;
  EngineCore core(exec, sc);
  const int64_t V = model.config().vocab_size;
  absl::flat_hash_map<std::string, int> row_of;
  for (int row = 0; row < batch; ++row) {
    SamplingParams p = RequestParams(o, 2);
    p.seed = RowSeed(row, batch, 0);
    p.return_logits = true;
    TP_RETURN_IF_ERROR(core.AddRequest(absl::StrCat(row), prompt, std::move(p), absl::Now()));
    row_of[absl::StrCat(row)] = row;
  }
  std::vector<float> rows(batch * V);
  while (core.HasUnfinished()) {
    EngineStep step = core.Step();
    TP_RETURN_IF_ERROR(step.error);
    for (const EngineOutput& out : step.outputs) {
      if (out.logits.empty()) continue;
      std::copy(out.logits.back().begin(), out.logits.back().end(), rows.begin() + row_of[out.request_id] * V);
    }
  }
  return rows;
}

// Rank 0's output stage replayed on `logits` (Model::SampleEditedOnHost without the
// conversion): the rows copied (as CopyShardsToHost writes them), the masks applied
// (none: free text), SampleRows. Medians (ms) of the whole and of ApplyLogitEdits alone.
struct OutputStage {
  double total = 0, apply = 0;
};

class OutputReplay {
 public:
  OutputReplay(const EngineModeOptions& o, int batch, int64_t vocab, std::vector<float> logits)
      : batch_(batch), vocab_(vocab), logits_(std::move(logits)), work_(logits_.size()), params_(batch),
        offsets_(batch + 1, 0), out_(batch), index_(batch) {
    for (int r = 0; r < batch; ++r) {
      params_[r].temperature = o.temperature;
      params_[r].top_k = o.top_k;
      params_[r].top_p = o.top_p;
      params_[r].seed = RowSeed(r, batch, 0);
      params_[r].step = 1;
      index_[r] = r;
    }
  }
  // One pass; `masks` [batch, mask words] or empty.
  void Run(const std::vector<uint64_t>& masks, std::vector<double>& total, std::vector<double>& apply) {
    const double t0 = WallSeconds();
    std::copy(logits_.begin(), logits_.end(), work_.begin());
    const double t1 = WallSeconds();
    if (!masks.empty()) {
      cpu::ApplyLogitEdits(work_.data(), batch_, vocab_, nullptr, nullptr, nullptr, index_.data(), masks.data(),
                           LogitEdits::mask_words(vocab_));
    }
    const double t2 = WallSeconds();
    cpu::SampleRows(work_.data(), batch_, vocab_, params_.data(), offsets_.data(), nullptr, nullptr, out_.data());
    total.push_back((WallSeconds() - t0) * 1e3);
    apply.push_back((t2 - t1) * 1e3);
  }

 private:
  int batch_;
  int64_t vocab_;
  std::vector<float> logits_, work_;
  std::vector<RowSampling> params_;
  std::vector<int32_t> offsets_, out_, index_;
};

struct Range {
  double lo = 1e300, hi = -1e300;
  void Add(double x) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
};

void PrintCompileTimes(const std::shared_ptr<const TokenVocabulary>& vocab) {
  std::printf("compile through GrammarCompiler (1 thread; wall ms, CPU ms of this thread):\n");
  GrammarCompiler compiler(vocab);
  for (int pass = 0; pass < 2; ++pass) {
    const double w0 = WallSeconds(), c0 = ThreadCpuSeconds();
    const bool ok = compiler.CompileJsonSchema(kTypicalSchema).ok();
    const double w1 = WallSeconds(), c1 = ThreadCpuSeconds();
    const bool ok2 = compiler.CompileJsonObject().ok();
    const double w2 = WallSeconds(), c2 = ThreadCpuSeconds();
    std::printf("  %-7s typical schema %8.2f / %8.2f ms%s   json_object %8.2f / %8.2f ms%s\n",
                pass == 0 ? "cold" : "cached", (w1 - w0) * 1e3, (c1 - c0) * 1e3, ok ? "" : " FAILED",
                (w2 - w1) * 1e3, (c2 - c1) * 1e3, ok2 ? "" : " FAILED");
  }
}

int RunOnRank0(const Tokenizer& tokenizer, const EngineModeOptions& o, const Engine& engine, Communicator& comm) {
  Model& model = *engine.model;
  auto table = TokenBytesTable(tokenizer);
  if (!table.ok()) {
    std::fprintf(stderr, "structured_output_bench: %s\n", std::string(table.status().message()).c_str());
    return 1;
  }
  const auto vocab = TokenVocabulary::Create(std::move(*table));
  std::printf("model %s (%s), vocabulary %lld; grammar vocabulary (the tokenizer's) %d; --threads %d (0: every core)\n",
              o.model.c_str(), engine.weights_description.c_str(), static_cast<long long>(model.config().vocab_size),
              vocab->size(), o.threads);
  if (vocab->size() > model.config().vocab_size) {
    std::fprintf(stderr, "structured_output_bench: the tokenizer's %d ids do not fit the model's vocabulary of %lld\n",
                 vocab->size(), static_cast<long long>(model.config().vocab_size));
    return 1;
  }
  PrintCompileTimes(vocab);
  GrammarCompiler compiler(vocab);
  std::shared_ptr<const CompiledGrammar> grammars[kNumVariants];
  auto schema = compiler.CompileJsonSchema(kTypicalSchema);
  auto object = compiler.CompileJsonObject();
  if (!schema.ok() || !object.ok()) {
    std::fprintf(stderr, "structured_output_bench: %s\n",
                 std::string((schema.ok() ? object.status() : schema.status()).message()).c_str());
    return 1;
  }
  grammars[kSchema] = *schema;
  grammars[kJsonObject] = *object;
  const std::vector<int32_t> prompt =
      tokenizer.Encode("Describe a user of our service as JSON.", /*add_special_tokens=*/true);

  std::printf(
      "\nsampling: temperature %.2f, top_k %d, top_p %.2f, one seed per row, the same in every variant.\n"
      "Random weights: a grammar's sequences wander inside strings (the expensive masks: ~255k tokens\n"
      "allowed, the uncertain ones walked) far more than a trained model would.\n"
      "A request whose grammar ends is replaced at once; steps that prefill a replacement are not counted.\n"
      "Per step, medians (ms): wall and process CPU of EngineCore::Step; forward; output = logits to the\n"
      "host, ApplyLogitEdits, SampleRows (inside forward); coordinator = the rest of Step; mask = the\n"
      "scheduler's mask work (matcher copy, FillNextTokenMask, AcceptToken) replayed on the same states\n"
      "between steps, summed over the step's rows (thread CPU); allowed = tokens per mask.\n\n",
      o.temperature, o.top_k, o.top_p);
  std::printf("%5s %5s %-11s %7s %5s %9s %9s %9s %8s %8s %8s %9s\n", "batch", "round", "variant", "steps",
              "ends", "wall", "cpu", "forward", "output", "coord", "mask", "allowed");
  const int64_t V = model.config().vocab_size;
  for (const int batch : o.batches) {
    // Per round: each variant's stats.
    std::vector<std::array<RunStats, kNumVariants>> rounds;
    for (int round = 0; round < o.rounds; ++round) {
      std::array<RunStats, kNumVariants> stats;
      for (int k = 0; k < kNumVariants; ++k) {
        const int v = (k + round) % kNumVariants;  // rotate the order: drift favours none
        auto r = RunOnce(model, comm, o, batch, prompt, grammars[v]);
        if (!r.ok()) {
          std::fprintf(stderr, "structured_output_bench: %s\n", std::string(r.status().message()).c_str());
          return 1;
        }
        stats[v] = *std::move(r);
      }
      for (int v = 0; v < kNumVariants; ++v) {
        const RunStats& s = stats[v];
        std::printf("%5d %5d %-11s %3d/%-3d %5d %9.2f %9.2f %9.2f %8.3f %8.3f %8.3f %9.0f\n", batch, round,
                    kVariantName[v], s.measured, s.steps, s.finished, s.wall, s.cpu, s.forward, s.output,
                    s.coordinator, s.mask, s.allowed);
      }
      std::fflush(stdout);
      rounds.push_back(std::move(stats));
    }
    for (int v = kSchema; v < kNumVariants; ++v) {
      std::string text = tokenizer.Decode(rounds.back()[v].sample, /*skip_special_tokens=*/false);
      if (text.size() > 120) text = text.substr(0, 120) + "...";
      for (char& c : text) {
        if (c == '\n' || c == '\t') c = ' ';
      }
      std::printf("  %s, row 0 wrote: %s\n", kVariantName[v], text.c_str());
    }

    // The output stage on the model's own logits, the last round's masks: alternated, so
    // that the machine's drift hits every variant alike.
    auto logits = CaptureLogits(model, comm, o, batch, prompt);
    if (!logits.ok()) {
      std::fprintf(stderr, "structured_output_bench: %s\n", std::string(logits.status().message()).c_str());
      return 1;
    }
    OutputReplay replay(o, batch, V, *std::move(logits));
    const std::vector<uint64_t> no_masks;
    std::vector<double> total[kNumVariants], apply[kNumVariants];
    const int reps = std::max(9, 400 / batch);
    for (int rep = 0; rep < reps; ++rep) {
      for (int k = 0; k < kNumVariants; ++k) {
        const int v = (k + rep) % kNumVariants;
        replay.Run(v == kPlain ? no_masks : rounds.back()[v].masks, total[v], apply[v]);
      }
    }
    OutputStage stage[kNumVariants];
    for (int v = 0; v < kNumVariants; ++v) stage[v] = {Median(total[v]), Median(apply[v])};
    std::printf("  output stage replayed on the model's logits (%d alternated passes; copy, ApplyLogitEdits, "
                "SampleRows): plain %.3f ms, schema %.3f ms (apply %.3f), json_object %.3f ms (apply %.3f)\n",
                reps, stage[kPlain].total, stage[kSchema].total, stage[kSchema].apply, stage[kJsonObject].total,
                stage[kJsonObject].apply);

    std::printf("\nbatch %d: grammar over plain in the same round, ranges over %d rounds\n", batch, o.rounds);
    std::printf("  %-11s %17s %17s %17s %17s %17s %17s\n", "", "step wall", "step CPU", "coordinator +ms",
                "output +ms", "mask work", "added");
    for (int v = kSchema; v < kNumVariants; ++v) {
      Range wall, cpu, coord, out, mask, added;
      const double replayed = stage[v].total - stage[kPlain].total;
      for (const auto& s : rounds) {
        const RunStats& p = s[kPlain];
        const RunStats& g = s[v];
        wall.Add(100 * (g.wall - p.wall) / p.wall);
        cpu.Add(100 * (g.cpu - p.cpu) / p.cpu);
        coord.Add(g.coordinator - p.coordinator);
        out.Add(g.output - p.output);
        mask.Add(100 * g.mask / p.wall);
        added.Add(100 * (g.coordinator - p.coordinator + replayed) / p.wall);
      }
      std::printf("  %-11s %+7.2f..%+6.2f%% %+7.2f..%+6.2f%% %+7.3f..%+7.3f %+7.2f..%+7.2f %7.3f..%6.3f%% %7.3f..%6.3f%%\n",
                  kVariantName[v], wall.lo, wall.hi, cpu.lo, cpu.hi, coord.lo, coord.hi, out.lo, out.hi, mask.lo,
                  mask.hi, added.lo, added.hi);
    }
    std::printf(
        "  step wall, step CPU: (grammar - plain) / plain, the forward's noise included. mask work: replayed, over\n"
        "  the plain step's wall. added: the coordinator's extra time plus the replayed output stage's, over the\n"
        "  plain step's wall: what the grammar adds to a step, without the forward's noise.\n\n");
  }
  return 0;
}

}  // namespace

int RunEngineMode(const Tokenizer& tokenizer, const EngineModeOptions& o) {
  EngineOptions eo;
  eo.model = o.model;
  eo.load_format = "dummy";
  eo.device = "cpu";
  eo.threads = o.threads;
  eo.max_num_seqs = *std::max_element(o.batches.begin(), o.batches.end());
  // Room for every sequence of the largest batch at max_model_len, so no step is cut short
  // by a preemption (RunOnce checks).
  eo.max_model_len = 3 * o.decode_steps + 9 + 64;  // RunOnce's max_tokens and a short prompt
  eo.kv_cache_bytes = int64_t{2} << 30;
  LocalGroup group(1);
  std::unique_ptr<Communicator> comm = group.Rank(0);
  auto engine = StartEngine(eo, WorldConfig{}, *comm);
  if (!engine.ok()) {
    std::fprintf(stderr, "structured_output_bench: %s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  return RunOnRank0(tokenizer, o, *engine, *comm);
}

}  // namespace tpserve::bench
