// UTF-8 helpers and ICU-backed Unicode classes and normalization for the tokenizer.
// Tested through tests/tokenizer_test.cc.
#include "coordinator/text/tokenizer_unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

#include "kernels/base.h"

namespace tpserve::tokenizer_internal {
namespace {

bool IsCont(unsigned char b) { return (b & 0xC0) == 0x80; }

// Length of the valid UTF-8 sequence at bytes[i], or 0 with *error_len set to the
// number of bytes to replace by one U+FFFD (Rust's Utf8Chunks rules).
size_t ValidSeqAt(std::string_view bytes, size_t i, size_t* error_len) {
  const auto at = [&](size_t k) -> int {
    return i + k < bytes.size() ? static_cast<unsigned char>(bytes[i + k]) : -1;
  };
  const int b0 = at(0);
  if (b0 < 0x80) return 1;
  *error_len = 1;
  int b1 = at(1);
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    return (b1 >= 0 && IsCont(b1)) ? 2 : 0;
  }
  bool second_ok = false;
  size_t width = 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    width = 3;
    if (b0 == 0xE0)
      second_ok = b1 >= 0xA0 && b1 <= 0xBF;
    else if (b0 == 0xED)
      second_ok = b1 >= 0x80 && b1 <= 0x9F;
    else
      second_ok = b1 >= 0x80 && b1 <= 0xBF;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    width = 4;
    if (b0 == 0xF0)
      second_ok = b1 >= 0x90 && b1 <= 0xBF;
    else if (b0 == 0xF4)
      second_ok = b1 >= 0x80 && b1 <= 0x8F;
    else
      second_ok = b1 >= 0x80 && b1 <= 0xBF;
  } else {
    return 0;
  }
  if (!second_ok) return 0;
  for (size_t k = 2; k < width; ++k) {
    const int b = at(k);
    if (b < 0 || !IsCont(b)) {
      *error_len = k;
      return 0;
    }
  }
  return width;
}

}  // namespace

char32_t NextCodePoint(std::string_view text, size_t* pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = *pos;
  const unsigned char b0 = s[i];
  const size_t len = std::min(Utf8SeqLen(b0), text.size() - i);
  char32_t cp;
  switch (len) {
    case 1:
      cp = b0;
      break;
    case 2:
      cp = ((b0 & 0x1F) << 6) | (s[i + 1] & 0x3F);
      break;
    case 3:
      cp = ((b0 & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
      break;
    default:
      cp = ((b0 & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) |
           (s[i + 3] & 0x3F);
  }
  *pos = i + len;
  return cp;
}

bool IsValidUtf8(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t error_len = 0;
    const size_t n = ValidSeqAt(bytes, i, &error_len);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t error_len = 1;
    const size_t n = ValidSeqAt(bytes, i, &error_len);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out.append(kReplacementChar);
      i += error_len;
    }
  }
  return out;
}

bool IsWhiteSpace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return u_isUWhiteSpace(static_cast<UChar32>(c));
}

bool IsWordChar(char32_t c) {
  if (c < 0x80) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  const auto cp = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) || u_hasBinaryProperty(cp, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  const int8_t type = u_charType(cp);
  return type == U_NON_SPACING_MARK || type == U_ENCLOSING_MARK ||
         type == U_COMBINING_SPACING_MARK || type == U_DECIMAL_DIGIT_NUMBER ||
         type == U_CONNECTOR_PUNCTUATION;
}

bool IsCombiningMark(char32_t c) {
  const int8_t type = u_charType(static_cast<UChar32>(c));
  return type == U_NON_SPACING_MARK || type == U_ENCLOSING_MARK || type == U_COMBINING_SPACING_MARK;
}

bool IsNumeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const int8_t type = u_charType(static_cast<UChar32>(c));
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

std::string NormalizeUnicode(std::string_view text, NormalForm form) {
  bool ascii = true;
  for (char ch : text) ascii = ascii && static_cast<unsigned char>(ch) < 0x80;
  if (ascii) return std::string(text);  // ASCII is invariant under all four forms.
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = nullptr;
  switch (form) {
    case NormalForm::kNfc:
      normalizer = icu::Normalizer2::getNFCInstance(status);
      break;
    case NormalForm::kNfd:
      normalizer = icu::Normalizer2::getNFDInstance(status);
      break;
    case NormalForm::kNfkc:
      normalizer = icu::Normalizer2::getNFKCInstance(status);
      break;
    case NormalForm::kNfkd:
      normalizer = icu::Normalizer2::getNFKDInstance(status);
      break;
  }
  TP_CHECK(U_SUCCESS(status) && normalizer != nullptr);  // ICU data is linked in.
  std::string out;
  out.reserve(text.size());
  icu::StringByteSink<std::string> sink(&out);
  normalizer->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())),
                            sink, nullptr, status);
  TP_CHECK(U_SUCCESS(status));  // Input is valid UTF-8, so normalization cannot fail.
  return out;
}

std::string ToLowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t c = NextCodePoint(text, &pos);
    if (c < 0x80) {
      out.push_back(static_cast<char>((c >= 'A' && c <= 'Z') ? c + 32 : c));
      continue;
    }
    UChar src[2];
    int32_t src_len = 0;
    U16_APPEND_UNSAFE(src, src_len, static_cast<UChar32>(c));
    UChar dst[8];
    UErrorCode status = U_ZERO_ERROR;
    const int32_t dst_len = u_strToLower(dst, 8, src, src_len, "", &status);
    if (U_FAILURE(status)) {
      AppendUtf8(c, &out);
      continue;
    }
    for (int32_t k = 0; k < dst_len;) {
      UChar32 lc;
      U16_NEXT_UNSAFE(dst, k, lc);
      AppendUtf8(static_cast<char32_t>(lc), &out);
    }
  }
  return out;
}

}  // namespace tpserve::tokenizer_internal
