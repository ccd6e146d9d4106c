// Chunks, engines and prefill steps of the quality benchmark (quality_eval.h).
#include "bench/quality_eval.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernels/base.h"

namespace tpserve::bench {

std::vector<std::vector<int32_t>> SplitIntoChunks(const std::vector<int32_t>& tokens, int32_t ctx,
                                                  int64_t max_chunks, std::optional<int32_t> bos) {
  std::vector<std::vector<int32_t>> chunks;
  if (ctx <= 0) return chunks;
  int64_t n = static_cast<int64_t>(tokens.size()) / ctx;
  if (max_chunks > 0) n = std::min(n, max_chunks);
  for (int64_t c = 0; c < n; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * ctx, tokens.begin() + (c + 1) * ctx);
    if (bos.has_value()) chunk[0] = *bos;
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

namespace {

absl::StatusOr<bool> ParseBool(const std::string& key, const std::string& value) {
  if (value == "true" || value == "false") return value == "true";
  return absl::InvalidArgumentError(absl::StrCat(key, "=", value, ": use true or false"));
}

}  // namespace

absl::Status ApplyEngineSettings(absl::string_view settings, EngineOptions& o) {
  for (absl::string_view item : absl::StrSplit(settings, ',', absl::SkipWhitespace())) {
    const std::vector<absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const std::string key(absl::StripAsciiWhitespace(kv[0]));
    const std::string value(kv.size() == 2 ? absl::StripAsciiWhitespace(kv[1]) : "");
    if (kv.size() != 2 || value.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("engine setting \"", item, "\" is not key=value"));
    }
    if (key == "dtype") {
      o.dtype = value;
    } else if (key == "load_format") {
      o.load_format = value;
    } else if (key == "cpu_gemm") {
      o.cpu_gemm = value;
    } else if (key == "cpu_quant_prefill") {
      o.cpu_quant_prefill = value;
    } else if (key == "cpu_huge_pages") {
      TP_ASSIGN_OR_RETURN(o.cpu_huge_pages, ParseBool(key, value));
    } else if (key == "quantization") {
      o.quantization = value;
    } else if (key == "kv_cache_dtype") {
      o.kv_cache_dtype = value;
    } else if (key == "dequantize_weights") {
      TP_ASSIGN_OR_RETURN(o.dequantize_weights, ParseBool(key, value));
    } else if (key == "threads") {
      if (!absl::SimpleAtoi(value, &o.threads) || o.threads < 0) {
        return absl::InvalidArgumentError(absl::StrCat("threads=", value, ": use a count (0: all cores)"));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown engine setting \"", key,
                                                     "\"; known: dtype, load_format, cpu_gemm, cpu_quant_prefill, cpu_huge_pages, quantization, kv_cache_dtype, dequantize_weights, "
                                                     "threads"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Engine> StartScoringEngine(EngineOptions o, int32_t ctx, Communicator& comm) {
  if (comm.size() != 1) return absl::InvalidArgumentError("the quality benchmark runs a model on one rank");
  if (ctx < 4) return absl::InvalidArgumentError(absl::StrCat("--ctx ", ctx, ": use at least 4 tokens"));
  o.device = "cpu";
  o.max_num_seqs = 1;
  o.max_num_batched_tokens = ctx;
  // Every group gets the same blocks (the chunk's step writes all ctx positions in each;
  // a sliding group's window only masks attention), resized below to one chunk's worth.
  o.split_kv_by_need = false;
  o.kv_cache_bytes = int64_t{64} << 20;
  TP_ASSIGN_OR_RETURN(ModelConfig config, ResolveModelConfig(o));
  if (ctx > config.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("--ctx ", ctx, " exceeds ", o.model, "'s ",
                                                   config.max_position_embeddings, " positions"));
  }
  TP_ASSIGN_OR_RETURN(Engine e, StartEngine(config, o, WorldConfig{}, comm));
  const int32_t block = e.model->block_size();
  TP_RETURN_IF_ERROR(e.model->AllocateKvCache((ctx + block - 1) / block));
  TP_RETURN_IF_ERROR(e.model->ReserveScratch(ctx, ctx - 1 - FirstScoredPosition(ctx)));
  return e;
}

absl::Status CheckSameVocabulary(const ModelConfig& ref, const ModelConfig& cand) {
  if (ref.vocab_size == cand.vocab_size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("the reference's vocabulary has ", ref.vocab_size,
                                                 " tokens and the candidate's ", cand.vocab_size,
                                                 ": KL divergence needs the same vocabulary (the same model family)"));
}

absl::StatusOr<std::vector<float>> ScoredLogits(Model& model, const std::vector<int32_t>& chunk,
                                                int32_t step_tokens) {
  const int32_t ctx = static_cast<int32_t>(chunk.size());
  const int32_t block = model.block_size();
  const int32_t max_blocks = (ctx + block - 1) / block;
  const int64_t vocab = model.config().vocab_size;
  const int32_t first_scored = FirstScoredPosition(ctx);
  if (step_tokens <= 0) step_tokens = ctx;
  std::vector<float> logits;
  logits.reserve(static_cast<size_t>(ctx - 1 - first_scored) * vocab);
  // One sequence at positions 0..ctx-1 in blocks 0..max_blocks-1 of every group; a step
  // [begin, end) sees the keys the steps before it wrote.
  for (int32_t begin = 0; begin < ctx; begin += step_tokens) {
    const int32_t end = std::min(ctx, begin + step_tokens);
    StepPlan plan;
    plan.num_seqs = 1;
    KvGroupPlan kv;
    kv.max_blocks_per_seq = max_blocks;
    for (int32_t b = 0; b < max_blocks; ++b) kv.block_tables.push_back(b);
    for (int32_t p = begin; p < end; ++p) {
      plan.token_ids.push_back(chunk[p]);
      plan.positions.push_back(p);
      plan.token_seq.push_back(0);
      kv.slot_mapping.push_back(p);
      if (p >= first_scored && p < ctx - 1) plan.logit_rows.push_back(p - begin);
    }
    plan.kv.assign(model.num_kv_blocks().size(), kv);
    TP_RETURN_IF_ERROR(plan.ValidateTokenIds(vocab));
    TP_RETURN_IF_ERROR(plan.Validate(model.num_kv_blocks(), block));
    if (plan.logit_rows.empty()) plan.logit_rows.push_back(end - begin - 1);  // a step returns a row
    TP_ASSIGN_OR_RETURN(StepOutput out, model.Forward(plan, nullptr));
    if (static_cast<int64_t>(out.logits.size()) != static_cast<int64_t>(plan.logit_rows.size()) * vocab) {
      return absl::InternalError(absl::StrCat("the step returned ", out.logits.size(), " logits for ",
                                              plan.logit_rows.size(), " rows of ", vocab));
    }
    if (end - 1 >= first_scored) logits.insert(logits.end(), out.logits.begin(), out.logits.end());
  }
  return logits;
}

std::vector<TokenScore> ScoreRows(absl::Span<const float> ref_logits, absl::Span<const float> cand_logits,
                                  int64_t vocab, const std::vector<int32_t>& chunk) {
  const int32_t first = FirstScoredPosition(static_cast<int32_t>(chunk.size()));
  const int64_t rows = static_cast<int64_t>(ref_logits.size()) / vocab;
  std::vector<TokenScore> scores;
  scores.reserve(rows);
  for (int64_t r = 0; r < rows; ++r) {
    // Row r holds position first + r's logits, which predict the token after it.
    scores.push_back(ScoreToken(ref_logits.subspan(r * vocab, vocab), cand_logits.subspan(r * vocab, vocab),
                                chunk[first + r + 1]));
  }
  return scores;
}

absl::StatusOr<std::vector<TokenScore>> ScoreChunk(Model& ref, Model& cand, const std::vector<int32_t>& chunk,
                                                   int32_t cand_step_tokens) {
  TP_RETURN_IF_ERROR(CheckSameVocabulary(ref.config(), cand.config()));
  TP_ASSIGN_OR_RETURN(const std::vector<float> ref_logits, ScoredLogits(ref, chunk));
  TP_ASSIGN_OR_RETURN(const std::vector<float> cand_logits, ScoredLogits(cand, chunk, cand_step_tokens));
  return ScoreRows(ref_logits, cand_logits, ref.config().vocab_size, chunk);
}

}  // namespace tpserve::bench
