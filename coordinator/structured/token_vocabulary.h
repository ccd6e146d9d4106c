// A model's vocabulary as raw bytes per token id, and the sorted byte trie over it that
// token masks walk. Built once per tokenizer and shared by every grammar. Tested by
// tests/structured_output_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/text/tokenizer.h"

namespace tpserve {

enum class TokenKind : uint8_t {
  kText,   // writes its bytes; allowed when the grammar accepts them
  kEos,    // ends the output; allowed exactly when the grammar can end
  kNever,  // special, unused, or writes no bytes: never allowed
};

// Per token id: the bytes it adds to the output, and its kind.
struct VocabularyBytes {
  std::vector<std::string> bytes;  // empty for kEos and kNever
  std::vector<TokenKind> kinds;
};

// The true bytes of every token of `tokenizer`, which Decode writes when the token follows
// other text: byte-level tokens ("Ġ" for a space, GPT-2's byte-to-character table; Llama 3,
// Qwen) map back character by character; SentencePiece-style tokens ("▁" for a space;
// Gemma, Llama 2) with "<0xNN>" byte-fallback tokens give that byte. Which spelling the
// tokenizer uses is read off Decode on a sample of tokens; none fitting is an error.
// Special tokens are kNever, except eos_ids(), which are kEos.
absl::StatusOr<VocabularyBytes> TokenBytesTable(const Tokenizer& tokenizer);

class TokenVocabulary {
 public:
  // A node of the byte trie, stored in depth-first order: its subtree is the nodes
  // [index, end). Over the text tokens sorted by bytes, [lo, hi) are the tokens under the
  // node and [lo, mid) those that end exactly at it (several ids may share bytes).
  struct TrieNode {
    uint32_t end;
    uint32_t lo, mid, hi;
    uint8_t byte;  // the byte that leads here from the parent (0 for the root)
  };

  static std::shared_ptr<const TokenVocabulary> Create(VocabularyBytes table);

  // Mask size: one more than the largest id.
  int32_t size() const { return static_cast<int32_t>(kinds_.size()); }
  TokenKind kind(int32_t id) const { return kinds_[id]; }
  std::string_view bytes(int32_t id) const { return bytes_[id]; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }

  // Text tokens in byte order.
  uint32_t num_sorted() const { return static_cast<uint32_t>(sorted_ids_.size()); }
  int32_t sorted_id(uint32_t i) const { return sorted_ids_[i]; }
  std::string_view sorted_bytes(uint32_t i) const { return bytes_[sorted_ids_[i]]; }
  // Longest common prefix of sorted tokens i - 1 and i (0 for i = 0).
  uint32_t sorted_lcp(uint32_t i) const { return sorted_lcp_[i]; }
  const std::vector<TrieNode>& trie() const { return trie_; }
  size_t max_token_bytes() const { return max_token_bytes_; }

 private:
  TokenVocabulary() = default;

  std::vector<std::string> bytes_;
  std::vector<TokenKind> kinds_;
  std::vector<int32_t> eos_ids_;
  std::vector<int32_t> sorted_ids_;
  std::vector<uint32_t> sorted_lcp_;
  std::vector<TrieNode> trie_;
  size_t max_token_bytes_ = 0;
};

}  // namespace tpserve
