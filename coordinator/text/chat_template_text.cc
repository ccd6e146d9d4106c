// UTF-8 and Python `str` helpers for the chat template interpreter. Tested by
// tests/chat_template_test.cc (directly and through the rendered fixtures).
#include "coordinator/text/chat_template_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "unicode/locid.h"
#include "unicode/uchar.h"
#include "unicode/unistr.h"

namespace tpserve::chat_template_internal {
namespace {

constexpr char32_t kReplacement = 0xFFFD;

icu::UnicodeString ToIcu(std::string_view text) {
  return icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), text.size()));
}

std::string FromIcu(const icu::UnicodeString& text) {
  std::string out;
  text.toUTF8String(out);
  return out;
}

std::string CodePointUpper(char32_t c) {
  icu::UnicodeString s(static_cast<UChar32>(c));
  return FromIcu(s.toUpper(icu::Locale::getRoot()));
}

std::string CodePointLower(char32_t c) {
  icu::UnicodeString s(static_cast<UChar32>(c));
  return FromIcu(s.toLower(icu::Locale::getRoot()));
}

std::string CodePointTitle(char32_t c) {
  icu::UnicodeString s(static_cast<UChar32>(c));
  return FromIcu(s.toTitle(nullptr, icu::Locale::getRoot(),
                           U_TITLECASE_NO_LOWERCASE | U_TITLECASE_NO_BREAK_ADJUSTMENT));
}

bool IsCased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }

// Python's str.isprintable() for one code point.
bool IsPrintable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

bool IsLineBreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::u32string DecodeUtf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    unsigned char lead = static_cast<unsigned char>(text[i]);
    size_t len = lead < 0x80             ? 1
                 : (lead & 0xE0) == 0xC0 ? 2
                 : (lead & 0xF0) == 0xE0 ? 3
                 : (lead & 0xF8) == 0xF0 ? 4
                                         : 0;
    if (len == 0 || i + len > text.size()) {
      out.push_back(kReplacement);
      ++i;
      continue;
    }
    char32_t cp = len == 1   ? lead
                  : len == 2 ? (lead & 0x1F)
                  : len == 3 ? (lead & 0x0F)
                             : (lead & 0x07);
    bool ok = true;
    for (size_t k = 1; k < len; ++k) {
      unsigned char b = static_cast<unsigned char>(text[i + k]);
      if ((b & 0xC0) != 0x80) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (b & 0x3F);
    }
    if (!ok) {
      out.push_back(kReplacement);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string EncodeUtf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) AppendUtf8(c, &out);
  return out;
}

int64_t CodePointCount(std::string_view text) {
  bool ascii = true;
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return static_cast<int64_t>(text.size());
  return static_cast<int64_t>(DecodeUtf8(text).size());
}

bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string PyStrip(std::string_view text, const std::optional<std::string>& chars, bool left,
                    bool right) {
  std::u32string s = DecodeUtf8(text);
  std::u32string set;
  if (chars) set = DecodeUtf8(*chars);
  auto strip = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : IsPySpace(c);
  };
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end && strip(s[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip(s[end - 1])) --end;
  }
  return EncodeUtf8(std::u32string_view(s).substr(begin, end - begin));
}

std::vector<std::string> PySplit(std::string_view text, const std::optional<std::string>& sep,
                                 int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t hit = text.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      parts.emplace_back(text.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    parts.emplace_back(text.substr(pos));
    return parts;
  }
  std::u32string s = DecodeUtf8(text);
  size_t i = 0;
  while (true) {
    while (i < s.size() && IsPySpace(s[i])) ++i;
    if (i == s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      size_t end = s.size();
      while (end > i && IsPySpace(s[end - 1])) --end;
      parts.push_back(EncodeUtf8(std::u32string_view(s).substr(i, end - i)));
      break;
    }
    size_t start = i;
    while (i < s.size() && !IsPySpace(s[i])) ++i;
    parts.push_back(EncodeUtf8(std::u32string_view(s).substr(start, i - start)));
  }
  return parts;
}

