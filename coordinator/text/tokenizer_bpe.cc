// BPE model: loading from tokenizer.json and merge-by-rank encoding with a priority
// queue over a linked list of symbols. Tested through tests/tokenizer_test.cc.
#include "coordinator/text/tokenizer_bpe.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/text/tokenizer_unicode.h"
#include "kernels/base.h"

namespace tpserve::tokenizer_internal {
namespace {

absl::StatusOr<std::pair<std::string, std::string>> ParseMergeEntry(const Json& m,
                                                                    const JsonPath& at) {
  if (m.is_string()) {  // legacy "a b"
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return at.Error(
          absl::StrCat("expected \"left right\" with exactly one space, got \"", s, "\""));
    }
    return std::make_pair(s.substr(0, space), s.substr(space + 1));
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return std::make_pair(m[0].get<std::string>(), m[1].get<std::string>());
  }
  return at.Error(absl::StrCat("expected \"left right\" or [\"left\", \"right\"], got ", m.dump()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::WithOptions(const Json& j, const JsonPath& at) {
  if (!j.is_object()) return at.Error(absl::StrCat("expected an object, got ", j.type_name()));
  if (const auto type = j.find("type"); type != j.end() && !type->is_null()) {
    if (!type->is_string() || type->get<std::string>() != "BPE") {
      return at.Field("type").Error(
          absl::StrCat("unsupported model type ", type->dump(), " (supported: BPE)"));
    }
  }
  auto model = std::unique_ptr<BpeModel>(new BpeModel());
  if (const auto dropout = j.find("dropout"); dropout != j.end() && !dropout->is_null()) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      return at.Field("dropout").Error(
          "BPE dropout is not supported for inference; set it to null");
    }
  }
  TP_ASSIGN_OR_RETURN(model->fuse_unk_, BoolOr(j, "fuse_unk", false, at));
  TP_ASSIGN_OR_RETURN(model->byte_fallback_, BoolOr(j, "byte_fallback", false, at));
  TP_ASSIGN_OR_RETURN(model->ignore_merges_, BoolOr(j, "ignore_merges", false, at));
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string()) return at.Field(key).Error("expected a string or null");
    (key[0] == 'c' ? model->continuing_subword_prefix_ : model->end_of_word_suffix_) =
        it->get<std::string>();
  }
  return model;
}

void BpeModel::AddToken(std::string token, int32_t id) {
  if (static_cast<size_t>(id) >= id_to_token_.size()) {
    id_to_token_.resize(id + 1);
    has_id_.resize(id + 1, false);
  }
  if (const auto it = vocab_.find(absl::string_view(token)); it != vocab_.end()) {
    const int32_t earlier = *it;
    if (earlier == id) return;
    // A repeated token: its earlier id no longer decodes (erased before its string changes,
    // which the set hashes).
    vocab_.erase(it);
    has_id_[earlier] = false;
    id_to_token_[earlier].clear();
  } else {
    aliases_.erase(token);
  }
  if (has_id_[id]) {
    // The id was another token's: that token still encodes to it (as the tokenizers library's
    // token -> id map keeps it) but no longer names it.
    vocab_.erase(id);
    aliases_[std::move(id_to_token_[id])] = id;
  }
  id_to_token_[id] = std::move(token);
  has_id_[id] = true;
  vocab_.insert(id);
}

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& j, const JsonPath& at) {
  TP_ASSIGN_OR_RETURN(auto model, WithOptions(j, at));

  // Vocabulary.
  const auto vocab = j.find("vocab");
  if (vocab == j.end() || !vocab->is_object()) {
    return at.Field("vocab").Error("missing: expected an object mapping token strings to ids");
  }
  model->vocab_.reserve(vocab->size());
  for (const auto& [token, id_json] : vocab->items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > INT32_MAX) {
      return at.Field("vocab").Error(
          absl::StrCat("token \"", token, "\" has invalid id ", id_json.dump()));
    }
    model->AddToken(token, static_cast<int32_t>(id_json.get<int64_t>()));
  }

  // Merges: rank = position; a later duplicate of a pair replaces the earlier one.
  TP_ASSIGN_OR_RETURN(const Json* merges, RequireArray(j, "merges", at));
  model->merges_.reserve(merges->size());
  const size_t prefix_len = model->continuing_subword_prefix_.size();
  uint32_t rank = 0;
  for (size_t i = 0; i < merges->size(); ++i) {
    const JsonPath merge_at = at.Field("merges").Index(i);
    const Json& m = (*merges)[i];
    if (m.is_string() && m.get<std::string>().rfind("#version", 0) == 0) continue;
    TP_ASSIGN_OR_RETURN(const auto pair, ParseMergeEntry(m, merge_at));
    const auto a = model->TokenToId(pair.first);
    const auto b = model->TokenToId(pair.second);
    const std::string merged =
        pair.first + (pair.second.size() >= prefix_len ? pair.second.substr(prefix_len) : "");
    const auto merged_id = model->TokenToId(merged);
    for (const auto& [name, found] : {std::make_pair(pair.first, a), std::make_pair(pair.second, b),
                                      std::make_pair(merged, merged_id)}) {
      if (!found) return merge_at.Error(absl::StrCat("token \"", name, "\" is not in model.vocab"));
    }
    model->merges_[PairKey(*a, *b)] = Merge{rank++, *merged_id};
  }
  TP_RETURN_IF_ERROR(model->Finish(j, at));
  return model;
}

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromVocabulary(const Json& j,
                                                                   const JsonPath& at,
                                                                   BpeVocabulary vocabulary) {
  for (const char* key : {"vocab", "merges"}) {
    if (j.contains(key)) {
      return at.Field(key).Error("must be absent: the vocabulary and merges are given as data");
    }
  }
  TP_ASSIGN_OR_RETURN(auto model, WithOptions(j, at));
  if (!model->continuing_subword_prefix_.empty()) {
    return at.Field("continuing_subword_prefix")
        .Error("must be empty when merges are given as ids");
  }
  model->vocab_.reserve(vocabulary.tokens.size());
  int32_t max_id = -1;
  for (const auto& [token, id] : vocabulary.tokens) max_id = std::max(max_id, id);
  model->id_to_token_.reserve(max_id + 1);
  model->has_id_.reserve(max_id + 1);
  for (auto& [token, id] : vocabulary.tokens) {
    if (id < 0)
      return at.Field("vocab").Error(absl::StrCat("token \"", token, "\" has invalid id ", id));
    model->AddToken(std::move(token), id);
  }
  model->merges_.reserve(vocabulary.merges.size());
  uint32_t rank = 0;
  for (const BpeVocabulary::Merge& m : vocabulary.merges) {
    for (const int32_t id : {m.left, m.right, m.merged}) {
      if (model->IdToToken(id) == nullptr) {
        return at.Field("merges").Index(rank).Error(
            absl::StrCat("id ", id, " is not in the vocabulary"));
      }
    }
    model->merges_[PairKey(m.left, m.right)] = Merge{rank++, m.merged};
  }
  TP_RETURN_IF_ERROR(model->Finish(j, at));
  return model;
}

