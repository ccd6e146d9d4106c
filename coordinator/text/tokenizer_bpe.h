// The BPE model of a tokenizer.json (model.type "BPE"): vocabulary, ranked merges,
// byte fallback and unknown-token handling. Tested through tests/tokenizer_test.cc.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "coordinator/text/tokenizer_json.h"

namespace tpserve::tokenizer_internal {

// A BPE model's vocabulary and merges already resolved to ids: what a tokenizer.json's
// model.vocab and model.merges hold, for callers that have them as data rather than text
// (a GGUF file's 262k tokens and 500k merges load several times faster this way than
// through JSON).
struct BpeVocabulary {
  // Token strings and their ids; a token listed twice keeps its last id (as a JSON object
  // with a repeated key, or a Python dict, does), leaving the earlier id without a token.
  std::vector<std::pair<std::string, int32_t>> tokens;
  // In rank order. `merged` is the id of left's string followed by right's (the model must
  // have no continuing_subword_prefix). A later entry for the same pair replaces an earlier.
  struct Merge {
    int32_t left;
    int32_t right;
    int32_t merged;
  };
  std::vector<Merge> merges;
};

class BpeModel {
 public:
  BpeModel() = default;
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;
  // `j` is the "model" object. Unsupported options (dropout > 0, other model types)
  // are errors naming the field.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const Json& j, const JsonPath& at);
  // The options of `j` (a "model" object without "vocab" and "merges") with `vocabulary`.
  // Merge ids must name tokens of `vocabulary` (an error otherwise).
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromVocabulary(const Json& j, const JsonPath& at,
                                                                  BpeVocabulary vocabulary);

  // Appends the ids of one pre-tokenized word. Merges apply lowest rank first, ties
  // leftmost first, as the tokenizers library does.
  void Tokenize(std::string_view word, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Null when no vocabulary entry has this id.
  const std::string* IdToToken(int32_t id) const;
  // Largest id in the vocabulary, -1 when empty.
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }
  // The longest vocabulary entry's byte length.
  int64_t max_token_bytes() const { return max_token_bytes_; }
  // Whether one unk token can stand for a whole run of unknown characters: fuse_unk with
  // an unk token that byte fallback does not make unreachable.
  bool fuses_unknown_runs() const;

 private:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const Merge* FindMerge(int32_t a, int32_t b) const {
    const auto it = merges_.find(PairKey(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }
  // Loading, shared by FromJson and FromVocabulary.
  static absl::StatusOr<std::unique_ptr<BpeModel>> WithOptions(const Json& j, const JsonPath& at);
  void AddToken(std::string token, int32_t id);
  // Derived tables (junctions, character and byte ids, unk) once tokens and merges are in.
  absl::Status Finish(const Json& j, const JsonPath& at);
  void MergeWord(std::string_view word, std::vector<int32_t>* ids) const;
  struct Symbol;
  struct Candidate;
  void MergeSegment(std::vector<Symbol>& symbols, int32_t begin, int32_t end,
                    std::vector<Candidate>* heap, std::vector<int32_t>* ids) const;

  // The vocabulary's ids, hashed and compared by their strings in id_to_token_ (heterogeneous
  // lookup by string_view): 4 bytes a slot where a map from std::string held a second copy of
  // every token in 40 (Gemma's 262,144 tokens: ~2.6 MB instead of ~21.5 MB for the whole run).
  // Hasher and equality point at id_to_token_, so a BpeModel is neither copied nor moved.
  struct IdByToken {
    const std::vector<std::string>* tokens;
    using is_transparent = void;
    absl::string_view Of(int32_t id) const { return (*tokens)[id]; }
    size_t operator()(int32_t id) const { return absl::Hash<absl::string_view>{}(Of(id)); }
    size_t operator()(absl::string_view s) const { return absl::Hash<absl::string_view>{}(s); }
    bool operator()(int32_t a, int32_t b) const { return a == b; }
    bool operator()(int32_t a, absl::string_view b) const { return Of(a) == b; }
    bool operator()(absl::string_view a, int32_t b) const { return a == Of(b); }
  };
  std::vector<std::string> id_to_token_;  // before vocab_, whose functors point at it
  absl::flat_hash_set<int32_t, IdByToken, IdByToken> vocab_{0, IdByToken{&id_to_token_}, IdByToken{&id_to_token_}};
  // Tokens whose id another token took later (a vocabulary listing one id twice): they
  // still encode to it.
  absl::flat_hash_map<std::string, int32_t> aliases_;
  std::vector<bool> has_id_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};  // id of "<0xNN>", -1 when absent
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  // (last character of a merge's left part, first of its right part) as PairKey.
  absl::flat_hash_set<uint64_t> junctions_;
  bool splittable_ = false;        // no prefix/suffix: symbols are the word's characters
  std::vector<int32_t> char_ids_;  // when splittable_: id of each BMP character, or -1
  int64_t max_token_bytes_ = 0;
};

}  // namespace tpserve::tokenizer_internal
