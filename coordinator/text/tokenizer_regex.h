// A PCRE2 regex that finds matches the way the `tokenizers` library's Oniguruma
// regexes do. Tested through tests/tokenizer_test.cc.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

struct pcre2_real_code_8;

namespace tpserve::tokenizer_internal {

// Byte range [first, second) of a match.
using MatchRange = std::pair<size_t, size_t>;

// `tokenizers` compiles Split/Replace patterns with Oniguruma (Ruby syntax). This
// compiles them with PCRE2 in UTF + UCP mode and adjusts the differences that matter
// for tokenizer patterns: `^`/`$` are line anchors, `\s` is Unicode White_Space
// (U+0085 yes, U+180E no) and `\w` also covers marks and connector punctuation.
class TokenizerRegex {
 public:
  // A pattern given as {"Regex": ...}.
  static absl::StatusOr<std::unique_ptr<TokenizerRegex>> Compile(std::string_view pattern);
  // A pattern given as {"String": ...}: matches `literal` verbatim.
  static absl::StatusOr<std::unique_ptr<TokenizerRegex>> CompileLiteral(std::string_view literal);

  TokenizerRegex(const TokenizerRegex&) = delete;
  TokenizerRegex& operator=(const TokenizerRegex&) = delete;
  ~TokenizerRegex();

  // Non-overlapping matches, left to right, in a valid UTF-8 `text`. As Oniguruma's
  // find_iter: after an empty match the search resumes one character later, and an
  // empty match right where the previous match ended is dropped.
  std::vector<MatchRange> FindAll(std::string_view text) const;

 private:
  explicit TokenizerRegex(pcre2_real_code_8* code) : code_(code) {}
  pcre2_real_code_8* code_;
};

// Rewrites an Oniguruma pattern into an equivalent PCRE2 one (see TokenizerRegex).
std::string OnigurumaToPcre2(std::string_view pattern);

}  // namespace tpserve::tokenizer_internal
