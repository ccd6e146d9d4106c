// The vocabulary of a GGUF file's tokenizer as transformers' tokenizer classes spell it, its
// BPE merges (the file's, or derived from the vocabulary as transformers' generate_merges does:
// Gemma files have none) and the added tokens on top. Part of coordinator/text/tokenizer_gguf.h; tested through
// tests/tokenizer_gguf_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "coordinator/text/tokenizer_bpe.h"
#include "nlohmann/json.hpp"

namespace tpserve::tokenizer_internal {

enum class GgufSpelling {
  kAsIs,
  // GemmaTokenizer looks up the user-defined whitespace tokens that Gemma files store with
  // real spaces as "▁" runs: a token of whitespace only (Python's str.isspace) that has a
  // space becomes one "▁" per character.
  kGemma,
  // Byte-level vocabularies are spelled in GPT-2's byte alphabet: a token using any other
  // character is re-spelled from its UTF-8 bytes.
  kByteLevel,
};

// {spelled token: id}, the dict the tokenizer class is given: a token spelled twice keeps its
// last index, as in a Python dict. An open-addressing table over one string arena: the derived
// merges of a 262k-token vocabulary take two million lookups, which a general hash map of
// strings spends most of its time missing the cache on.
class GgufVocab {
 public:
  // `tokens` (valid UTF-8) are the file's, by index.
  GgufVocab(absl::Span<const absl::string_view> tokens, GgufSpelling spelling);

  std::optional<int32_t> Find(absl::string_view token) const { return Find(token, Hash(token)); }
  // Find with the token's Hash, and a hint to fetch the slot a later Find will read: lookups
  // issued together overlap their cache misses.
  static uint64_t Hash(absl::string_view token);
  std::optional<int32_t> Find(absl::string_view token, uint64_t hash) const;
  void Prefetch(uint64_t hash) const { __builtin_prefetch(&slots_[hash & mask_]); }
  // How the token at file index `index` is spelled.
  absl::string_view spelled(int32_t index) const {
    return absl::string_view(arena_).substr(offsets_[index], offsets_[index + 1] - offsets_[index]);
  }
  // Distinct tokens in the order first seen: {index first seen, id (index last seen)}.
  const std::vector<std::pair<int32_t, int32_t>>& distinct() const { return distinct_; }
  // The model's vocabulary.
  std::vector<std::pair<std::string, int32_t>> ModelTokens() const;

 private:
  uint64_t* Slot(absl::string_view token, uint64_t hash);

  std::string arena_;              // spelled tokens, by file index
  std::vector<uint64_t> offsets_;  // token i is arena_[offsets_[i], offsets_[i + 1])
  // Per slot: the hash's high 32 bits << 32 | (id + 1); 0 when empty.
  std::vector<uint64_t> slots_;
  uint64_t mask_ = 0;
  std::vector<std::pair<int32_t, int32_t>> distinct_;
};

// The added vocabulary as the tokenizers library grows it: a token the model has keeps its
// model id; a new one gets the model's token count as id, or one past the largest added id
// when that is already beyond. Every token added here is unnormalized with no stripping
// (transformers adds them so); special is sticky, as the library keeps a token it once added as
// special in the set Decode skips.
class GgufAddedTokens {
 public:
  explicit GgufAddedTokens(const GgufVocab& vocab) : vocab_(vocab) {}

  // Returns the token's id.
  int32_t Add(absl::string_view content, bool special);
  std::optional<int32_t> Find(absl::string_view content) const;
  // tokenizer.json's added_tokens, by id.
  nlohmann::json ToJson() const;

 private:
  struct Entry {
    std::string content;
    int32_t id;
    bool special;
  };
  const GgufVocab& vocab_;
  std::vector<Entry> entries_;
  absl::flat_hash_map<std::string, size_t> index_;
  std::optional<int32_t> max_id_;
};

// tokenizer.ggml.merges ("left right" strings, best first) resolved to ids. Errors start with
// `source`: a malformed entry, or a token that is not in the vocabulary (the tokenizers
// library refuses such merges too).
absl::StatusOr<std::vector<BpeVocabulary::Merge>> GgufFileMerges(const nlohmann::json& merges,
                                                                 const GgufVocab& vocab,
                                                                 absl::string_view source);

// transformers' generate_merges: every split of a token into two tokens of the vocabulary is a
// merge making it, ranked by the token's score (higher first; `score_by_id` is indexed by id),
// then the longer left part, then the longer right part (lengths in characters), then the order
// the tokens come in.
std::vector<BpeVocabulary::Merge> DeriveGgufMerges(const GgufVocab& vocab,
                                                   absl::Span<const double> score_by_id);

}  // namespace tpserve::tokenizer_internal
