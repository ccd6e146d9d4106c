// Quantization quality: a text through a candidate model (e.g. a quantized GGUF) and its
// reference (e.g. the bf16 checkpoint), scored as llama.cpp's `llama-perplexity
// --kl-divergence` scores it (bench/quality_eval.h has the convention): perplexity of both,
// KL(ref || cand) per token (mean with its standard error, median, p90, p99, p99.9, max) and
// top-1 agreement. Not a test; docs/quantization.md, "Quality", has the numbers. The math is
// tested by tests/quality_metrics_test.cc, the model side by tests/quality_eval_test.cc.
//
//   build/bench/quality_bench --model /work/models/gemma-3-270m-bf16
//       --candidate ~/.cache/tpserve/models/gemma-3-270m --text /usr/share/common-licenses/GPL-3 --ctx 512
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/quality_eval.h"
#include "bench/quality_metrics.h"
#include "coordinator/api/process_info.h"
#include "kernels/base.h"
#include "launch/engine_setup.h"
#include "launch/model_text.h"
#include "nlohmann/json.hpp"
#include "worker/communicator.h"

ABSL_FLAG(std::string, model, "", "The reference: a checkpoint directory or a GGUF file (or directory holding one)");
ABSL_FLAG(std::string, candidate, "", "The candidate (e.g. the quantized model), the same kinds of path");
ABSL_FLAG(std::string, text, "/usr/share/common-licenses/GPL-3", "The text scored (UTF-8)");
ABSL_FLAG(std::string, tokenizer, "",
          "A tokenizer.json; empty: the reference's, or the candidate's where the reference has none "
          "(a checkpoint written by tools/gguf_to_safetensors.py has none)");
ABSL_FLAG(int, ctx, 512, "Tokens per chunk; the second half of each is scored");
ABSL_FLAG(int64_t, chunks, 0, "Chunks scored, from the text's start (0: all that fit)");
ABSL_FLAG(int, threads, 0, "CPU threads per model (0: all cores)");
ABSL_FLAG(std::string, dtype, "auto", "Weight dtype of both models: auto | bfloat16 | float16 | float32");
ABSL_FLAG(std::string, ref_options, "",
          "Engine settings for the reference alone, key=value[,key=value] (after --dtype): dtype, "
          "load_format, cpu_gemm, cpu_quant_prefill, cpu_huge_pages, quantization, kv_cache_dtype, dequantize_weights, threads");
ABSL_FLAG(std::string, candidate_options, "", "Engine settings for the candidate alone, as --ref_options");
ABSL_FLAG(bool, json, false, "Also print one JSON line with every number");
ABSL_FLAG(int, candidate_step_tokens, 0,
          "Run the candidate's chunks in steps of at most this many tokens (0: one prefill step). At most 16, "
          "every product takes the decode kernels: on quantized weights, int8-rounded activations, as decoding "
          "computes; the reference always runs one step");

namespace tpserve {
namespace {

using bench::QualityStats;
using bench::TokenScore;

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

absl::StatusOr<EngineOptions> EngineOptionsFor(const std::string& model, const std::string& settings) {
  EngineOptions o;
  o.model = model;
  o.threads = absl::GetFlag(FLAGS_threads);
  o.dtype = absl::GetFlag(FLAGS_dtype);
  TP_RETURN_IF_ERROR(bench::ApplyEngineSettings(settings, o));
  return o;
}

// --tokenizer, else the reference's, else the candidate's.
absl::StatusOr<ModelText> LoadTokenizer(const std::string& ref, const std::string& cand) {
  const std::string flag = absl::GetFlag(FLAGS_tokenizer);
  if (!flag.empty()) return LoadModelText(ref, flag, /*with_chat=*/false);
  if (ModelHasTokenizer(ref)) return LoadModelText(ref, "", /*with_chat=*/false);
  if (ModelHasTokenizer(cand)) return LoadModelText(cand, "", /*with_chat=*/false);
  return absl::InvalidArgumentError(absl::StrCat("neither ", ref, " nor ", cand, " has a tokenizer: pass --tokenizer"));
}

struct Loaded {
  Engine engine;
  double load_seconds = 0;
  double forward_seconds = 0;
};

nlohmann::json Describe(const std::string& path, const Loaded& l) {
  return {{"model", path},
          {"weights", l.engine.weights_description},
          {"weight_dtype", std::string(DTypeName(l.engine.model->weight_dtype()))},
          {"quantization", l.engine.model->weight_formats().Summary()},
          {"kv_cache_dtype", l.engine.kv_cache_dtype},
          {"weight_bytes", l.engine.model->weight_bytes()},
          {"cpu_gemm", l.engine.cpu_gemm.description},
          {"load_s", l.load_seconds},
          {"forward_s", l.forward_seconds}};
}

void PrintTable(const QualityStats& s) {
  std::printf("%-26s %s\n", "metric", "value");
  std::printf("%-26s %.4f +/- %.4f\n", "PPL(ref)", s.ref_ppl, s.ref_ppl_se);
  std::printf("%-26s %.4f +/- %.4f\n", "PPL(cand)", s.cand_ppl, s.cand_ppl_se);
  std::printf("%-26s %.6f +/- %.6f\n", "ln(PPL(cand)/PPL(ref))", s.ln_ppl_ratio, s.ln_ppl_ratio_se);
  std::printf("%-26s %.6g +/- %.2g\n", "mean KL(ref||cand) nats", s.kl_mean, s.kl_mean_se);
  std::printf("%-26s %.6g\n", "median KL", s.kl_median);
  std::printf("%-26s %.6g\n", "p90 KL", s.kl_p90);
  std::printf("%-26s %.6g\n", "p99 KL", s.kl_p99);
  std::printf("%-26s %.6g\n", "p99.9 KL", s.kl_p999);
  std::printf("%-26s %.6g\n", "max KL", s.kl_max);
  std::printf("%-26s %.3f%% +/- %.3f%%\n", "top-1 agreement", 100 * s.top1_agreement, 100 * s.top1_agreement_se);
  std::printf("%-26s %lld\n", "tokens scored", static_cast<long long>(s.tokens));
}

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "quality_bench: %s\n", std::string(st.message()).c_str());
  return 2;
}