std::vector<std::string> PyRSplit(std::string_view text, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    size_t end = text.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = text.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      parts.emplace_back(text.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    parts.emplace_back(text.substr(0, end));
  } else {
    std::u32string s = DecodeUtf8(text);
    size_t i = s.size();
    while (true) {
      while (i > 0 && IsPySpace(s[i - 1])) --i;
      if (i == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t begin = 0;
        while (begin < i && IsPySpace(s[begin])) ++begin;
        parts.push_back(EncodeUtf8(std::u32string_view(s).substr(begin, i - begin)));
        break;
      }
      size_t end = i;
      while (i > 0 && !IsPySpace(s[i - 1])) --i;
      parts.push_back(EncodeUtf8(std::u32string_view(s).substr(i, end - i)));
    }
  }
  return std::vector<std::string>(parts.rbegin(), parts.rend());
}

std::vector<std::string> PySplitLines(std::string_view text, bool keepends) {
  std::u32string s = DecodeUtf8(text);
  std::vector<std::string> lines;
  size_t start = 0;
  size_t i = 0;
  while (i < s.size()) {
    if (!IsLineBreak(s[i])) {
      ++i;
      continue;
    }
    size_t eol = i;
    if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
    ++i;
    lines.push_back(EncodeUtf8(std::u32string_view(s).substr(start, (keepends ? i : eol) - start)));
    start = i;
  }
  if (start < s.size()) lines.push_back(EncodeUtf8(std::u32string_view(s).substr(start)));
  return lines;
}

std::string PyReplace(std::string_view text, std::string_view old, std::string_view replacement,
                      int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement before every code point and at the end.
    std::u32string s = DecodeUtf8(text);
    int64_t done = 0;
    for (char32_t c : s) {
      if (count < 0 || done < count) {
        out.append(replacement);
        ++done;
      }
      AppendUtf8(c, &out);
    }
    if (count < 0 || done < count) out.append(replacement);
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = text.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(replacement);
    pos = hit + old.size();
    ++done;
  }
  out.append(text.substr(pos));
  return out;
}

int64_t PyFind(std::string_view text, std::string_view sub, bool reverse) {
  size_t hit = reverse ? text.rfind(sub) : text.find(sub);
  if (hit == std::string_view::npos) return -1;
  return CodePointCount(text.substr(0, hit));
}

int64_t PyCount(std::string_view text, std::string_view sub) {
  if (sub.empty()) return CodePointCount(text) + 1;
  int64_t n = 0;
  size_t pos = 0;
  while ((pos = text.find(sub, pos)) != std::string_view::npos) {
    ++n;
    pos += sub.size();
  }
  return n;
}

std::string PyUpper(std::string_view text) {
  return FromIcu(ToIcu(text).toUpper(icu::Locale::getRoot()));
}

std::string PyLower(std::string_view text) {
  return FromIcu(ToIcu(text).toLower(icu::Locale::getRoot()));
}

std::string PyTitle(std::string_view text) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : DecodeUtf8(text)) {
    out += previous_cased ? CodePointLower(c) : CodePointTitle(c);
    previous_cased = IsCased(c);
  }
  return out;
}

std::string PyCapitalize(std::string_view text) {
  std::u32string s = DecodeUtf8(text);
  if (s.empty()) return "";
  return CodePointTitle(s[0]) + PyLower(EncodeUtf8(std::u32string_view(s).substr(1)));
}

std::string JinjaTitle(std::string_view text) {
  // Jinja splits on runs of r"[-\s({\[<]+" and upper-cases the first character of
  // every piece (separators included, where it is a no-op).
  auto is_separator = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c);
  };
  std::u32string s = DecodeUtf8(text);
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    bool sep = is_separator(s[i]);
    size_t j = i;
    while (j < s.size() && is_separator(s[j]) == sep) ++j;
    out += CodePointUpper(s[i]);
    out += PyLower(EncodeUtf8(std::u32string_view(s).substr(i + 1, j - i - 1)));
    i = j;
  }
  return out;
}

bool PyIsUpper(std::string_view text) {
  bool cased = false;
  for (char32_t c : DecodeUtf8(text)) {
    if (u_islower(static_cast<UChar32>(c)) || u_istitle(static_cast<UChar32>(c))) return false;
    if (u_isupper(static_cast<UChar32>(c))) cased = true;
  }
  return cased;
}

