// GGUF vocabularies as transformers spells them, and their merges. Tested through
// tests/tokenizer_gguf_test.cc.
#include "coordinator/text/tokenizer_gguf_vocab.h"

#include <algorithm>
#include <string_view>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "coordinator/text/tokenizer_byte_level.h"
#include "coordinator/text/tokenizer_unicode.h"

namespace tpserve::tokenizer_internal {
namespace {

// The tokenizer's text helpers take std::string_view; Debian's abseil has its own.
std::string_view Std(absl::string_view s) { return {s.data(), s.size()}; }

// Python's str.isspace() for one code point (what str.strip() removes).
bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

void AppendSpelled(absl::string_view token, GgufSpelling spelling, std::string* out) {
  if (spelling == GgufSpelling::kAsIs) {
    out->append(token.data(), token.size());
    return;
  }
  size_t pos = 0;
  size_t chars = 0;
  bool all_space = true;
  bool all_byte_chars = true;
  while (pos < token.size()) {
    const char32_t c = NextCodePoint(Std(token), &pos);
    ++chars;
    all_space = all_space && IsPythonSpace(c);
    all_byte_chars = all_byte_chars && ByteLevelCharToByte(c) >= 0;
  }
  if (spelling == GgufSpelling::kGemma && all_space && token.find(' ') != absl::string_view::npos) {
    for (size_t i = 0; i < chars; ++i) out->append("\u2581");
  } else if (spelling == GgufSpelling::kByteLevel && !all_byte_chars) {
    out->append(ToByteLevel(Std(token)));
  } else {
    out->append(token.data(), token.size());
  }
}

}  // namespace

uint64_t GgufVocab::Hash(absl::string_view token) { return absl::Hash<absl::string_view>{}(token); }

GgufVocab::GgufVocab(absl::Span<const absl::string_view> tokens, GgufSpelling spelling) {
  offsets_.reserve(tokens.size() + 1);
  offsets_.push_back(0);
  for (const absl::string_view token : tokens) {
    AppendSpelled(token, spelling, &arena_);
    offsets_.push_back(arena_.size());
  }
  uint64_t capacity = 16;
  while (capacity < 2 * tokens.size()) capacity *= 2;
  slots_.assign(capacity, 0);
  mask_ = capacity - 1;
  std::vector<int32_t> distinct_of_id(tokens.size(), -1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const absl::string_view token = spelled(static_cast<int32_t>(i));
    const uint64_t hash = Hash(token);
    uint64_t* slot = Slot(token, hash);
    const auto id = static_cast<int32_t>(i);
    if (*slot == 0) {
      distinct_of_id[i] = static_cast<int32_t>(distinct_.size());
      distinct_.emplace_back(id, id);
    } else {  // seen before: this later index replaces its id
      const int32_t d = distinct_of_id[(*slot & 0xFFFFFFFFu) - 1];
      distinct_[d].second = id;
      distinct_of_id[i] = d;
    }
    *slot = (hash >> 32) << 32 | static_cast<uint64_t>(id + 1);
  }
}

uint64_t* GgufVocab::Slot(absl::string_view token, uint64_t hash) {
  const uint64_t tag = hash >> 32;
  for (uint64_t i = hash & mask_;; i = (i + 1) & mask_) {
    const uint64_t e = slots_[i];
    if (e == 0) return &slots_[i];
    if (e >> 32 == tag && spelled(static_cast<int32_t>((e & 0xFFFFFFFFu) - 1)) == token)
      return &slots_[i];
  }
}

std::optional<int32_t> GgufVocab::Find(absl::string_view token, uint64_t hash) const {
  const uint64_t tag = hash >> 32;
  for (uint64_t i = hash & mask_;; i = (i + 1) & mask_) {
    const uint64_t e = slots_[i];
    if (e == 0) return std::nullopt;
    if (e >> 32 == tag) {
      const auto id = static_cast<int32_t>((e & 0xFFFFFFFFu) - 1);
      if (spelled(id) == token) return id;
    }
  }
}

std::vector<std::pair<std::string, int32_t>> GgufVocab::ModelTokens() const {
  std::vector<std::pair<std::string, int32_t>> out;
  out.reserve(distinct_.size());
  for (const auto& [first, id] : distinct_) out.emplace_back(std::string(spelled(id)), id);
  return out;
}

int32_t GgufAddedTokens::Add(absl::string_view content, bool special) {
  if (const auto it = index_.find(content); it != index_.end()) {
    entries_[it->second].special |= special;
    return entries_[it->second].id;
  }
  const auto model_size = static_cast<int32_t>(vocab_.distinct().size());
  int32_t id = 0;
  if (const auto model_id = vocab_.Find(content)) {
    id = *model_id;
  } else if (!max_id_ || (*max_id_ < model_size && model_size > 0)) {
    id = model_size;
  } else {
    id = *max_id_ + 1;
  }
  max_id_ = std::max(max_id_.value_or(id), id);
  index_.emplace(std::string(content), entries_.size());
  entries_.push_back({std::string(content), id, special});
  return id;
}

std::optional<int32_t> GgufAddedTokens::Find(absl::string_view content) const {
  const auto it = index_.find(content);
  return it == index_.end() ? std::nullopt : std::optional<int32_t>(entries_[it->second].id);
}

nlohmann::json GgufAddedTokens::ToJson() const {
  std::vector<const Entry*> sorted;
  for (const Entry& e : entries_) sorted.push_back(&e);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Entry* a, const Entry* b) { return a->id < b->id; });
  nlohmann::json out = nlohmann::json::array();
  for (const Entry* e : sorted) {
    out.push_back({{"id", e->id},
                   {"content", e->content},
                   {"single_word", false},
                   {"lstrip", false},
                   {"rstrip", false},
                   {"normalized", false},
                   {"special", e->special}});
  }
  return out;
}