int Main() {
  const std::string ref_path = absl::GetFlag(FLAGS_model), cand_path = absl::GetFlag(FLAGS_candidate);
  const std::string text_path = absl::GetFlag(FLAGS_text);
  const int32_t ctx = absl::GetFlag(FLAGS_ctx);
  if (ref_path.empty() || cand_path.empty()) {
    return Fail(absl::InvalidArgumentError("--model (the reference) and --candidate are required"));
  }
  if (ctx < 4) return Fail(absl::InvalidArgumentError("--ctx: use at least 4 tokens"));
  absl::StatusOr<EngineOptions> ref_o = EngineOptionsFor(ref_path, absl::GetFlag(FLAGS_ref_options));
  if (!ref_o.ok()) return Fail(ref_o.status());
  absl::StatusOr<EngineOptions> cand_o = EngineOptionsFor(cand_path, absl::GetFlag(FLAGS_candidate_options));
  if (!cand_o.ok()) return Fail(cand_o.status());

  absl::StatusOr<ModelText> text = LoadTokenizer(ref_path, cand_path);
  if (!text.ok()) return Fail(text.status());
  std::ifstream in(text_path, std::ios::binary);
  if (!in) return Fail(absl::NotFoundError(absl::StrCat("--text ", text_path, ": cannot read it")));
  const std::string body((std::istreambuf_iterator<char>(in)), {});
  const std::vector<int32_t> tokens = text.value().tokenizer->Encode(body, /*add_special_tokens=*/true);
  // BOS per chunk where the tokenizer puts one in front of a text (Gemma, Llama), as
  // llama-perplexity does; none where it does not (Qwen).
  const std::optional<int32_t> bos = text.value().tokenizer->bos_id();
  const bool adds_bos = bos.has_value() && !tokens.empty() && tokens[0] == *bos;
  const int64_t available = static_cast<int64_t>(tokens.size()) / ctx;
  const std::vector<std::vector<int32_t>> chunks = bench::SplitIntoChunks(
      tokens, ctx, absl::GetFlag(FLAGS_chunks), adds_bos ? bos : std::nullopt);
  if (chunks.empty()) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat(text_path, " has ", tokens.size(), " tokens, fewer than --ctx ", ctx, ": lower --ctx")));
  }
  const int32_t first = bench::FirstScoredPosition(ctx);
  std::printf("text %s: %zu tokens (tokenizer %s); %zu chunk(s) of %d tokens scored of %lld; %s; scored: "
              "positions %d..%d of each chunk predicting the next token (%d per chunk)\n",
              text_path.c_str(), tokens.size(), text.value().source.c_str(), chunks.size(), ctx,
              static_cast<long long>(available),
              adds_bos ? "each chunk starts with BOS (its first text token replaced, llama-perplexity's layout)"
                       : "no BOS (the tokenizer adds none)",
              first, ctx - 2, ctx - 1 - first);

  // Both models loaded side by side on one rank; each chunk runs through one, then the other.
  LocalGroup group(1);
  std::unique_ptr<Communicator> comm = group.Rank(0);
  auto load = [&](const EngineOptions& o, const char* role) -> absl::StatusOr<Loaded> {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<Engine> e = bench::StartScoringEngine(o, ctx, *comm);
    if (!e.ok()) return absl::Status(e.status().code(), absl::StrCat(role, " ", o.model, ": ", e.status().message()));
    Loaded l{std::move(e).value(), SecondsSince(t0), 0};
    std::fprintf(stderr, "quality_bench: %s %s loaded in %.1f s: %s, weights %s (%s)\n", role, o.model.c_str(),
                 l.load_seconds, l.engine.weights_description.c_str(),
                 l.engine.model->weight_formats().Summary().c_str(), l.engine.cpu_gemm.description.c_str());
    return l;
  };
  absl::StatusOr<Loaded> ref = load(*ref_o, "reference");
  if (!ref.ok()) return Fail(ref.status());
  absl::StatusOr<Loaded> cand = load(*cand_o, "candidate");
  if (!cand.ok()) return Fail(cand.status());
  if (absl::Status st = bench::CheckSameVocabulary(ref->engine.config, cand->engine.config); !st.ok()) return Fail(st);
  const int64_t vocab = ref->engine.config.vocab_size;

  std::vector<TokenScore> scores;
  const auto t_all = std::chrono::steady_clock::now();
  for (size_t c = 0; c < chunks.size(); ++c) {
    auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<float>> a = bench::ScoredLogits(*ref->engine.model, chunks[c]);
    if (!a.ok()) return Fail(a.status());
    ref->forward_seconds += SecondsSince(t0);
    t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<float>> b =
        bench::ScoredLogits(*cand->engine.model, chunks[c], absl::GetFlag(FLAGS_candidate_step_tokens));
    if (!b.ok()) return Fail(b.status());
    cand->forward_seconds += SecondsSince(t0);
    const std::vector<TokenScore> chunk_scores = bench::ScoreRows(*a, *b, vocab, chunks[c]);
    scores.insert(scores.end(), chunk_scores.begin(), chunk_scores.end());
    const QualityStats so_far = bench::Summarize(scores);
    std::fprintf(stderr, "quality_bench: chunk %zu/%zu: PPL ref %.4f cand %.4f, mean KL %.6g, top-1 %.2f%% (%.0f s)\n",
                 c + 1, chunks.size(), so_far.ref_ppl, so_far.cand_ppl, so_far.kl_mean, 100 * so_far.top1_agreement,
                 SecondsSince(t_all));
  }
  const QualityStats s = bench::Summarize(scores);
  std::printf("reference %s: %s, weights %s\n", ref_path.c_str(), ref->engine.weights_description.c_str(),
              ref->engine.model->weight_formats().Describe(ref->engine.model->weight_dtype()).c_str());
  std::printf("candidate %s: %s, weights %s\n", cand_path.c_str(), cand->engine.weights_description.c_str(),
              cand->engine.model->weight_formats().Describe(cand->engine.model->weight_dtype()).c_str());
  PrintTable(s);
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json j = {{"bench", "quality"},
                        {"version", EngineVersion()},
                        {"reference", Describe(ref_path, *ref)},
                        {"candidate", Describe(cand_path, *cand)},
                        {"text", text_path},
                        {"tokenizer", text.value().source},
                        {"text_tokens", tokens.size()},
                        {"ctx", ctx},
                        {"candidate_step_tokens", absl::GetFlag(FLAGS_candidate_step_tokens)},
                        {"chunks", chunks.size()},
                        {"chunks_available", available},
                        {"bos_per_chunk", adds_bos},
                        {"tokens_scored", s.tokens},
                        {"ref_ppl", s.ref_ppl},
                        {"ref_ppl_se", s.ref_ppl_se},
                        {"cand_ppl", s.cand_ppl},
                        {"cand_ppl_se", s.cand_ppl_se},
                        {"ln_ppl_ratio", s.ln_ppl_ratio},
                        {"ln_ppl_ratio_se", s.ln_ppl_ratio_se},
                        {"kl_mean", s.kl_mean},
                        {"kl_mean_se", s.kl_mean_se},
                        {"kl_median", s.kl_median},
                        {"kl_p90", s.kl_p90},
                        {"kl_p99", s.kl_p99},
                        {"kl_p999", s.kl_p999},
                        {"kl_max", s.kl_max},
                        {"top1_agreement", s.top1_agreement},
                        {"top1_agreement_se", s.top1_agreement_se},
                        {"seconds", SecondsSince(t_all)}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tpserve::Main();
}