absl::Status BpeModel::Finish(const Json& j, const JsonPath& at) {
  // Character junctions a merge can join (see MergeWord); only meaningful when
  // symbols are plain characters.
  splittable_ = continuing_subword_prefix_.empty() && end_of_word_suffix_.empty();
  if (splittable_) {
    // Each token's first and last character, read in id order: looking them up per merge
    // instead would visit the token strings in random order, once per merge.
    std::vector<char32_t> first_char(id_to_token_.size(), 0);
    std::vector<char32_t> last_char(id_to_token_.size(), 0);
    for (size_t id = 0; id < id_to_token_.size(); ++id) {
      const std::string& token = id_to_token_[id];
      if (token.empty()) continue;
      size_t first = 0;
      first_char[id] = NextCodePoint(token, &first);
      size_t last = token.size() - 1;
      while (last > 0 && (static_cast<unsigned char>(token[last]) & 0xC0) == 0x80) --last;
      last_char[id] = NextCodePoint(token, &last);
    }
    for (const auto& [pair, merge] : merges_) {
      junctions_.insert(PairKey(static_cast<int32_t>(last_char[pair >> 32]),
                                static_cast<int32_t>(first_char[pair & 0xFFFFFFFFu])));
    }
  }
  if (splittable_) {  // ids of single BMP characters, looked up for every character
    char_ids_.assign(0x10000, -1);
    const auto single_char = [&](const std::string& token, int32_t id) {
      size_t pos = 0;
      if (token.empty()) return;
      const char32_t c = NextCodePoint(token, &pos);
      if (pos == token.size() && c < 0x10000) char_ids_[c] = id;
    };
    for (const int32_t id : vocab_) single_char(id_to_token_[id], id);
    for (const auto& [token, id] : aliases_) single_char(token, id);
  }
  for (const int32_t id : vocab_) {
    max_token_bytes_ = std::max(max_token_bytes_, static_cast<int64_t>(id_to_token_[id].size()));
  }
  for (const auto& [token, id] : aliases_) {
    max_token_bytes_ = std::max(max_token_bytes_, static_cast<int64_t>(token.size()));
  }
  for (int b = 0; b < 256; ++b) {
    const auto id = TokenToId(absl::StrFormat("<0x%02X>", b));
    byte_ids_[b] = id.value_or(-1);
  }
  if (const auto unk = j.find("unk_token"); unk != j.end() && !unk->is_null()) {
    if (!unk->is_string()) return at.Field("unk_token").Error("expected a string or null");
    // A file may name an unk token its vocabulary lacks; such a model just has none.
    unk_id_ = TokenToId(unk->get<std::string>());
  }
  return absl::OkStatus();
}

bool BpeModel::fuses_unknown_runs() const {
  if (!fuse_unk_ || !unk_id_) return false;
  if (!byte_fallback_) return true;
  for (int32_t id : byte_ids_) {
    if (id < 0) return true;
  }
  return false;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  const auto it = vocab_.find(absl::string_view(token.data(), token.size()));
  if (it != vocab_.end()) return *it;
  const auto alias = aliases_.find(absl::string_view(token.data(), token.size()));
  if (alias == aliases_.end()) return std::nullopt;
  return alias->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = TokenToId(word)) {
      ids->push_back(*id);
      return;
    }
  }
  MergeWord(word, ids);
}