bool PyIsLower(std::string_view text) {
  bool cased = false;
  for (char32_t c : DecodeUtf8(text)) {
    if (u_isupper(static_cast<UChar32>(c)) || u_istitle(static_cast<UChar32>(c))) return false;
    if (u_islower(static_cast<UChar32>(c))) cased = true;
  }
  return cased;
}

bool PyIsClass(std::string_view text, CharClass cls) {
  std::u32string s = DecodeUtf8(text);
  if (s.empty()) return false;
  for (char32_t c : s) {
    UChar32 u = static_cast<UChar32>(c);
    int numeric = u_getIntPropertyValue(u, UCHAR_NUMERIC_TYPE);
    bool digit = numeric == U_NT_DECIMAL || numeric == U_NT_DIGIT;
    bool alpha = u_isalpha(u);
    bool ok = cls == CharClass::kDigit   ? digit
              : cls == CharClass::kAlpha ? alpha
              : cls == CharClass::kAlnum ? (alpha || numeric != U_NT_NONE)
                                         : IsPySpace(c);
    if (!ok) return false;
  }
  return true;
}

std::string PyStrRepr(std::string_view text) {
  std::u32string s = DecodeUtf8(text);
  bool has_single = s.find(U'\'') != std::u32string::npos;
  bool has_double = s.find(U'"') != std::u32string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : s) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += absl::StrCat("\\x", absl::Hex(c, absl::kZeroPad2));
    } else if (c < 0x7F || IsPrintable(c)) {
      AppendUtf8(c, &out);
    } else if (c <= 0xFF) {
      out += absl::StrCat("\\x", absl::Hex(c, absl::kZeroPad2));
    } else if (c <= 0xFFFF) {
      out += absl::StrCat("\\u", absl::Hex(c, absl::kZeroPad4));
    } else {
      out += absl::StrCat("\\U", absl::Hex(c, absl::kZeroPad8));
    }
  }
  out.push_back(quote);
  return out;
}

std::string PyFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string_view sci(buf, result.ptr - buf);  // e.g. "-1.2345e+02"
  bool negative = !sci.empty() && sci[0] == '-';
  if (negative) sci.remove_prefix(1);
  size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  int exponent = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+' ? 1 : 0), sci.data() + sci.size(),
                  exponent);
  std::string out = negative ? "-" : "";
  int ndigits = static_cast<int>(digits.size());
  if (exponent >= -4 && exponent < 16) {
    int point = exponent + 1;  // digits before the decimal point
    if (point <= 0) {
      out += "0." + std::string(-point, '0') + digits;
    } else if (point >= ndigits) {
      out += digits + std::string(point - ndigits, '0') + ".0";
    } else {
      out += digits.substr(0, point) + "." + digits.substr(point);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (ndigits > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                exponent < 0 ? -exponent : exponent);
  return out + exp_buf;
}

std::optional<std::string> UnescapeStringLiteral(std::string_view body, std::string* error) {
  std::string out;
  out.reserve(body.size());
  size_t i = 0;
  while (i < body.size()) {
    char c = body[i];
    if (c != '\\' || i + 1 == body.size()) {
      out.push_back(c);
      ++i;
      continue;
    }
    char n = body[i + 1];
    i += 2;
    switch (n) {
      case '\n':
        break;  // line continuation
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
      case 'u':
      case 'U': {
        size_t width = n == 'x' ? 2 : n == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (size_t k = 0; k < width; ++k) {
          int h = i + k < body.size() ? HexValue(body[i + k]) : -1;
          if (h < 0) {
            *error = absl::StrCat("truncated \\", std::string(1, n), " escape in string literal");
            return std::nullopt;
          }
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        if (cp > 0x10FFFF) {
          *error = "illegal Unicode character in string literal";
          return std::nullopt;
        }
        AppendUtf8(cp, &out);
        i += width;
        break;
      }
      case 'N':
        *error = "\\N{...} escapes are not supported in chat template string literals";
        return std::nullopt;
      default:
        if (n >= '0' && n <= '7') {
          char32_t cp = n - '0';
          for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k) {
            cp = cp * 8 + static_cast<char32_t>(body[i++] - '0');
          }
          AppendUtf8(cp, &out);
        } else {
          out.push_back('\\');
          out.push_back(n);
        }
    }
  }
  return out;
}

}  // namespace tpserve::chat_template_internal
