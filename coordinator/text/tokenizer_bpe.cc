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

void BpeModel::TokenStrings::Assign(absl::Span<const absl::string_view> by_id) {
  size_t total = 0;
  for (const absl::string_view token : by_id) total += token.size();
  bytes_.clear();
  bytes_.reserve(total);
  offsets_.clear();
  offsets_.reserve(by_id.size() + 1);
  offsets_.push_back(0);
  for (const absl::string_view token : by_id) {
    bytes_.append(token.data(), token.size());
    offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
  }
}

template <typename Listing>
absl::Status BpeModel::SetTokens(const Listing& tokens, const JsonPath& at) {
  // The listing is resolved over views of the caller's strings, then copied end to end.
  int32_t max_id = -1;
  size_t total_bytes = 0;
  for (const auto& [token, id] : tokens) {
    if (id < 0) {
      return at.Field("vocab").Error(
          absl::StrCat("token \"", std::string(token), "\" has invalid id ", id));
    }
    max_id = std::max(max_id, id);
    total_bytes += token.size();
  }
  if (total_bytes > UINT32_MAX) {
    return at.Field("vocab").Error(
        absl::StrCat("the tokens take ", total_bytes, " bytes; at most 4 GiB is supported"));
  }
  std::vector<absl::string_view> by_id(max_id + 1);
  has_id_.assign(max_id + 1, false);
  using ByView = IdByToken<std::vector<absl::string_view>>;
  IdSet<std::vector<absl::string_view>> index(tokens.size(), ByView{&by_id}, ByView{&by_id});
  absl::flat_hash_map<absl::string_view, int32_t> aliases;
  for (const auto& [string, id] : tokens) {
    const absl::string_view token(string);
    if (const auto it = index.find(token); it != index.end()) {
      const int32_t earlier = *it;
      if (earlier == id) continue;
      // A repeated token: its earlier id no longer decodes (erased before its string changes,
      // which the set hashes).
      index.erase(it);
      has_id_[earlier] = false;
      by_id[earlier] = absl::string_view();
    } else {
      aliases.erase(token);
    }
    if (has_id_[id]) {
      // The id was another token's: that token still encodes to it (as the tokenizers library's
      // token -> id map keeps it) but no longer names it.
      index.erase(id);
      aliases[by_id[id]] = id;
    }
    by_id[id] = token;
    has_id_[id] = true;
    index.insert(id);
  }
  tokens_.Assign(by_id);
  vocab_.reserve(index.size());
  for (const int32_t id : index) vocab_.insert(id);
  for (const auto& [token, id] : aliases) aliases_.emplace(std::string(token), id);
  return absl::OkStatus();
}

