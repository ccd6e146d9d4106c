// Pre-tokenizers of the tokenizer.json pipeline, with the `tokenizers` library's split
// semantics. Tested through tests/tokenizer_test.cc.
#include "coordinator/text/tokenizer_pre_tokenizer.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/text/tokenizer_byte_level.h"
#include "coordinator/text/tokenizer_regex.h"
#include "coordinator/text/tokenizer_unicode.h"
#include "kernels/base.h"

namespace tpserve::tokenizer_internal {
namespace {

// The pattern ByteLevel(use_regex=true) splits with (GPT-2's).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// A stretch of a piece that matches the split pattern or lies between matches.
struct Segment {
  size_t start;
  size_t end;
  bool is_match;
};
using Range = std::pair<size_t, size_t>;

// Covering segments from regex matches (tokenizers' Pattern::find_matches).
std::vector<Segment> RegexSegments(const TokenizerRegex& regex, std::string_view text) {
  if (text.empty()) return {{0, 0, false}};
  std::vector<Segment> out;
  size_t prev = 0;
  for (const auto& [start, end] : regex.FindAll(text)) {
    if (prev != start) out.push_back({prev, start, false});
    out.push_back({start, end, true});
    prev = end;
  }
  if (prev != text.size()) out.push_back({prev, text.size(), false});
  return out;
}

// Covering segments where each character satisfying `pred` is its own match.
std::vector<Segment> CharSegments(std::string_view text,
                                  const std::function<bool(char32_t)>& pred) {
  if (text.empty()) return {{0, 0, false}};
  std::vector<Segment> out;
  size_t last = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    if (pred(NextCodePoint(text, &pos))) {
      if (last < start) out.push_back({last, start, false});
      out.push_back({start, pos, true});
      last = pos;
    }
  }
  if (last < text.size()) out.push_back({last, text.size(), false});
  return out;
}

// The ranges to keep for a split behavior (tokenizers' NormalizedString::split).
std::vector<Range> ApplyBehavior(const std::vector<Segment>& segments, SplitBehavior behavior) {
  std::vector<Range> out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& s : segments) out.emplace_back(s.start, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const auto& s : segments) {
        if (!s.is_match) out.emplace_back(s.start, s.end);
      }
      break;
    case SplitBehavior::kContiguous:
      for (const auto& s : segments) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.start, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& s : segments) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.start, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().first = it->start;
        } else {
          out.emplace_back(it->start, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  return out;
}

// Replaces each piece by the non-empty ranges `split` returns for it; `split` may
// rewrite the piece's text first.
void SplitEach(std::vector<PreToken>* pieces,
               const std::function<std::vector<Range>(std::string*)>& split) {
  std::vector<PreToken> out;
  out.reserve(pieces->size());
  for (PreToken& piece : *pieces) {
    for (const auto& [start, end] : split(&piece.text)) {
      if (start == end) continue;
      out.push_back({piece.text.substr(start, end - start), piece.at_input_start && start == 0});
    }
  }
  *pieces = std::move(out);
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void PreTokenize(std::vector<PreToken>* pieces) const override {
    for (const auto& step : steps_) step->PreTokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<TokenizerRegex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void PreTokenize(std::vector<PreToken>* pieces) const override {
    SplitEach(pieces, [this](std::string* text) {
      std::vector<Segment> segments = RegexSegments(*regex_, *text);
      if (invert_) {
        for (auto& s : segments) s.is_match = !s.is_match;
      }
      return ApplyBehavior(segments, behavior_);
    });
  }

 private:
  std::unique_ptr<TokenizerRegex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, const TokenizerRegex* regex)
      : add_prefix_space_(add_prefix_space), regex_(regex) {}
  void PreTokenize(std::vector<PreToken>* pieces) const override {
    SplitEach(pieces, [this](std::string* text) -> std::vector<Range> {
      if (add_prefix_space_ && (text->empty() || (*text)[0] != ' ')) text->insert(0, " ");
      if (regex_ == nullptr) return {{0, text->size()}};
      return ApplyBehavior(RegexSegments(*regex_, *text), SplitBehavior::kIsolated);
    });
    for (PreToken& piece : *pieces) piece.text = ToByteLevel(piece.text);
  }

 private:
  bool add_prefix_space_;
  const TokenizerRegex* regex_;  // GPT-2's pattern, or null when use_regex is false
};

enum class PrependScheme { kFirst, kNever, kAlways };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    AppendUtf8(replacement, &replacement_utf8_);
  }
  void PreTokenize(std::vector<PreToken>* pieces) const override {
    for (PreToken& piece : *pieces) {
      std::string replaced;
      replaced.reserve(piece.text.size());
      for (char ch : piece.text) {
        if (ch == ' ') {
          replaced.append(replacement_utf8_);
        } else {
          replaced.push_back(ch);
        }
      }
      // An empty piece stays empty: tokenizers only prepends before a first character.
      const bool starts = replaced.compare(0, replacement_utf8_.size(), replacement_utf8_) == 0;
      if (!replaced.empty() && !starts &&
          (scheme_ == PrependScheme::kAlways ||
           (scheme_ == PrependScheme::kFirst && piece.at_input_start))) {
        replaced.insert(0, replacement_utf8_);
      }
      piece.text = std::move(replaced);
    }
    if (!split_) return;
    SplitEach(pieces, [this](std::string* text) {
      const char32_t r = replacement_;
      return ApplyBehavior(CharSegments(*text, [r](char32_t c) { return c == r; }),
                           SplitBehavior::kMergedWithNext);
    });
  }

 private:
  char32_t replacement_;
  std::string replacement_utf8_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void PreTokenize(std::vector<PreToken>* pieces) const override {
    SplitEach(pieces, [this](std::string* text) {
      return ApplyBehavior(CharSegments(*text, IsNumeric),
                           individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
    });
  }

 private:
  bool individual_;
};

