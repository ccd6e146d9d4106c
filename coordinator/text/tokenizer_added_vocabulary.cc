// Added-token matching with the tokenizers library's lstrip/rstrip/single_word rules.
// Tested through tests/tokenizer_test.cc.
#include "coordinator/text/tokenizer_added_vocabulary.h"

#include <algorithm>
#include <utility>

#include "coordinator/text/tokenizer_normalizer.h"
#include "coordinator/text/tokenizer_unicode.h"

namespace tpserve::tokenizer_internal {
namespace {

// Start of the character that ends at `end` (> 0).
size_t PrevCharStart(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return start;
}

bool EndsWithWordChar(std::string_view text) {
  if (text.empty()) return false;
  size_t pos = PrevCharStart(text, text.size());
  return IsWordChar(NextCodePoint(text, &pos));
}

bool StartsWithWordChar(std::string_view text) {
  if (text.empty()) return false;
  size_t pos = 0;
  return IsWordChar(NextCodePoint(text, &pos));
}

// Offset where the whitespace at the end of `text` begins.
size_t TrailingSpaceStart(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = PrevCharStart(text, end);
    size_t pos = start;
    if (!IsWhiteSpace(NextCodePoint(text, &pos))) break;
    end = start;
  }
  return end;
}

// Length of the whitespace at the start of `text`.
size_t LeadingSpaceLength(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    if (!IsWhiteSpace(NextCodePoint(text, &next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

void AddedVocabulary::Trie::Insert(std::string_view pattern, int32_t token_index) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (char ch : pattern) {
    const auto b = static_cast<unsigned char>(ch);
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
    auto it = children_.find(key);
    if (it == children_.end()) {
      it = children_.emplace(key, static_cast<int32_t>(terminal_.size())).first;
      terminal_.push_back(-1);
    }
    node = it->second;
  }
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  terminal_[node] = token_index;
}

TextSpan AddedVocabulary::Trie::Find(std::string_view text, size_t from) const {
  for (size_t i = from; i < text.size(); ++i) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) continue;
    int32_t node = 0;
    TextSpan best{i, i, -1};
    for (size_t j = i; j < text.size(); ++j) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[j]);
      const auto it = children_.find(key);
      if (it == children_.end()) break;
      node = it->second;
      if (terminal_[node] >= 0) best = {i, j + 1, terminal_[node]};
    }
    if (best.token_id >= 0) return best;
  }
  return {text.size(), text.size(), -1};
}

void AddedVocabulary::Add(AddedToken token) {
  if (token.content.empty()) return;
  if (const auto it = by_content_.find(token.content); it != by_content_.end()) {
    by_id_.erase(tokens_[it->second].id);
    by_id_[token.id] = it->second;
    tokens_[it->second] = std::move(token);
    return;
  }
  const size_t index = tokens_.size();
  by_content_[token.content] = index;
  by_id_[token.id] = index;
  tokens_.push_back(std::move(token));
}

void AddedVocabulary::Build(const Normalizer* normalizer) {
  raw_ = Trie();
  normalized_ = Trie();
  decode_strings_.assign(tokens_.size(), "");
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    std::string form = t.content;
    if (t.normalized && normalizer != nullptr) normalizer->Normalize(&form);
    (t.normalized ? normalized_ : raw_).Insert(form, static_cast<int32_t>(i));
    decode_strings_[i] = std::move(form);
  }
}

const AddedToken* AddedVocabulary::FindById(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::FindByContent(std::string_view content) const {
  const auto it = by_content_.find(absl::string_view(content.data(), content.size()));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

const std::string& AddedVocabulary::DecodeString(const AddedToken& token) const {
  const auto index = static_cast<size_t>(&token - tokens_.data());
  return index < decode_strings_.size() ? decode_strings_[index] : token.content;
}

std::vector<TextSpan> AddedVocabulary::Split(std::string_view text, const Trie& trie) const {
  if (trie.empty() || text.empty()) return {{0, text.size(), -1}};
  std::vector<TextSpan> spans;
  size_t start_offset = 0;  // end of the last token taken
  size_t search_from = 0;
  while (true) {
    const TextSpan match = trie.Find(text, search_from);
    if (match.token_id < 0) break;
    search_from = match.end;
    const AddedToken& token = tokens_[match.token_id];
    size_t start = match.begin;
    size_t stop = match.end;
    if (token.single_word) {
      const bool space_before = start == 0 || !EndsWithWordChar(text.substr(0, start));
      const bool space_after = stop == text.size() || !StartsWithWordChar(text.substr(stop));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) start = std::max(TrailingSpaceStart(text.substr(0, start)), start_offset);
    if (token.rstrip) {
      stop += LeadingSpaceLength(text.substr(stop));
      search_from = stop;  // the swallowed whitespace cannot start another token
    }
    if (start_offset < start) spans.push_back({start_offset, start, -1});
    spans.push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset != text.size()) spans.push_back({start_offset, text.size(), -1});
  return spans;
}

}  // namespace tpserve::tokenizer_internal
