// PCRE2-backed regex with Oniguruma-compatible match iteration for the tokenizer.
// Tested through tests/tokenizer_test.cc.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "coordinator/text/tokenizer_regex.h"

#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "coordinator/text/tokenizer_unicode.h"

namespace tpserve::tokenizer_internal {
namespace {

// Unicode White_Space, which Oniguruma's \s is. PCRE2's own \s differs (U+0085,
// U+180E), so it is spelled out.
constexpr char kSpaceClass[] =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";
constexpr char kWordClass[] = "\\w\\p{M}\\p{Pc}";

std::string EscapeLiteral(std::string_view literal) {
  std::string out;
  out.reserve(literal.size() * 2);
  for (char ch : literal) {
    const auto b = static_cast<unsigned char>(ch);
    const bool alnum = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z');
    if (b < 0x80 && !alnum) {
      if (b < 0x20 || b == 0x7F) {
        absl::StrAppend(&out, "\\x{", absl::Hex(b), "}");
        continue;
      }
      out.push_back('\\');
    }
    out.push_back(ch);
  }
  return out;
}

}  // namespace

std::string OnigurumaToPcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  size_t class_start = 0;  // index just after '[' or "[^"
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[i + 1];
      ++i;
      if (d == 's') {
        absl::StrAppend(&out, in_class ? kSpaceClass : absl::StrCat("[", kSpaceClass, "]"));
      } else if (d == 'S' && !in_class) {
        absl::StrAppend(&out, "[^", kSpaceClass, "]");
      } else if (d == 'w') {
        absl::StrAppend(&out, in_class ? kWordClass : absl::StrCat("[", kWordClass, "]"));
      } else if (d == 'W' && !in_class) {
        absl::StrAppend(&out, "[^", kWordClass, "]");
      } else {
        out.push_back(c);
        out.push_back(d);
      }
      continue;
    }
    if (in_class) {
      if (c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
        const size_t end = p.find(":]", i + 2);
        if (end != std::string_view::npos) {
          out.append(p.substr(i, end + 2 - i));
          i = end + 1;
          continue;
        }
      }
      if (c == ']' && i != class_start) in_class = false;
      out.push_back(c);
      continue;
    }
    if (c == '[') {
      in_class = true;
      out.push_back(c);
      if (i + 1 < p.size() && p[i + 1] == '^') {
        out.push_back('^');
        ++i;
      }
      class_start = i + 1;  // a ']' right here is a literal
      continue;
    }
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<TokenizerRegex>> TokenizerRegex::Compile(std::string_view pattern) {
  const std::string translated = OnigurumaToPcre2(pattern);
  pcre2_compile_context* ctx = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(ctx, PCRE2_NEWLINE_LF);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error_code, &error_offset, ctx);
  pcre2_compile_context_free(ctx);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("cannot compile regex \"", std::string(pattern),
                                                   "\": ", reinterpret_cast<const char*>(message),
                                                   " (at offset ", error_offset, ")"));
  }
  // JIT is an optimisation only: without it pcre2_match interprets the pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<TokenizerRegex>(new TokenizerRegex(code));
}

absl::StatusOr<std::unique_ptr<TokenizerRegex>> TokenizerRegex::CompileLiteral(
    std::string_view literal) {
  return Compile(EscapeLiteral(literal));
}

TokenizerRegex::~TokenizerRegex() { pcre2_code_free(code_); }

std::vector<MatchRange> TokenizerRegex::FindAll(std::string_view text) const {
  std::vector<MatchRange> matches;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t last_match_end = std::string_view::npos;
  uint32_t options = PCRE2_NO_UTF_CHECK;
  while (pos <= text.size()) {
    int rc = pcre2_match(code_, subject, text.size(), pos, options, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // Deep backtracking on a long input: the interpreter uses the heap instead.
      options |= PCRE2_NO_JIT;
      rc = pcre2_match(code_, subject, text.size(), pos, options, md, nullptr);
    }
    if (rc < 0) break;  // No match (or a resource limit): the rest is unmatched text.
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t start = ov[0];
    const size_t end = ov[1];
    if (start == end) {
      pos = end < text.size() ? end + Utf8SeqLen(static_cast<unsigned char>(text[end])) : end + 1;
      if (end == last_match_end) continue;
    } else {
      pos = end;
    }
    last_match_end = end;
    matches.emplace_back(start, end);
  }
  pcre2_match_data_free(md);
  return matches;
}

}  // namespace tpserve::tokenizer_internal