void BpeModel::SetMerges(absl::Span<const BpeVocabulary::Merge> merges) {
  // Counting sort by left id.
  merge_rows_.assign(static_cast<size_t>(max_id()) + 2, 0);
  for (const BpeVocabulary::Merge& m : merges) ++merge_rows_[m.left + 1];
  for (size_t i = 1; i < merge_rows_.size(); ++i) merge_rows_[i] += merge_rows_[i - 1];
  merges_.resize(merges.size());
  {
    std::vector<uint32_t> next(merge_rows_.begin(), merge_rows_.end() - 1);
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const BpeVocabulary::Merge& m = merges[rank];
      merges_[next[m.left]++] = Merge{m.right, static_cast<uint32_t>(rank), m.merged};
    }
  }
  // Sort each row by right id, keeping the last (highest rank) of each pair, and close the gaps
  // left behind.
  uint32_t out = 0;
  for (size_t a = 0; a + 1 < merge_rows_.size(); ++a) {
    const auto begin = merges_.begin() + merge_rows_[a];
    const auto end = merges_.begin() + merge_rows_[a + 1];
    std::sort(begin, end, [](const Merge& x, const Merge& y) {
      return x.right != y.right ? x.right < y.right : x.rank < y.rank;
    });
    merge_rows_[a] = out;
    for (auto it = begin; it != end; ++it) {
      if (it + 1 != end && (it + 1)->right == it->right) continue;
      merges_[out++] = *it;
    }
  }
  merge_rows_.back() = out;
  if (out < merges_.size()) {  // repeated pairs
    merges_.resize(out);
    merges_.shrink_to_fit();
  }
  // Directories of the long rows, whose entries are re-sorted by bucket: buckets >= len / 4.
  const size_t words = (merge_rows_.size() - 1 + 63) / 64;
  directory_rows_.assign(words, 0);
  directory_rank_.assign(words, 0);
  for (size_t a = 0; a + 1 < merge_rows_.size(); ++a) {
    if (a % 64 == 0) directory_rank_[a / 64] = static_cast<uint32_t>(row_directories_.size());
    const uint32_t begin = merge_rows_[a];
    const uint32_t end = merge_rows_[a + 1];
    if (end - begin <= kDirectoryRow) continue;
    RowDirectory d{static_cast<uint32_t>(directory_.size()), 1};
    while ((1u << d.bits) * 4 < end - begin) ++d.bits;
    std::sort(merges_.begin() + begin, merges_.begin() + end, [&](const Merge& x, const Merge& y) {
      const uint32_t bx = DirectoryBucket(x.right, d.bits);
      const uint32_t by = DirectoryBucket(y.right, d.bits);
      return bx != by ? bx < by : x.right < y.right;
    });
    uint32_t k = begin;
    for (uint32_t bucket = 0; bucket < (1u << d.bits); ++bucket) {
      while (k < end && DirectoryBucket(merges_[k].right, d.bits) < bucket) ++k;
      directory_.push_back(k);
    }
    directory_.push_back(end);
    directory_rows_[a / 64] |= uint64_t{1} << (a % 64);
    row_directories_.push_back(d);
  }
  directory_.shrink_to_fit();
  row_directories_.shrink_to_fit();
}

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& j, const JsonPath& at) {
  TP_ASSIGN_OR_RETURN(auto model, WithOptions(j, at));

  // Vocabulary.
  const auto vocab = j.find("vocab");
  if (vocab == j.end() || !vocab->is_object()) {
    return at.Field("vocab").Error("missing: expected an object mapping token strings to ids");
  }
  std::vector<std::pair<absl::string_view, int32_t>> tokens;
  tokens.reserve(vocab->size());
  for (const auto& [token, id_json] : vocab->get_ref<const Json::object_t&>()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > INT32_MAX) {
      return at.Field("vocab").Error(
          absl::StrCat("token \"", token, "\" has invalid id ", id_json.dump()));
    }
    tokens.emplace_back(token, static_cast<int32_t>(id_json.get<int64_t>()));
  }
  TP_RETURN_IF_ERROR(model->SetTokens(tokens, at));

  // Merges: rank = position; a later duplicate of a pair replaces the earlier one.
  TP_ASSIGN_OR_RETURN(const Json* merges, RequireArray(j, "merges", at));
  std::vector<BpeVocabulary::Merge> resolved;
  resolved.reserve(merges->size());
  const size_t prefix_len = model->continuing_subword_prefix_.size();
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
    resolved.push_back({*a, *b, *merged_id});
  }
  model->SetMerges(resolved);
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
  TP_RETURN_IF_ERROR(model->SetTokens(vocabulary.tokens, at));
  // The model has its copy: free the strings before the merge tables grow.
  std::vector<std::pair<std::string, int32_t>>().swap(vocabulary.tokens);
  for (size_t rank = 0; rank < vocabulary.merges.size(); ++rank) {
    const BpeVocabulary::Merge& m = vocabulary.merges[rank];
    for (const int32_t id : {m.left, m.right, m.merged}) {
      if (!model->HasToken(id)) {
        return at.Field("merges").Index(rank).Error(
            absl::StrCat("id ", id, " is not in the vocabulary"));
      }
    }
  }
  model->SetMerges(vocabulary.merges);
  std::vector<BpeVocabulary::Merge>().swap(vocabulary.merges);
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
    const size_t n = static_cast<size_t>(max_id() + 1);
    std::vector<char32_t> first_char(n, 0);
    std::vector<char32_t> last_char(n, 0);
    for (size_t id = 0; id < n; ++id) {
      const absl::string_view view = tokens_[static_cast<int32_t>(id)];
      const std::string_view token(view.data(), view.size());
      if (token.empty()) continue;
      size_t first = 0;
      first_char[id] = NextCodePoint(token, &first);
      size_t last = token.size() - 1;
      while (last > 0 && (static_cast<unsigned char>(token[last]) & 0xC0) == 0x80) --last;
      last_char[id] = NextCodePoint(token, &last);
    }
    for (size_t left = 0; left + 1 < merge_rows_.size(); ++left) {
      for (uint32_t k = merge_rows_[left]; k < merge_rows_[left + 1]; ++k) {
        junctions_.insert(PairKey(static_cast<int32_t>(last_char[left]),
                                  static_cast<int32_t>(first_char[merges_[k].right])));
      }
    }
  }
  if (splittable_) {  // ids of single BMP characters, looked up for every character
    char_ids_.assign(0x10000, -1);
    const auto single_char = [&](absl::string_view view, int32_t id) {
      const std::string_view token(view.data(), view.size());
      size_t pos = 0;
      if (token.empty()) return;
      const char32_t c = NextCodePoint(token, &pos);
      if (pos == token.size() && c < 0x10000) char_ids_[c] = id;
    };
    for (const int32_t id : vocab_) single_char(tokens_[id], id);
    for (const auto& [token, id] : aliases_) single_char(token, id);
  }
  for (const int32_t id : vocab_) {
    max_token_bytes_ = std::max(max_token_bytes_, static_cast<int64_t>(tokens_[id].size()));
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

std::optional<absl::string_view> BpeModel::IdToToken(int32_t id) const {
  if (!HasToken(id)) return std::nullopt;
  return tokens_[id];
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
