// UTF-8 and Unicode helpers for the tokenizer: code point iteration, lossy repair,
// character classes and ICU normalization. Tested through tests/tokenizer_test.cc.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "coordinator/text/utf8.h"

namespace tpserve::tokenizer_internal {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Number of bytes of the UTF-8 sequence that starts with `lead` (1 for a stray byte).
inline size_t Utf8SeqLen(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Decodes the code point at text[*pos] and advances *pos. `text` must be valid UTF-8.
char32_t NextCodePoint(std::string_view text, size_t* pos);
using ::tpserve::AppendUtf8;  // coordinator/text/utf8.h

bool IsValidUtf8(std::string_view bytes);
// Replaces each maximal invalid subsequence with U+FFFD, as Rust's String::from_utf8_lossy.
std::string Utf8Lossy(std::string_view bytes);

// Unicode White_Space (Rust char::is_whitespace, regex \s).
bool IsWhiteSpace(char32_t c);
// Rust regex-crate \w: Alphabetic, marks, decimal digits, connector punctuation, joiners.
bool IsWordChar(char32_t c);
// General category M (Rust unicode_normalization is_combining_mark).
bool IsCombiningMark(char32_t c);
// General category N (Rust char::is_numeric).
bool IsNumeric(char32_t c);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// `text` must be valid UTF-8.
std::string NormalizeUnicode(std::string_view text, NormalForm form);
// Lowercases each code point on its own (full case mapping, no context), as Rust's
// char::to_lowercase does.
std::string ToLowercase(std::string_view text);

}  // namespace tpserve::tokenizer_internal
