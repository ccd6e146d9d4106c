// Normalizers of the tokenizer.json pipeline, with the `tokenizers` library's semantics.
// Tested through tests/tokenizer_test.cc.
#include "coordinator/text/tokenizer_normalizer.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/text/tokenizer_byte_level.h"
#include "coordinator/text/tokenizer_regex.h"
#include "coordinator/text/tokenizer_unicode.h"
#include "kernels/base.h"

namespace tpserve::tokenizer_internal {
namespace {

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void Normalize(std::string* text) const override {
    for (const auto& step : steps_) step->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<TokenizerRegex> regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  void Normalize(std::string* text) const override {
    const std::vector<MatchRange> matches = regex_->FindAll(*text);
    if (matches.empty()) return;
    std::string out;
    out.reserve(text->size() + matches.size() * content_.size());
    size_t last = 0;
    for (const auto& [start, end] : matches) {
      out.append(*text, last, start - last);
      out.append(content_);
      last = end;
    }
    out.append(*text, last, std::string::npos);
    *text = std::move(out);
  }

 private:
  std::unique_ptr<TokenizerRegex> regex_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void Normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void Normalize(std::string* text) const override { *text = NormalizeUnicode(*text, form_); }

 private:
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void Normalize(std::string* text) const override { *text = ToLowercase(*text); }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string* text) const override {
    size_t begin = 0;
    size_t end = text->size();
    if (left_) {
      size_t pos = 0;
      while (pos < end) {
        size_t next = pos;
        if (!IsWhiteSpace(NextCodePoint(*text, &next))) break;
        pos = next;
      }
      begin = pos;
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>((*text)[start]) & 0xC0) == 0x80)
          --start;
        size_t pos = start;
        if (!IsWhiteSpace(NextCodePoint(*text, &pos))) break;
        end = start;
      }
    }
    *text = text->substr(begin, end - begin);
  }

 private:
  bool left_;
  bool right_;
};

class StripAccentsNormalizer : public Normalizer {
 public:
  void Normalize(std::string* text) const override {
    std::string out;
    out.reserve(text->size());
    size_t pos = 0;
    while (pos < text->size()) {
      const size_t start = pos;
      const char32_t c = NextCodePoint(*text, &pos);
      if (!IsCombiningMark(c)) out.append(*text, start, pos - start);
    }
    *text = std::move(out);
  }
};

class ByteLevelNormalizer : public Normalizer {
 public:
  void Normalize(std::string* text) const override { *text = ToByteLevel(*text); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const Json& j, const JsonPath& at) {
  TP_ASSIGN_OR_RETURN(const std::string type, RequireType(j, at));
  if (type == "Sequence") {
    TP_ASSIGN_OR_RETURN(const Json* list, RequireArray(j, "normalizers", at));
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      TP_ASSIGN_OR_RETURN(auto step, ParseNormalizer((*list)[i], at.Field("normalizers").Index(i)));
      steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  if (type == "Replace") {
    TP_ASSIGN_OR_RETURN(const PatternSpec pattern, RequirePattern(j, "pattern", at));
    TP_ASSIGN_OR_RETURN(std::string content, RequireString(j, "content", at));
    auto regex = pattern.is_regex ? TokenizerRegex::Compile(pattern.text)
                                  : TokenizerRegex::CompileLiteral(pattern.text);
    if (!regex.ok()) return at.Field("pattern").Error(regex.status().message());
    return std::make_unique<ReplaceNormalizer>(std::move(regex).value(), std::move(content));
  }
  if (type == "Prepend") {
    TP_ASSIGN_OR_RETURN(std::string prefix, RequireString(j, "prepend", at));
    return std::make_unique<PrependNormalizer>(std::move(prefix));
  }
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkd);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Strip") {
    TP_ASSIGN_OR_RETURN(const bool left, BoolOr(j, "strip_left", false, at));
    TP_ASSIGN_OR_RETURN(const bool right, BoolOr(j, "strip_right", false, at));
    return std::make_unique<StripNormalizer>(left, right);
  }
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  return at.Error(absl::StrCat(
      "unsupported normalizer type \"", type,
      "\" (supported: Sequence, Replace, Prepend, NFC, NFD, NFKC, NFKD, Lowercase, Strip, "
      "StripAccents, ByteLevel)"));
}

}  // namespace tpserve::tokenizer_internal
