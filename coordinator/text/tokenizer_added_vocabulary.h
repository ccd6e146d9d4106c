// The `added_tokens` of a tokenizer.json: tokens (special or not) that are cut out of
// the input before the model runs. Tested through tests/tokenizer_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace tpserve::tokenizer_internal {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool single_word = false;  // only match when not inside a word
  bool lstrip = false;       // also swallow whitespace on the left
  bool rstrip = false;       // also swallow whitespace on the right
  bool normalized = true;    // match in normalized text rather than raw input
  bool special = false;      // skipped by Decode(skip_special_tokens=true)
};

// A stretch of input: plain text (token_id < 0) or one added token.
struct TextSpan {
  size_t begin;
  size_t end;
  int32_t token_id;
};

class AddedVocabulary {
 public:
  // A token with the content of an earlier one replaces it.
  void Add(AddedToken token);
  // Builds the matchers. `normalizer` (may be null) gives the form in which tokens
  // with normalized == true are looked for. Call once, after the last Add().
  void Build(const Normalizer* normalizer);

  // Splits raw input around the tokens with normalized == false.
  std::vector<TextSpan> SplitRaw(std::string_view text) const { return Split(text, raw_); }
  // Splits normalized text around the tokens with normalized == true.
  std::vector<TextSpan> SplitNormalized(std::string_view text) const {
    return Split(text, normalized_);
  }

  const AddedToken* FindById(int32_t id) const;
  std::optional<int32_t> FindByContent(std::string_view content) const;
  // The string Decode uses for an added token: its normalized form when it is
  // matched in normalized text, as the tokenizers library does.
  const std::string& DecodeString(const AddedToken& token) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Leftmost-longest matching over a set of byte strings.
  class Trie {
   public:
    void Insert(std::string_view pattern, int32_t token_index);
    // First match at or after `from`: {start, end, token_index}, or token_index -1.
    TextSpan Find(std::string_view text, size_t from) const;
    bool empty() const { return terminal_.size() <= 1; }

   private:
    std::vector<int32_t> terminal_ = {-1};             // per node: token index or -1
    absl::flat_hash_map<uint64_t, int32_t> children_;  // (node << 8 | byte) -> node
    bool first_byte_[256] = {};
  };

  std::vector<TextSpan> Split(std::string_view text, const Trie& trie) const;

  std::vector<AddedToken> tokens_;
  absl::flat_hash_map<std::string, size_t> by_content_;
  absl::flat_hash_map<int32_t, size_t> by_id_;
  std::vector<std::string> decode_strings_;  // per token
  Trie raw_;
  Trie normalized_;
};

}  // namespace tpserve::tokenizer_internal
