// Jinja2 lexer with trim_blocks=True and lstrip_blocks=True, mirroring jinja2/lexer.py
// rule by rule. Tested by tests/chat_template_test.cc.
#include "coordinator/text/chat_template_lexer.h"

#include <cctype>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/text/chat_template_text.h"

namespace tpserve::chat_template_internal {

std::string FormatPos(SourcePos pos) {
  return absl::StrCat("line ", pos.line, ", column ", pos.column);
}

namespace {

// Byte length of the UTF-8 sequence starting at s[i] if it encodes a Python whitespace
// code point, else 0.
size_t SpaceLenAt(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  unsigned char lead = static_cast<unsigned char>(s[i]);
  size_t len = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : 4;
  if (i + len > s.size()) return 0;
  std::u32string cp = DecodeUtf8(s.substr(i, len));
  return cp.size() == 1 && IsPySpace(cp[0]) ? len : 0;
}

size_t SkipSpaces(std::string_view s, size_t i) {
  while (size_t n = SpaceLenAt(s, i)) i += n;
  return i;
}

// Python's str.rstrip() of s[begin, end): returns the new end.
size_t RStripEnd(std::string_view s, size_t begin, size_t end) {
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (SpaceLenAt(s, start) != end - start) break;
    end = start;
  }
  return end;
}

bool IsAllSpace(std::string_view s, size_t begin, size_t end) {
  while (begin < end) {
    size_t n = SpaceLenAt(s, begin);
    if (n == 0) return false;
    begin += n;
  }
  return true;
}

enum class TagKind { kVariable, kBlock, kComment, kRaw };

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = FindTagStart(pos);
      if (tag == std::string::npos) {
        Emit(TokenType::kData, src_.substr(pos), pos);
        break;
      }
      TagKind kind = src_[tag + 1] == '{'   ? TagKind::kVariable
                     : src_[tag + 1] == '#' ? TagKind::kComment
                                            : TagKind::kBlock;
      char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')
                      ? src_[tag + 2]
                      : 0;
      size_t raw_end = 0;
      if (kind == TagKind::kBlock && MatchRawBegin(tag, &raw_end)) kind = TagKind::kRaw;
      EmitText(pos, tag, sign, kind != TagKind::kVariable, line_starting);
      size_t after_open = tag + 2 + (sign ? 1 : 0);
      switch (kind) {
        case TagKind::kComment: {
          auto end = LexCommentEnd(tag, after_open);
          if (!end.ok()) return end.status();
          pos = *end;
          break;
        }
        case TagKind::kRaw: {
          auto end = LexRaw(tag, raw_end);
          if (!end.ok()) return end.status();
          pos = *end;
          break;
        }
        default: {
          auto end = LexTag(tag, after_open, kind == TagKind::kBlock);
          if (!end.ok()) return end.status();
          pos = *end;
        }
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back(Token{TokenType::kEof, "", 0, 0, PosOf(src_.size())});
    return std::move(tokens_);
  }

