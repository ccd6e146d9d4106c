// tpbench workloads (see workload.h).
#include "bench/tpbench/workload.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/text/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tpserve::bench {
namespace {

using Json = nlohmann::json;

// Common English words, each one token in the usual LLM vocabularies.
constexpr const char* kWords[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
    "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they",
    "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more",
    "when", "will", "would", "who", "so", "no", "time", "people", "water", "light", "city", "world",
    "house", "river", "music", "paper", "number", "story", "market", "garden", "system", "model"};

int DrawLength(int len, double range_ratio, std::mt19937_64& rng) {
  const int lo = std::max(1, static_cast<int>(len * (1.0 - range_ratio)));
  const int hi = std::max(lo, static_cast<int>(len * (1.0 + range_ratio)));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

absl::StatusOr<std::vector<BenchRequest>> RandomWorkload(const WorkloadOptions& o, const Tokenizer* tokenizer) {
  if (o.input_len < 1 || o.output_len < 1) {
    return absl::InvalidArgumentError("--input-len and --output-len must be at least 1");
  }
  if (o.range_ratio < 0 || o.range_ratio >= 1) {
    return absl::InvalidArgumentError(absl::StrCat("--range-ratio must be in [0, 1), got ", o.range_ratio));
  }
  std::mt19937_64 rng(o.seed);
  std::vector<int32_t> vocab;  // ordinary tokens only: special ones would change the server's behaviour
  if (tokenizer != nullptr) {
    for (int32_t id = 0; id < tokenizer->vocab_size(); ++id) {
      if (!tokenizer->IsSpecial(id)) vocab.push_back(id);
    }
    if (vocab.empty()) return absl::InvalidArgumentError("the tokenizer has no ordinary tokens");
  }
  constexpr int kNumWords = sizeof(kWords) / sizeof(kWords[0]);
  std::vector<BenchRequest> out;
  for (int i = 0; i < o.num_prompts; ++i) {
    BenchRequest r;
    r.seq = i;
    const int in = DrawLength(o.input_len, o.range_ratio, rng);
    r.max_tokens = DrawLength(o.output_len, o.range_ratio, rng);
    if (tokenizer != nullptr) {
      std::uniform_int_distribution<size_t> pick(0, vocab.size() - 1);
      for (int t = 0; t < in; ++t) r.token_ids.push_back(vocab[pick(rng)]);
      r.text = tokenizer->Decode(r.token_ids, /*skip_special_tokens=*/true);
      r.expected_prompt_tokens = in;
    } else {
      std::uniform_int_distribution<int> pick(0, kNumWords - 1);
      std::vector<std::string> words;
      for (int t = 0; t < in; ++t) words.push_back(kWords[pick(rng)]);
      r.text = absl::StrJoin(words, " ");
    }
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open the dataset file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int CountTokens(const Tokenizer* tokenizer, const std::string& text) {
  if (tokenizer == nullptr) return -1;
  return static_cast<int>(tokenizer->Encode(text, /*add_special_tokens=*/false).size());
}

bool Fits(const WorkloadOptions& o, int prompt_tokens, int output_tokens) {
  return o.max_model_len <= 0 || prompt_tokens < 0 || prompt_tokens + output_tokens <= o.max_model_len;
}

// One object per line: {"prompt": "..."} or {"prompt_token_ids": [...]}, optionally
// "max_tokens" (or "output_len").
absl::StatusOr<std::vector<BenchRequest>> JsonlWorkload(const WorkloadOptions& o, const Tokenizer* tokenizer) {
  absl::StatusOr<std::string> text = ReadFile(o.path);
  if (!text.ok()) return text.status();
  std::vector<BenchRequest> all;
  std::istringstream lines(*text);
  std::string line;
  int line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = absl::StrCat(o.path, ":", line_no);
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
    BenchRequest r;
    if (j.contains("prompt_token_ids")) {
      const Json& ids = j["prompt_token_ids"];
      if (!ids.is_array() || ids.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": \"prompt_token_ids\" must be a non-empty array"));
      }
      for (const Json& id : ids) {
        if (!id.is_number_integer()) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": \"prompt_token_ids\" holds a non-integer"));
        }
        r.token_ids.push_back(id.get<int32_t>());
      }
      r.expected_prompt_tokens = static_cast<int>(r.token_ids.size());
      if (tokenizer != nullptr) r.text = tokenizer->Decode(r.token_ids, true);
    } else if (j.contains("prompt") && j["prompt"].is_string() && !j["prompt"].get<std::string>().empty()) {
      r.text = j["prompt"].get<std::string>();
      r.expected_prompt_tokens = CountTokens(tokenizer, r.text);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": needs a non-empty \"prompt\" string or a \"prompt_token_ids\" array"));
    }
    r.max_tokens = o.fixed_output_len > 0 ? o.fixed_output_len : o.output_len;
    for (const char* key : {"max_tokens", "output_len"}) {
      if (!j.contains(key)) continue;
      if (!j[key].is_number_integer() || j[key].get<int>() < 1) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": \"", key, "\" must be a positive integer"));
      }
      if (o.fixed_output_len <= 0) r.max_tokens = j[key].get<int>();
    }
    if (!Fits(o, r.expected_prompt_tokens, r.max_tokens)) continue;
    all.push_back(std::move(r));
  }
  return all;
}