absl::StatusOr<std::vector<BpeVocabulary::Merge>> GgufFileMerges(const nlohmann::json& merges,
                                                                 const GgufVocab& vocab,
                                                                 absl::string_view source) {
  const auto error = [&](size_t i, absl::string_view message) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": tokenizer.ggml.merges: entry ", i, " ", message));
  };
  if (!merges.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": tokenizer.ggml.merges: expected an array of \"left right\" strings"));
  }
  std::vector<BpeVocabulary::Merge> out;
  out.reserve(merges.size());
  std::string merged;
  for (size_t i = 0; i < merges.size(); ++i) {
    if (!merges[i].is_string()) return error(i, "is not a string");
    const std::string& s = merges[i].get_ref<const std::string&>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return error(i, absl::StrCat("\"", s, "\" is not two tokens separated by one space"));
    }
    const absl::string_view left = absl::string_view(s).substr(0, space);
    const absl::string_view right = absl::string_view(s).substr(space + 1);
    merged = absl::StrCat(left, right);
    const auto l = vocab.Find(left);
    const auto r = vocab.Find(right);
    const auto lr = vocab.Find(merged);
    if (!l || !r || !lr) {
      return error(i, absl::StrCat("\"", s, "\": \"",
                                   !l   ? left
                                   : !r ? right
                                        : absl::string_view(merged),
                                   "\" is not in tokenizer.ggml.tokens"));
    }
    out.push_back({*l, *r, *lr});
  }
  return out;
}

std::vector<BpeVocabulary::Merge> DeriveGgufMerges(const GgufVocab& vocab,
                                                   absl::Span<const double> score_by_id) {
  struct Candidate {
    double score;
    int32_t left_chars;
    int32_t right_chars;
    int32_t order;
    BpeVocabulary::Merge merge;
  };
  std::vector<Candidate> candidates;
  std::vector<size_t> ends;  // byte offset after each character
  std::vector<uint64_t> left_hashes;
  std::vector<uint64_t> right_hashes;
  const auto& distinct = vocab.distinct();
  for (size_t order = 0; order < distinct.size(); ++order) {
    const int32_t id = distinct[order].second;
    const absl::string_view token = vocab.spelled(id);
    ends.clear();
    size_t pos = 0;
    while (pos < token.size()) {
      NextCodePoint(Std(token), &pos);
      ends.push_back(pos);
    }
    const auto chars = static_cast<int32_t>(ends.size());
    left_hashes.clear();
    right_hashes.clear();
    for (int32_t k = 1; k < chars; ++k) {
      left_hashes.push_back(GgufVocab::Hash(token.substr(0, ends[k - 1])));
      right_hashes.push_back(GgufVocab::Hash(token.substr(ends[k - 1])));
      vocab.Prefetch(left_hashes.back());
      vocab.Prefetch(right_hashes.back());
    }
    for (int32_t k = 1; k < chars; ++k) {
      const auto left = vocab.Find(token.substr(0, ends[k - 1]), left_hashes[k - 1]);
      if (!left) continue;
      const auto right = vocab.Find(token.substr(ends[k - 1]), right_hashes[k - 1]);
      if (!right) continue;
      candidates.push_back(
          {score_by_id[id], k, chars - k, static_cast<int32_t>(order), {*left, *right, id}});
    }
  }
  // Python's sort is stable and the candidates come in token order, so `order` breaks ties
  // (the splits of one token never tie: their left lengths differ).
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.left_chars != b.left_chars) return a.left_chars > b.left_chars;
    if (a.right_chars != b.right_chars) return a.right_chars > b.right_chars;
    return a.order < b.order;
  });
  std::vector<BpeVocabulary::Merge> merges;
  merges.reserve(candidates.size());
  for (const Candidate& c : candidates) merges.push_back(c.merge);
  return merges;
}

}  // namespace tpserve::tokenizer_internal
