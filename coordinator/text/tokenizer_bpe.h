// The BPE model of a tokenizer.json (model.type "BPE"): vocabulary, ranked merges,
// byte fallback and unknown-token handling. Tested through tests/tokenizer_test.cc.
#pragma once

#include <array>
#include <bit>
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
#include "absl/types/span.h"
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
  // Nullopt when no vocabulary entry has this id. The view points into the model.
  std::optional<absl::string_view> IdToToken(int32_t id) const;
  // Largest id in the vocabulary, -1 when empty.
  int32_t max_id() const { return tokens_.max_id(); }
  // The longest vocabulary entry's byte length.
  int64_t max_token_bytes() const { return max_token_bytes_; }
  // Whether one unk token can stand for a whole run of unknown characters: fuse_unk with
  // an unk token that byte fallback does not make unreachable.
  bool fuses_unknown_runs() const;

 private:
  // Token strings by id, end to end in one buffer (Gemma's 262,144 tokens: 2.2 MiB of bytes and
  // 1 MiB of offsets, where a std::string per id took 8 MiB plus a heap block for every token over
  // 15 bytes).
  class TokenStrings {
   public:
    // Views of the strings, which must outlive the call; ids without a token hold "".
    void Assign(absl::Span<const absl::string_view> by_id);
    absl::string_view operator[](int32_t id) const {
      return absl::string_view(bytes_.data() + offsets_[id], offsets_[id + 1] - offsets_[id]);
    }
    int32_t max_id() const { return static_cast<int32_t>(offsets_.size()) - 2; }

   private:
    std::string bytes_;
    std::vector<uint32_t> offsets_ = {0};  // token id is bytes_[offsets_[id], offsets_[id + 1])
  };
  // The ids of a vocabulary, hashed and compared by their strings in `Tokens` (heterogeneous
  // lookup by string_view): 4 bytes a slot where a map from std::string held a second copy of
  // every token in 40 (Gemma: 2.5 MiB). Hasher and equality point at the strings, so a BpeModel
  // is neither copied nor moved.
  template <typename Tokens>
  struct IdByToken {
    const Tokens* tokens;
    using is_transparent = void;
    absl::string_view Of(int32_t id) const { return (*tokens)[id]; }
    size_t operator()(int32_t id) const { return absl::Hash<absl::string_view>{}(Of(id)); }
    size_t operator()(absl::string_view s) const { return absl::Hash<absl::string_view>{}(s); }
    bool operator()(int32_t a, int32_t b) const { return a == b; }
    bool operator()(int32_t a, absl::string_view b) const { return Of(a) == b; }
    bool operator()(absl::string_view a, int32_t b) const { return a == Of(b); }
  };
  template <typename Tokens>
  using IdSet = absl::flat_hash_set<int32_t, IdByToken<Tokens>, IdByToken<Tokens>>;

  // One merge in its left id's row: right id + left id -> new_id, at priority rank.
  struct Merge {
    int32_t right;
    uint32_t rank;
    int32_t new_id;
  };
  // The merge of ids a and b: a binary search of a's row, or of one bucket of it when the row has
  // a directory, without branches on the comparisons (their outcome is unpredictable, and these
  // lookups are the largest part of encoding).
  const Merge* FindMerge(int32_t a, int32_t b) const {
    if (static_cast<uint32_t>(a) + 1 >= merge_rows_.size()) return nullptr;
    uint32_t begin = merge_rows_[a];
    uint32_t len = merge_rows_[a + 1] - begin;
    if (len > kDirectoryRow) {
      const RowDirectory& d = DirectoryOf(a);
      const uint32_t bucket = d.begin + DirectoryBucket(b, d.bits);
      begin = directory_[bucket];
      len = directory_[bucket + 1] - begin;
    }
    if (len == 0) return nullptr;
    // The last entry <= b lies in [base, base + len). Four halvings take a row of up to 16
    // entries to one: written out, a lookup has no loop to mispredict the end of.
    const Merge* base = merges_.data() + begin;
    const auto halve = [&] {
      const uint32_t half = len / 2;
      base = base[half].right <= b ? base + half : base;
      len -= half;
    };
    while (len > 16) halve();
    halve();
    halve();
    halve();
    halve();
    return base->right == b ? base : nullptr;
  }
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Loading, shared by FromJson and FromVocabulary.
  static absl::StatusOr<std::unique_ptr<BpeModel>> WithOptions(const Json& j, const JsonPath& at);
  // The vocabulary from (token, id) entries in the order listed; a token listed twice keeps its
  // last id, an id listed twice names its last token (see aliases_). The strings are copied.
  // `Listing` is a vector of (string or string_view, id) pairs.
  template <typename Listing>
  absl::Status SetTokens(const Listing& tokens, const JsonPath& at);
  // The merges in rank order, all ids already checked to name tokens; a later entry for the
  // same pair replaces an earlier one.
  void SetMerges(absl::Span<const BpeVocabulary::Merge> merges);
  bool HasToken(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < has_id_.size() && has_id_[id];
  }
  // Derived tables (junctions, character and byte ids, unk) once tokens and merges are in.
  absl::Status Finish(const Json& j, const JsonPath& at);
  void MergeWord(std::string_view word, std::vector<int32_t>* ids) const;
  struct Symbol;
  struct Candidate;
  void MergeSegment(std::vector<Symbol>& symbols, int32_t begin, int32_t end,
                    std::vector<Candidate>* heap, std::vector<int32_t>* ids) const;

  TokenStrings tokens_;  // before vocab_, whose functors point at it
  IdSet<TokenStrings> vocab_{0, IdByToken<TokenStrings>{&tokens_},
                            IdByToken<TokenStrings>{&tokens_}};
  // Tokens whose id another token took later (a vocabulary listing one id twice): they
  // still encode to it.
  absl::flat_hash_map<std::string, int32_t> aliases_;
  std::vector<bool> has_id_;
  // The merges as rows by left id (compressed sparse rows): the merges of left id a are
  // merges_[merge_rows_[a], merge_rows_[a + 1]), sorted by right id (a row with a directory, below:
  // by bucket, then right id). 12 bytes a merge and 4 an id (Gemma's 514,906 merges: 7.3 MiB with
  // the directories, where a hash map keyed by the pair took 17 MiB). Half of Gemma's rows have 1
  // or 2 entries. Encoding takes about 1.04x the time it took with that map (a long row's
  // directory is one more memory access a lookup).
  std::vector<uint32_t> merge_rows_;
  std::vector<Merge> merges_;
  // Rows longer than kDirectoryRow (Gemma's "▁" row has 40,863 merges, and most lookups while
  // encoding are in rows of hundreds) are hashed: split into 2^bits buckets by a hash of the right
  // id, 2 to 4 entries a bucket on average, each bucket sorted by right id. Bucket k of a row is
  // merges_[directory_[begin + k], directory_[begin + k + 1]): 1 to 2 bytes a merge of those rows.
  // (Buckets by the right id's high bits would be lopsided: the frequent tokens that long rows
  // hold most of have low ids.)
  static constexpr uint32_t kDirectoryRow = 16;
  struct RowDirectory {
    uint32_t begin;  // into directory_
    uint32_t bits;
  };
  static uint32_t DirectoryBucket(int32_t right, uint32_t bits) {
    return (static_cast<uint32_t>(right) * 0x9E3779B1u) >> (32 - bits);
  }
  std::vector<RowDirectory> row_directories_;  // in row order
  std::vector<uint32_t> directory_;
  // Row a's directory is row_directories_[k] with k the rows with a directory before it: bit a % 64
  // of directory_rows_[a / 64] marks row a, and directory_rank_[a / 64] counts the marked rows
  // below a / 64 * 64 (a rank dictionary, a bit and a half an id: a hash map here took a tenth of
  // the encoding time).
  std::vector<uint64_t> directory_rows_;
  std::vector<uint32_t> directory_rank_;
  const RowDirectory& DirectoryOf(int32_t a) const {
    const uint32_t word = static_cast<uint32_t>(a) / 64;
    const uint64_t below = directory_rows_[word] & ((uint64_t{1} << (a % 64)) - 1);
    return row_directories_[directory_rank_[word] + std::popcount(below)];
  }
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
