// UTF-8 and Python `str` helpers for the chat template interpreter: code points,
// Python's whitespace, case mapping (ICU) and repr. Tested by tests/chat_template_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/api/html_escape.h"  // HtmlEscape, for the escape filter and autoescaping
#include "coordinator/text/utf8.h"

namespace tpserve::chat_template_internal {

// Decodes UTF-8; each invalid byte becomes U+FFFD.
std::u32string DecodeUtf8(std::string_view text);
std::string EncodeUtf8(std::u32string_view text);
using ::tpserve::AppendUtf8;  // coordinator/text/utf8.h
// Number of code points (Python's len() of the string).
int64_t CodePointCount(std::string_view text);

// Python's str.isspace() for one code point (also what `\s` matches in Jinja's regexes).
bool IsPySpace(char32_t c);

// Python str methods. `chars` is the optional argument of strip/lstrip/rstrip.
std::string PyStrip(std::string_view text, const std::optional<std::string>& chars, bool left,
                    bool right);
// str.split / str.rsplit; `sep` absent splits on runs of whitespace.
std::vector<std::string> PySplit(std::string_view text, const std::optional<std::string>& sep,
                                 int64_t maxsplit);
std::vector<std::string> PyRSplit(std::string_view text, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
std::vector<std::string> PySplitLines(std::string_view text, bool keepends);
std::string PyReplace(std::string_view text, std::string_view old, std::string_view replacement,
                      int64_t count);
// Code point index of the first (last) occurrence of `sub`, or -1.
int64_t PyFind(std::string_view text, std::string_view sub, bool reverse);
int64_t PyCount(std::string_view text, std::string_view sub);

std::string PyUpper(std::string_view text);
std::string PyLower(std::string_view text);
std::string PyTitle(std::string_view text);       // str.title()
std::string PyCapitalize(std::string_view text);  // str.capitalize()
std::string JinjaTitle(std::string_view text);    // Jinja's `title` filter
bool PyIsUpper(std::string_view text);
bool PyIsLower(std::string_view text);

// The character classes of str.isdigit / isalpha / isalnum / isspace for a whole string.
enum class CharClass { kDigit, kAlpha, kAlnum, kSpace };
bool PyIsClass(std::string_view text, CharClass cls);

// Python's repr() of a str, e.g. 'it\'s' -> "it's".
std::string PyStrRepr(std::string_view text);
// Python's repr() of a float: shortest round-trip digits, '1e+16', '0.0001', '2.0'.
std::string PyFloatRepr(double value);

// Decodes the backslash escapes of a Jinja string literal as Python's unicode-escape
// codec does; on a malformed escape returns nullopt and sets *error.
std::optional<std::string> UnescapeStringLiteral(std::string_view body, std::string* error);

}  // namespace tpserve::chat_template_internal