struct BpeModel::Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t len;  // bytes covered; 0 once merged into its left neighbour
};

struct BpeModel::Candidate {
  uint32_t rank;
  int32_t pos;
  int32_t new_id;
  bool operator<(const Candidate& o) const {  // "lower priority than"
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

void BpeModel::MergeWord(std::string_view word, std::vector<int32_t>* ids) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  // Per symbol: its code point when it is a whole character with its own vocabulary
  // entry, else 0 (byte-fallback and unk symbols).
  std::vector<char32_t> chars;
  chars.reserve(word.size());
  const auto add = [&](int32_t id, uint32_t len, char32_t c) {
    const auto n = static_cast<int32_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, len});
    chars.push_back(c);
  };

  // Initial symbols: one per character, else its byte tokens, else unk.
  // An unknown character waiting to be added, so that fuse_unk can extend it.
  int32_t unk_id = -1;
  uint32_t unk_len = 0;
  std::string piece;
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t start = pos;
    const char32_t c = NextCodePoint(word, &pos);
    const auto byte_len = static_cast<uint32_t>(pos - start);
    std::optional<int32_t> id;
    if (splittable_) {
      id = c < char_ids_.size()
               ? (char_ids_[c] < 0 ? std::nullopt : std::optional<int32_t>(char_ids_[c]))
               : TokenToId(word.substr(start, pos - start));
      if (!id) piece.assign(word.substr(start, pos - start));
    } else {
      piece.assign(word.substr(start, pos - start));
      if (start > 0) piece.insert(0, continuing_subword_prefix_);
      if (pos == word.size()) piece.append(end_of_word_suffix_);
      id = TokenToId(piece);
    }
    if (id) {
      if (unk_id >= 0) {
        add(unk_id, unk_len, 0);
        unk_id = -1;
      }
      add(*id, byte_len, c);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char ch : piece) all_bytes = all_bytes && byte_ids_[static_cast<unsigned char>(ch)] >= 0;
      if (all_bytes) {
        // As the tokenizers library does, a pending unk is not flushed first.
        for (char ch : piece) add(byte_ids_[static_cast<unsigned char>(ch)], 1, 0);
        continue;
      }
    }
    if (!unk_id_) continue;
    if (unk_id >= 0 && fuse_unk_) {
      unk_len += byte_len;
      continue;
    }
    if (unk_id >= 0) add(unk_id, unk_len, 0);
    unk_id = *unk_id_;
    unk_len = byte_len;
  }
  if (unk_id >= 0) add(unk_id, unk_len, 0);

  // A long word (Gemma feeds whole texts here) is merged in independent segments: no
  // symbol can ever span a boundary between characters c1 c2 when no merge joins a
  // left part ending in c1 to a right part starting with c2. The result is the same,
  // with small heaps instead of one per-text heap.
  std::vector<Candidate> heap;
  size_t segment = 0;
  const auto n = static_cast<int32_t>(symbols.size());
  for (int32_t k = 1; k <= n; ++k) {
    if (k < n && !(splittable_ && chars[k - 1] != 0 && chars[k] != 0 &&
                   !junctions_.contains(PairKey(chars[k - 1], chars[k])))) {
      continue;
    }
    symbols[segment].prev = -1;
    symbols[k - 1].next = -1;
    MergeSegment(symbols, static_cast<int32_t>(segment), k, &heap, ids);
    segment = k;
  }
}

void BpeModel::MergeSegment(std::vector<Symbol>& symbols, int32_t begin, int32_t end,
                            std::vector<Candidate>* heap, std::vector<int32_t>* ids) const {
  // Merge lowest rank first; ties go to the leftmost position.
  heap->clear();
  for (int32_t i = begin; i + 1 < end; ++i) {
    if (const Merge* m = FindMerge(symbols[i].id, symbols[i + 1].id)) {
      heap->push_back({m->rank, i, m->new_id});
    }
  }
  std::make_heap(heap->begin(), heap->end());
  const auto push = [heap](Candidate c) {
    heap->push_back(c);
    std::push_heap(heap->begin(), heap->end());
  };
  while (!heap->empty()) {
    std::pop_heap(heap->begin(), heap->end());
    const Candidate top = heap->back();
    heap->pop_back();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next == -1) continue;
    const int32_t right_pos = left.next;
    const Symbol right = symbols[right_pos];
    const Merge* current = FindMerge(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    symbols[right_pos].len = 0;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const Merge* m = FindMerge(symbols[left.prev].id, left.id)) {
        push({m->rank, left.prev, m->new_id});
      }
    }
    if (left.next >= 0) {
      if (const Merge* m = FindMerge(left.id, symbols[left.next].id)) {
        push({m->rank, top.pos, m->new_id});
      }
    }
  }
  for (int32_t i = begin; i < end; ++i) {
    if (symbols[i].len != 0) ids->push_back(symbols[i].id);
  }
}

}  // namespace tpserve::tokenizer_internal
