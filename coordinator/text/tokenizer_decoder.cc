// Decoders of the tokenizer.json pipeline, with the `tokenizers` library's semantics.
// Tested through tests/tokenizer_test.cc.
#include "coordinator/text/tokenizer_decoder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/text/tokenizer_byte_level.h"
#include "coordinator/text/tokenizer_regex.h"
#include "coordinator/text/tokenizer_unicode.h"
#include "kernels/base.h"

namespace tpserve::tokenizer_internal {
namespace {

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& step : steps_) step->DecodeChain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

// Maps ByteLevel characters back to bytes; a token with other characters (an added
// token, say) contributes its own bytes. Invalid UTF-8 becomes U+FFFD.
class ByteLevelDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const std::string& token : *tokens) {
      const size_t mark = bytes.size();
      size_t pos = 0;
      bool all_mapped = true;
      while (pos < token.size()) {
        const int b = ByteLevelCharToByte(NextCodePoint(token, &pos));
        if (b < 0) {
          all_mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!all_mapped) {
        bytes.resize(mark);
        bytes.append(token);
      }
    }
    *tokens = {Utf8Lossy(bytes)};
  }
};

// Turns runs of <0xNN> tokens into the bytes they stand for. A run that is not valid
// UTF-8 becomes one U+FFFD per byte, as the tokenizers library does.
class ByteFallbackDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string run;
    size_t run_len = 0;
    const auto flush = [&] {
      if (run_len == 0) return;
      if (IsValidUtf8(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_len; ++i) out.emplace_back(kReplacementChar);
      }
      run.clear();
      run_len = 0;
    };
    for (std::string& token : *tokens) {
      int byte = -1;
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') {
        byte = ParseHexByte(token[3], token[4]);
      }
      if (byte >= 0) {
        run.push_back(static_cast<char>(byte));
        ++run_len;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    *tokens = std::move(out);
  }

 private:
  static int HexDigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static int ParseHexByte(char hi, char lo) {
    const int h = HexDigit(hi);
    const int l = HexDigit(lo);
    return (h < 0 || l < 0) ? -1 : h * 16 + l;
  }
};

class FuseDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    *tokens = {absl::StrJoin(*tokens, "")};
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string literal, std::unique_ptr<TokenizerRegex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) {
      std::string out;
      size_t last = 0;
      bool replaced = false;
      if (regex_ == nullptr) {  // non-empty literal: a plain search is equivalent
        for (size_t at = token.find(literal_); at != std::string::npos;
             at = token.find(literal_, last)) {
          out.append(token, last, at - last);
          out.append(content_);
          last = at + literal_.size();
          replaced = true;
        }
      } else {
        for (const auto& [start, end] : regex_->FindAll(token)) {
          out.append(token, last, start - last);
          out.append(content_);
          last = end;
          replaced = true;
        }
      }
      if (!replaced) continue;
      out.append(token, last, std::string::npos);
      token = std::move(out);
    }
  }

 private:
  std::string literal_;
  std::unique_ptr<TokenizerRegex> regex_;  // null for a non-empty literal pattern
  std::string content_;
};

// Removes up to `start` leading and `stop` trailing `content` characters per token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) {
      std::vector<size_t> bounds;  // byte offset of each character, plus the end
      std::vector<char32_t> chars;
      size_t pos = 0;
      while (pos < token.size()) {
        bounds.push_back(pos);
        chars.push_back(NextCodePoint(token, &pos));
      }
      bounds.push_back(token.size());
      size_t first = 0;
      while (first < start_ && first < chars.size() && chars[first] == content_) ++first;
      size_t last = chars.size();
      for (size_t i = 0; i < stop_ && last > first && chars[last - 1] == content_; ++i) --last;
      token = token.substr(bounds[first], bounds[last] - bounds[first]);
    }
  }

 private:
  char32_t content_;
  size_t start_;
  size_t stop_;
};

// Replacement characters become spaces; in the first token they are dropped unless
// the prepend scheme is "never".
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool strip_first)
      : replacement_(replacement), strip_first_(strip_first) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      const std::string& token = (*tokens)[i];
      std::string out;
      out.reserve(token.size());
      size_t pos = 0;
      while (pos < token.size()) {
        const size_t start = pos;
        if (NextCodePoint(token, &pos) != replacement_) {
          out.append(token, start, pos - start);
        } else if (i != 0 || !strip_first_) {
          out.push_back(' ');
        }
      }
      (*tokens)[i] = std::move(out);
    }
  }

 private:
  char32_t replacement_;
  bool strip_first_;
};

absl::StatusOr<char32_t> RequireChar(const Json& j, std::string_view key, const JsonPath& at) {
  TP_ASSIGN_OR_RETURN(const std::string s, RequireString(j, key, at));
  size_t pos = 0;
  if (s.empty()) return at.Field(key).Error("expected exactly one character");
  const char32_t c = NextCodePoint(s, &pos);
  if (pos != s.size()) return at.Field(key).Error("expected exactly one character");
  return c;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const Json& j, const JsonPath& at) {
  TP_ASSIGN_OR_RETURN(const std::string type, RequireType(j, at));
  if (type == "Sequence") {
    TP_ASSIGN_OR_RETURN(const Json* list, RequireArray(j, "decoders", at));
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      TP_ASSIGN_OR_RETURN(auto step, ParseDecoder((*list)[i], at.Field("decoders").Index(i)));
      steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    TP_ASSIGN_OR_RETURN(const PatternSpec pattern, RequirePattern(j, "pattern", at));
    TP_ASSIGN_OR_RETURN(std::string content, RequireString(j, "content", at));
    std::unique_ptr<TokenizerRegex> regex;
    if (pattern.is_regex || pattern.text.empty()) {
      auto compiled = pattern.is_regex ? TokenizerRegex::Compile(pattern.text)
                                       : TokenizerRegex::CompileLiteral(pattern.text);
      if (!compiled.ok()) return at.Field("pattern").Error(compiled.status().message());
      regex = std::move(compiled).value();
    }
    return std::make_unique<ReplaceDecoder>(pattern.is_regex ? "" : pattern.text, std::move(regex),
                                            std::move(content));
  }
  if (type == "Strip") {
    TP_ASSIGN_OR_RETURN(const char32_t content, RequireChar(j, "content", at));
    TP_ASSIGN_OR_RETURN(const int64_t start, RequireIndex(j, "start", at));
    TP_ASSIGN_OR_RETURN(const int64_t stop, RequireIndex(j, "stop", at));
    return std::make_unique<StripDecoder>(content, start, stop);
  }
  if (type == "Metaspace") {
    TP_ASSIGN_OR_RETURN(const char32_t replacement, RequireChar(j, "replacement", at));
    bool strip_first = true;  // prepend_scheme defaults to "always"
    if (const auto it = j.find("prepend_scheme"); it != j.end() && it->is_string()) {
      strip_first = it->get<std::string>() != "never";
    }
    if (const auto it = j.find("add_prefix_space");
        it != j.end() && it->is_boolean() && !it->get<bool>()) {
      strip_first = false;
    }
    return std::make_unique<MetaspaceDecoder>(replacement, strip_first);
  }
  return at.Error(absl::StrCat("unsupported decoder type \"", type,
                               "\" (supported: Sequence, ByteLevel, ByteFallback, Fuse, Replace, "
                               "Strip, Metaspace)"));
}

}  // namespace tpserve::tokenizer_internal