// ShareGPT: [{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}, ...].
// As vLLM: the first turn is the prompt, the second's length the output length; too
// short pairs (< 4 tokens either side) are skipped.
absl::StatusOr<std::vector<BenchRequest>> ShareGptWorkload(const WorkloadOptions& o, const Tokenizer* tokenizer) {
  absl::StatusOr<std::string> text = ReadFile(o.path);
  if (!text.ok()) return text.status();
  Json j = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(o.path, ": a ShareGPT file is a JSON array of conversations"));
  }
  std::vector<BenchRequest> all;
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& c = j[i];
    if (!c.is_object() || !c.contains("conversations") || !c["conversations"].is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(o.path, ": entry ", i, " has no \"conversations\" array"));
    }
    const Json& turns = c["conversations"];
    if (turns.size() < 2) continue;
    if (!turns[0].is_object() || !turns[1].is_object() || !turns[0].contains("value") || !turns[1].contains("value") ||
        !turns[0]["value"].is_string() || !turns[1]["value"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(o.path, ": entry ", i, ": the first two turns need string \"value\" fields"));
    }
    BenchRequest r;
    r.text = turns[0]["value"].get<std::string>();
    const std::string reply = turns[1]["value"].get<std::string>();
    r.expected_prompt_tokens = CountTokens(tokenizer, r.text);
    int reply_tokens = CountTokens(tokenizer, reply);
    if (reply_tokens < 0) reply_tokens = static_cast<int>(reply.size() / 4);  // no tokenizer: ~4 bytes a token
    r.max_tokens = o.fixed_output_len > 0 ? o.fixed_output_len : reply_tokens;
    const int prompt_len = r.expected_prompt_tokens >= 0 ? r.expected_prompt_tokens : static_cast<int>(r.text.size() / 4);
    if (prompt_len < 4 || r.max_tokens < 4) continue;
    if (!Fits(o, r.expected_prompt_tokens, r.max_tokens)) continue;
    all.push_back(std::move(r));
  }
  std::mt19937_64 rng(o.seed);
  std::shuffle(all.begin(), all.end(), rng);
  return all;
}

}  // namespace

absl::StatusOr<std::vector<BenchRequest>> MakeWorkload(const WorkloadOptions& o, const Tokenizer* tokenizer) {
  if (o.num_prompts < 1) return absl::InvalidArgumentError("--num-prompts must be at least 1");
  absl::StatusOr<std::vector<BenchRequest>> all;
  if (o.kind == "random") {
    all = RandomWorkload(o, tokenizer);
  } else if (o.kind == "jsonl" || o.kind == "sharegpt") {
    if (o.path.empty()) return absl::InvalidArgumentError(absl::StrCat("--dataset-path is required for --dataset ", o.kind));
    all = o.kind == "jsonl" ? JsonlWorkload(o, tokenizer) : ShareGptWorkload(o, tokenizer);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--dataset must be random, jsonl or sharegpt, got \"", o.kind, "\""));
  }
  if (!all.ok()) return all.status();
  if (all->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(o.path, ": no usable prompt (all empty, too short or too long for "
                                                   "--max-model-len)"));
  }
  if (static_cast<int>(all->size()) > o.num_prompts) all->resize(o.num_prompts);
  for (size_t i = 0; i < all->size(); ++i) (*all)[i].seq = static_cast<int64_t>(i);
  return all;
}

std::string DescribeWorkload(const WorkloadOptions& o) {
  if (o.kind == "random") {
    return absl::StrFormat("random in=%d out=%d range=%.2f seed=%d", o.input_len, o.output_len, o.range_ratio, o.seed);
  }
  return absl::StrCat(o.kind, " ", o.path, o.fixed_output_len > 0 ? absl::StrCat(" out=", o.fixed_output_len) : "");
}

}  // namespace tpserve::bench
