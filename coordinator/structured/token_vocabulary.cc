// TokenBytesTable and the vocabulary trie (token_vocabulary.h). Tested by
// tests/structured_output_test.cc.
#include "coordinator/structured/token_vocabulary.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/text/tokenizer_byte_level.h"
#include "coordinator/text/tokenizer_unicode.h"

namespace tpserve {
namespace {

using tokenizer_internal::ByteLevelCharToByte;
using tokenizer_internal::IsValidUtf8;
using tokenizer_internal::NextCodePoint;

// How token strings spell bytes.
enum class Spelling { kByteLevel, kMetaspace, kLiteral };
constexpr std::array<Spelling, 3> kSpellings = {Spelling::kByteLevel, Spelling::kMetaspace, Spelling::kLiteral};
constexpr std::string_view kMetaspaceChar = "\xE2\x96\x81";  // U+2581 '▁'

// "<0xNN>" -> NN, else -1.
int ByteFallbackValue(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  int value = 0;
  for (const char h : token.substr(3, 2)) {
    const int v = (h >= '0' && h <= '9')   ? h - '0'
                  : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                  : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                                           : -1;
    if (v < 0) return -1;
    value = value * 16 + v;
  }
  return value;
}

std::string Spell(std::string_view token, Spelling spelling, bool byte_fallback) {
  if (byte_fallback) {
    if (const int b = ByteFallbackValue(token); b >= 0) return std::string(1, static_cast<char>(b));
  }
  switch (spelling) {
    case Spelling::kByteLevel: {
      // As the ByteLevel decoder: a token with any other character is its own text.
      std::string out;
      size_t pos = 0;
      while (pos < token.size()) {
        const int b = ByteLevelCharToByte(NextCodePoint(token, &pos));
        if (b < 0) return std::string(token);
        out.push_back(static_cast<char>(b));
      }
      return out;
    }
    case Spelling::kMetaspace: {
      std::string out;
      for (size_t pos = 0; pos < token.size();) {
        if (token.compare(pos, kMetaspaceChar.size(), kMetaspaceChar) == 0) {
          out.push_back(' ');
          pos += kMetaspaceChar.size();
        } else {
          out.push_back(token[pos++]);
        }
      }
      return out;
    }
    case Spelling::kLiteral:
      return std::string(token);
  }
  return std::string(token);
}

// What Decode writes for `id` after `anchor` (decoders that drop a first token's leading
// space do not drop this one's); nullopt when the anchor's text does not stay a prefix.
std::optional<std::string> DecodeAfter(const Tokenizer& tokenizer, int32_t anchor, const std::string& anchor_text,
                                       int32_t id) {
  const int32_t ids[2] = {anchor, id};
  std::string text = tokenizer.Decode(ids, /*skip_special_tokens=*/false);
  if (!text.starts_with(anchor_text)) return std::nullopt;
  return text.substr(anchor_text.size());
}

}  // namespace

absl::StatusOr<VocabularyBytes> TokenBytesTable(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.vocab_size();
  const std::vector<int32_t> eos = tokenizer.eos_ids();
  const absl::flat_hash_set<int32_t> eos_set(eos.begin(), eos.end());
  // An anchor token that decodes to itself, so decoders' first-token rules stay out of the way.
  std::optional<int32_t> anchor;
  for (const char* candidate : {"a", "x", "e", "t"}) {
    anchor = tokenizer.TokenToId(candidate);
    if (anchor && !tokenizer.IsSpecial(*anchor)) break;
    anchor.reset();
  }
  if (!anchor) return absl::FailedPreconditionError("the tokenizer has no token for 'a', 'x', 'e' or 't'");
  const std::string anchor_text = tokenizer.Decode(absl::MakeConstSpan(&*anchor, 1), false);

  bool byte_fallback = false;
  if (const auto id = tokenizer.TokenToId("<0x41>"); id && !tokenizer.IsSpecial(*id)) {
    byte_fallback = DecodeAfter(tokenizer, *anchor, anchor_text, *id) == "A";
  }
  // Pick the spelling that agrees with Decode on a sample of tokens (those whose bytes are
  // whole characters: Decode writes U+FFFD for the rest).
  std::array<int64_t, kSpellings.size()> mismatches = {};
  int64_t compared = 0;
  const int32_t stride = std::max(1, n / 4000);
  for (int32_t id = 0; id < n; id += stride) {
    if (tokenizer.IsSpecial(id) || eos_set.contains(id)) continue;
    const std::string token = tokenizer.IdToToken(id);
    if (token.empty()) continue;
    const std::optional<std::string> decoded = DecodeAfter(tokenizer, *anchor, anchor_text, id);
    if (!decoded) continue;
    bool any = false;
    for (size_t s = 0; s < kSpellings.size(); ++s) {
      const std::string spelled = Spell(token, kSpellings[s], byte_fallback);
      if (!IsValidUtf8(spelled)) continue;
      any = true;
      if (spelled != *decoded) ++mismatches[s];
    }
    compared += any;
  }
  const size_t best = std::min_element(mismatches.begin(), mismatches.end()) - mismatches.begin();
  if (compared == 0 || mismatches[best] != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot tell how this tokenizer's token strings map to bytes: neither byte-level, '▁'-for-space nor literal "
        "spelling matches Decode on all of ",
        compared, " sampled tokens"));
  }
  VocabularyBytes table;
  table.bytes.resize(n);
  table.kinds.assign(n, TokenKind::kNever);
  for (int32_t id = 0; id < n; ++id) {
    if (eos_set.contains(id)) {
      table.kinds[id] = TokenKind::kEos;
      continue;
    }
    if (tokenizer.IsSpecial(id)) continue;
    const std::string token = tokenizer.IdToToken(id);
    if (token.empty()) continue;
    table.bytes[id] = Spell(token, kSpellings[best], byte_fallback);
    if (!table.bytes[id].empty()) table.kinds[id] = TokenKind::kText;
  }
  return table;
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::Create(VocabularyBytes table) {
  auto vocab = std::shared_ptr<TokenVocabulary>(new TokenVocabulary());
  vocab->bytes_ = std::move(table.bytes);
  vocab->kinds_ = std::move(table.kinds);
  vocab->bytes_.resize(vocab->kinds_.size());
  for (int32_t id = 0; id < vocab->size(); ++id) {
    if (vocab->kinds_[id] == TokenKind::kEos) vocab->eos_ids_.push_back(id);
    if (vocab->kinds_[id] == TokenKind::kText && vocab->bytes_[id].empty()) vocab->kinds_[id] = TokenKind::kNever;
    if (vocab->kinds_[id] == TokenKind::kText) vocab->sorted_ids_.push_back(id);
  }
  auto& ids = vocab->sorted_ids_;
  const auto& bytes = vocab->bytes_;
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return bytes[a] != bytes[b] ? bytes[a] < bytes[b] : a < b; });
  const uint32_t n = static_cast<uint32_t>(ids.size());
  vocab->sorted_lcp_.assign(n, 0);
  for (uint32_t i = 1; i < n; ++i) {
    const std::string& a = bytes[ids[i - 1]];
    const std::string& b = bytes[ids[i]];
    uint32_t l = 0;
    while (l < a.size() && l < b.size() && a[l] == b[l]) ++l;
    vocab->sorted_lcp_[i] = l;
  }
  // The trie, depth first: `path` holds the open nodes, path[d] at depth d.
  auto& trie = vocab->trie_;
  trie.push_back({0, 0, 0, 0, 0});
  std::vector<uint32_t> path = {0};
  for (uint32_t i = 0; i < n; ++i) {
    const std::string& token = bytes[ids[i]];
    vocab->max_token_bytes_ = std::max(vocab->max_token_bytes_, token.size());
    const uint32_t keep = std::min<uint32_t>(vocab->sorted_lcp_[i], static_cast<uint32_t>(token.size()));
    while (path.size() > keep + 1) {
      TrieNode& node = trie[path.back()];
      node.end = static_cast<uint32_t>(trie.size());
      node.hi = i;
      path.pop_back();
    }
    for (size_t d = path.size() - 1; d < token.size(); ++d) {
      path.push_back(static_cast<uint32_t>(trie.size()));
      trie.push_back({0, i, i, i, static_cast<uint8_t>(token[d])});
    }
    trie[path.back()].mid = i + 1;  // ends here (tokens equal to the node's prefix sort first)
  }
  while (!path.empty()) {
    TrieNode& node = trie[path.back()];
    node.end = static_cast<uint32_t>(trie.size());
    node.hi = n;
    path.pop_back();
  }
  return vocab;
}

}  // namespace tpserve