 private:
  SourcePos PosOf(size_t offset) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      size_t mid = (lo + hi) / 2;
      if (line_starts_[mid] <= offset)
        lo = mid;
      else
        hi = mid;
    }
    // Tokens come in source order, so the column is counted on from the previous
    // token's when it is on the same line: counting from the line start each time made
    // long single-line templates quadratic (a 140 kB one took minutes).
    size_t start = line_starts_[lo];
    int64_t column = 0;
    if (memo_line_ == lo && memo_offset_ <= offset) {
      start = memo_offset_;
      column = memo_column_;
    }
    column += CodePointCount(std::string_view(src_).substr(start, offset - start));
    memo_line_ = lo;
    memo_offset_ = offset;
    memo_column_ = column;
    return SourcePos{static_cast<int>(lo) + 1, static_cast<int>(column) + 1};
  }

  absl::Status Error(size_t offset, const std::string& message) const {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template syntax error at ", FormatPos(PosOf(offset)), ": ", message));
  }

  void Emit(TokenType type, std::string value, size_t offset) {
    tokens_.push_back(Token{type, std::move(value), 0, 0, PosOf(offset)});
  }

  size_t FindTagStart(size_t pos) const {
    while (true) {
      size_t brace = src_.find('{', pos);
      if (brace == std::string::npos || brace + 1 >= src_.size()) return std::string::npos;
      char next = src_[brace + 1];
      if (next == '{' || next == '%' || next == '#') return brace;
      pos = brace + 1;
    }
  }

  // {%(-|+|)\s*raw\s*(?:-%}\s*|%})
  bool MatchRawBegin(size_t tag, size_t* end) const {
    size_t i = tag + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    i = SkipSpaces(src_, i);
    if (src_.compare(i, 3, "raw") != 0) return false;
    i = SkipSpaces(src_, i + 3);
    if (src_.compare(i, 3, "-%}") == 0) {
      *end = SkipSpaces(src_, i + 3);
      return true;
    }
    if (src_.compare(i, 2, "%}") == 0) {
      *end = i + 2;
      return true;
    }
    return false;
  }

  // Applies `-` stripping or lstrip_blocks to the text before a tag and emits it.
  void EmitText(size_t begin, size_t end, char sign, bool lstrip, bool line_starting) {
    if (sign == '-') {
      end = RStripEnd(src_, begin, end);
    } else if (sign != '+' && lstrip) {
      size_t nl = std::string_view(src_).substr(begin, end - begin).rfind('\n');
      size_t line_begin = nl == std::string::npos ? begin : begin + nl + 1;
      if ((line_begin > begin || line_starting) && line_begin < end &&
          IsAllSpace(src_, line_begin, end)) {
        end = line_begin;
      }
    }
    if (end > begin) Emit(TokenType::kData, src_.substr(begin, end - begin), begin);
  }

  // (.*?)((?:\+#}|\-#}\s*|#}\n?))
  absl::StatusOr<size_t> LexCommentEnd(size_t tag, size_t body) {
    size_t close = src_.find("#}", body);
    if (close == std::string::npos) return Error(tag, "missing end of comment tag '#}'");
    if (close > body && src_[close - 1] == '-') return SkipSpaces(src_, close + 2);
    if (close > body && src_[close - 1] == '+') return close + 2;
    return TrimNewline(close + 2);
  }

  size_t TrimNewline(size_t pos) const {
    return pos < src_.size() && src_[pos] == '\n' ? pos + 1 : pos;
  }

  // Raw body up to {%(-|+|)\s*endraw\s*(?:+%}|-%}\s*|%}\n?), emitted as data with the
  // same whitespace control as text before a block tag.
  absl::StatusOr<size_t> LexRaw(size_t tag, size_t body) {
    size_t search = body;
    while (true) {
      size_t open = src_.find("{%", search);
      if (open == std::string::npos) return Error(tag, "missing {% endraw %} for this raw block");
      size_t i = open + 2;
      char sign = 0;
      if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) sign = src_[i++];
      i = SkipSpaces(src_, i);
      if (src_.compare(i, 6, "endraw") == 0) {
        i = SkipSpaces(src_, i + 6);
        size_t end = std::string::npos;
        if (src_.compare(i, 3, "+%}") == 0) {
          end = i + 3;
        } else if (src_.compare(i, 3, "-%}") == 0) {
          end = SkipSpaces(src_, i + 3);
        } else if (src_.compare(i, 2, "%}") == 0) {
          end = TrimNewline(i + 2);
        }
        if (end != std::string::npos) {
          bool line_starting = body > 0 && src_[body - 1] == '\n';
          EmitText(body, open, sign, /*lstrip=*/true, line_starting);
          return end;
        }
      }
      search = open + 2;
    }
  }

  // Tokens of a {{ }} or {% %} tag; returns the offset after its end.
  absl::StatusOr<size_t> LexTag(size_t tag, size_t pos, bool block) {
    Emit(block ? TokenType::kBlockBegin : TokenType::kVariableBegin, "", tag);
    std::string balance;  // expected closing brackets
    const std::string end_tag = block ? "%}" : "}}";
    while (true) {
      if (pos >= src_.size()) {
        return Error(tag, absl::StrCat("missing '", end_tag, "' to close this tag"));
      }
      if (balance.empty()) {
        if (src_[pos] == '-' && src_.compare(pos + 1, 2, end_tag) == 0) {
          Emit(block ? TokenType::kBlockEnd : TokenType::kVariableEnd, "", pos);
          return SkipSpaces(src_, pos + 3);
        }
        if (block && src_[pos] == '+' && src_.compare(pos + 1, 2, end_tag) == 0) {
          Emit(TokenType::kBlockEnd, "", pos);
          return pos + 3;
        }
        if (src_.compare(pos, 2, end_tag) == 0) {
          Emit(block ? TokenType::kBlockEnd : TokenType::kVariableEnd, "", pos);
          return block ? TrimNewline(pos + 2) : pos + 2;
        }
      }
      if (size_t n = SpaceLenAt(src_, pos)) {
        pos += n;
        continue;
      }
      auto next = LexExpressionToken(pos, &balance);
      if (!next.ok()) return next.status();
      pos = *next;
    }
  }

  // Digits with single underscores between them: (\d+_)*\d+.
  size_t ScanDigits(size_t pos) const {
    size_t i = pos;
    if (i >= src_.size() || !std::isdigit(static_cast<unsigned char>(src_[i]))) return pos;
    while (true) {
      while (i < src_.size() && std::isdigit(static_cast<unsigned char>(src_[i]))) ++i;
      if (i + 1 < src_.size() && src_[i] == '_' &&
          std::isdigit(static_cast<unsigned char>(src_[i + 1]))) {
        ++i;
        continue;
      }
      return i;
    }
  }

  size_t ScanExponent(size_t pos) const {
    if (pos >= src_.size() || (src_[pos] != 'e' && src_[pos] != 'E')) return pos;
    size_t i = pos + 1;
    if (i < src_.size() && (src_[i] == '+' || src_[i] == '-')) ++i;
    size_t end = ScanDigits(i);
    return end == i ? pos : end;
  }

  static std::string WithoutUnderscores(std::string_view text) {
    std::string out;
    for (char c : text) {
      if (c != '_') out.push_back(c);
    }
    return out;
  }

  absl::StatusOr<size_t> LexNumber(size_t pos) {
    // Float: not right after a '.', digits, then a fraction and/or an exponent.
    if (pos == 0 || src_[pos - 1] != '.') {
      size_t int_end = ScanDigits(pos);
      size_t end = int_end;
      if (end < src_.size() && src_[end] == '.') {
        size_t frac_end = ScanDigits(end + 1);
        if (frac_end > end + 1) end = ScanExponent(frac_end);
      } else {
        end = ScanExponent(end);
      }
      if (end > int_end) {
        std::string text = WithoutUnderscores(src_.substr(pos, end - pos));
        Token token{TokenType::kFloat, text, 0, std::strtod(text.c_str(), nullptr), PosOf(pos)};
        tokens_.push_back(std::move(token));
        return end;
      }
    }
    // Integer: 0b(_?[01])+, 0o(_?[0-7])+, 0x(_?[0-9a-f])+, [1-9](_?\d)* or 0(_?0)*.
    auto digit_of = [](char c, int base) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (base == 2) return c == '0' || c == '1';
      if (base == 8) return c >= '0' && c <= '7';
      if (base == 16) return std::isxdigit(static_cast<unsigned char>(c)) != 0;
      if (base == 0) return c == '0';  // the digits of "0(_?0)*"
      return std::isdigit(static_cast<unsigned char>(c)) != 0;
    };
    // Scans (_?D)* from i into *digits; returns the end.
    auto scan = [&](size_t i, int base, std::string* digits) {
      while (i < src_.size()) {
        size_t d = src_[i] == '_' ? i + 1 : i;
        if (d >= src_.size() || !digit_of(src_[d], base)) break;
        digits->push_back(src_[d]);
        i = d + 1;
      }
      return i;
    };
    std::string digits;
    int base = 10;
    size_t i = pos;
    if (src_[pos] == '0' && pos + 1 < src_.size()) {
      char p = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[pos + 1])));
      int prefixed = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 10;
      if (prefixed != 10) {
        i = scan(pos + 2, prefixed, &digits);
        if (!digits.empty()) base = prefixed;
      }
    }
    if (digits.empty()) {
      digits.push_back(src_[pos]);
      i = scan(pos + 1, src_[pos] == '0' ? 0 : 10, &digits);
    }
    errno = 0;
    char* parse_end = nullptr;
    long long value = std::strtoll(digits.c_str(), &parse_end, base);
    if (errno == ERANGE) return Error(pos, "integer literal does not fit in 64 bits");
    Token token{TokenType::kInteger, src_.substr(pos, i - pos), value, 0, PosOf(pos)};
    tokens_.push_back(std::move(token));
    return i;
  }

  absl::StatusOr<size_t> LexString(size_t pos) {
    char quote = src_[pos];
    size_t i = pos + 1;
    while (i < src_.size() && src_[i] != quote) i += src_[i] == '\\' ? 2 : 1;
    if (i >= src_.size()) return Error(pos, "unterminated string literal");
    std::string error;
    auto value = UnescapeStringLiteral(std::string_view(src_).substr(pos + 1, i - pos - 1), &error);
    if (!value) return Error(pos, error);
    Emit(TokenType::kString, std::move(*value), pos);
    return i + 1;
  }

  absl::StatusOr<size_t> LexExpressionToken(size_t pos, std::string* balance) {
    unsigned char c = static_cast<unsigned char>(src_[pos]);
    if (std::isdigit(c)) return LexNumber(pos);
    if (std::isalpha(c) || c == '_') {
      size_t i = pos;
      while (i < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[i])) || src_[i] == '_')) {
        ++i;
      }
      Emit(TokenType::kName, src_.substr(pos, i - pos), pos);
      return i;
    }
    if (c == '\'' || c == '"') return LexString(pos);
    static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwoChar) {
      if (src_.compare(pos, 2, op) == 0) {
        Emit(TokenType::kOperator, std::string(op), pos);
        return pos + 2;
      }
    }
    static constexpr std::string_view kOneChar = "+-/*%~[](){}><=.:|,;";
    if (kOneChar.find(static_cast<char>(c)) == std::string_view::npos) {
      size_t len = 1;
      while (pos + len < src_.size() &&
             (static_cast<unsigned char>(src_[pos + len]) & 0xC0) == 0x80) {
        ++len;
      }
      return Error(pos, absl::StrCat("unexpected character '", src_.substr(pos, len), "'"));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance->empty()) return Error(pos, absl::StrCat("unexpected '", std::string(1, c), "'"));
      if (balance->back() != static_cast<char>(c)) {
        return Error(pos, absl::StrCat("unexpected '", std::string(1, c), "', expected '",
                                       std::string(1, balance->back()), "'"));
      }
      balance->pop_back();
    }
    Emit(TokenType::kOperator, std::string(1, static_cast<char>(c)), pos);
    return pos + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  // PosOf's last answer: line index, byte offset and its column (code points from the line start).
  mutable size_t memo_line_ = 0;
  mutable size_t memo_offset_ = 0;
  mutable int64_t memo_column_ = 0;
  std::vector<Token> tokens_;
};

// Jinja treats \r\n, \r and \n as line breaks and drops one trailing newline.
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) {
  Lexer lexer(NormalizeNewlines(source));
  return lexer.Run();
}

}  // namespace tpserve::chat_template_internal