absl::StatusOr<SplitBehavior> ParseBehavior(const Json& j, const JsonPath& at) {
  TP_ASSIGN_OR_RETURN(const std::string name, RequireString(j, "behavior", at));
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return at.Field("behavior")
      .Error(absl::StrCat(
          "unknown split behavior \"", name,
          "\" (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)"));
}

const TokenizerRegex* Gpt2Regex() {
  static const TokenizerRegex* const regex =
      TokenizerRegex::Compile(kGpt2Pattern).value().release();
  return regex;
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseMetaspace(const Json& j, const JsonPath& at) {
  TP_ASSIGN_OR_RETURN(const std::string replacement, RequireString(j, "replacement", at));
  size_t pos = 0;
  if (replacement.empty() || (NextCodePoint(replacement, &pos), pos != replacement.size())) {
    return at.Field("replacement").Error("expected exactly one character");
  }
  pos = 0;
  const char32_t rep = NextCodePoint(replacement, &pos);
  PrependScheme scheme = PrependScheme::kAlways;
  if (const auto it = j.find("prepend_scheme"); it != j.end() && !it->is_null()) {
    const std::string name = it->is_string() ? it->get<std::string>() : it->dump();
    if (name == "first")
      scheme = PrependScheme::kFirst;
    else if (name == "never")
      scheme = PrependScheme::kNever;
    else if (name == "always")
      scheme = PrependScheme::kAlways;
    else
      return at.Field("prepend_scheme")
          .Error(absl::StrCat("unknown prepend_scheme \"", name,
                              "\" (expected first, never or always)"));
  }
  if (const auto it = j.find("add_prefix_space");
      it != j.end() && it->is_boolean() && !it->get<bool>()) {
    if (scheme != PrependScheme::kNever && j.contains("prepend_scheme")) {
      return at.Error(
          "add_prefix_space false contradicts prepend_scheme; set prepend_scheme to \"never\"");
    }
    scheme = PrependScheme::kNever;
  }
  TP_ASSIGN_OR_RETURN(const bool split, BoolOr(j, "split", true, at));
  return std::make_unique<MetaspacePreTokenizer>(rep, scheme, split);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Json& j, const JsonPath& at) {
  TP_ASSIGN_OR_RETURN(const std::string type, RequireType(j, at));
  if (type == "Sequence") {
    TP_ASSIGN_OR_RETURN(const Json* list, RequireArray(j, "pretokenizers", at));
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      TP_ASSIGN_OR_RETURN(auto step,
                          ParsePreTokenizer((*list)[i], at.Field("pretokenizers").Index(i)));
      steps.push_back(std::move(step));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "Split") {
    TP_ASSIGN_OR_RETURN(const PatternSpec pattern, RequirePattern(j, "pattern", at));
    TP_ASSIGN_OR_RETURN(const SplitBehavior behavior, ParseBehavior(j, at));
    TP_ASSIGN_OR_RETURN(const bool invert, BoolOr(j, "invert", false, at));
    auto regex = pattern.is_regex ? TokenizerRegex::Compile(pattern.text)
                                  : TokenizerRegex::CompileLiteral(pattern.text);
    if (!regex.ok()) return at.Field("pattern").Error(regex.status().message());
    return std::make_unique<SplitPreTokenizer>(std::move(regex).value(), behavior, invert);
  }
  if (type == "ByteLevel") {
    TP_ASSIGN_OR_RETURN(const bool add_prefix_space, BoolOr(j, "add_prefix_space", true, at));
    TP_ASSIGN_OR_RETURN(const bool use_regex, BoolOr(j, "use_regex", true, at));
    return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space,
                                                   use_regex ? Gpt2Regex() : nullptr);
  }
  if (type == "Metaspace") return ParseMetaspace(j, at);
  if (type == "Digits") {
    TP_ASSIGN_OR_RETURN(const bool individual, BoolOr(j, "individual_digits", false, at));
    return std::make_unique<DigitsPreTokenizer>(individual);
  }
  return at.Error(absl::StrCat("unsupported pre_tokenizer type \"", type,
                               "\" (supported: Sequence, Split, ByteLevel, Metaspace, Digits)"));
}

}  // namespace tpserve::tokenizer_internal
