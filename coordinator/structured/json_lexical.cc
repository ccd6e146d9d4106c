// JSON's lexical grammar pieces (json_lexical.h). Tested by tests/structured_output_test.cc.
#include "coordinator/structured/json_lexical.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"

namespace tpserve {
namespace {

using Node = GrammarBuilder::Node;
using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;

// Code points JSON strings may hold unescaped: not '"', '\', controls; no surrogates.
CodepointRanges RawStringChars() { return {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0xD7FF}, {0xE000, kMaxCodepoint}}; }

std::string EncodeUtf8(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

// Splits [lo, hi] until each piece's encodings are a product of byte ranges (the
// construction of RE2's and Rust regex-syntax's UTF-8 range compilers).
void SplitUtf8(char32_t lo, char32_t hi, std::vector<ByteSeq>* out) {
  static constexpr char32_t kLengthMax[] = {0x7F, 0x7FF, 0xFFFF};
  for (const char32_t max : kLengthMax) {
    if (lo <= max && hi > max) {
      SplitUtf8(lo, max, out);
      SplitUtf8(max + 1, hi, out);
      return;
    }
  }
  const std::string a = EncodeUtf8(lo);
  for (size_t i = 1; i < a.size(); ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      SplitUtf8(lo, lo | m, out);
      SplitUtf8((lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      SplitUtf8(lo, (hi & ~m) - 1, out);
      SplitUtf8(hi & ~m, hi, out);
      return;
    }
  }
  const std::string z = EncodeUtf8(hi);
  ByteSeq seq;
  for (size_t i = 0; i < a.size(); ++i) seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(z[i]));
  out->push_back(std::move(seq));
}

void AddSequence(GrammarBuilder& b, Node from, Node to, const ByteSeq& seq) {
  Node at = from;
  for (size_t i = 0; i + 1 < seq.size(); ++i) at = b.Range(at, seq[i].first, seq[i].second);
  b.Bytes(at, to, seq.back().first, seq.back().second);
}

void HexDigit(GrammarBuilder& b, Node from, Node to) {
  b.Bytes(from, to, '0', '9');
  b.Bytes(from, to, 'a', 'f');
  b.Bytes(from, to, 'A', 'F');
}

// `n` hex digits from `from` to `to`.
void HexDigits(GrammarBuilder& b, Node from, Node to, int n) {
  Node at = from;
  for (int i = 0; i + 1 < n; ++i) {
    const Node next = b.NewNode();
    HexDigit(b, at, next);
    at = next;
  }
  HexDigit(b, at, to);
}

std::string CanonicalEscape(char32_t cp) {
  switch (cp) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      return absl::StrFormat("\\u%04x", static_cast<uint32_t>(cp));
  }
}

}  // namespace

CodepointRanges NormalizeRanges(CodepointRanges ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodepointRanges out;
  for (const auto& r : ranges) {
    if (r.first > r.second) continue;
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CodepointRanges ComplementRanges(const CodepointRanges& ranges) {
  CodepointRanges out;
  char32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.emplace_back(next, kMaxCodepoint);
  return out;
}

CodepointRanges IntersectRanges(const CodepointRanges& a, const CodepointRanges& b) {
  CodepointRanges out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const char32_t lo = std::max(a[i].first, b[j].first);
    const char32_t hi = std::min(a[i].second, b[j].second);
    if (lo <= hi) out.emplace_back(lo, hi);
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

std::vector<ByteSeq> Utf8Sequences(const CodepointRanges& ranges) {
  const CodepointRanges no_surrogates = {{0, 0xD7FF}, {0xE000, kMaxCodepoint}};
  std::vector<ByteSeq> out;
  for (const auto& [lo, hi] : IntersectRanges(NormalizeRanges(ranges), no_surrogates)) SplitUtf8(lo, hi, &out);
  return out;
}

Node EncodedCharOf(GrammarBuilder& b, Node from, const CodepointRanges& ranges) {
  const Node end = b.NewNode();
  const CodepointRanges normal = NormalizeRanges(ranges);
  for (const ByteSeq& seq : Utf8Sequences(IntersectRanges(normal, RawStringChars()))) AddSequence(b, from, end, seq);
  const CodepointRanges escaped = IntersectRanges(normal, {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
  for (const auto& [lo, hi] : escaped) {
    for (char32_t cp = lo; cp <= hi; ++cp) b.Epsilon(b.Literal(from, CanonicalEscape(cp)), end);
  }
  return end;
}

Node AnyEncodedChar(GrammarBuilder& b, Node from) {
  const Node end = b.NewNode();
  AnyEncodedCharInto(b, from, end);
  return end;
}

void AnyEncodedCharInto(GrammarBuilder& b, Node from, Node end) {
  for (const ByteSeq& seq : Utf8Sequences(RawStringChars())) AddSequence(b, from, end, seq);
  const Node backslash = b.Range(from, '\\', '\\');
  for (const char c : std::string_view("\"\\/bfnrt")) b.Bytes(backslash, end, c, c);
  const Node u = b.Range(backslash, 'u', 'u');
  // \uXXXX outside the surrogates: [0-9a-cA-C]xxx | [dD][0-7]xx | [e-fE-F]xxx.
  const Node plain = b.NewNode();
  b.Bytes(u, plain, '0', '9');
  b.Bytes(u, plain, 'a', 'c');
  b.Bytes(u, plain, 'A', 'C');
  b.Bytes(u, plain, 'e', 'f');
  b.Bytes(u, plain, 'E', 'F');
  HexDigits(b, plain, end, 3);
  const Node d = b.NewNode();
  b.Bytes(u, d, 'd', 'd');
  b.Bytes(u, d, 'D', 'D');
  const Node d_low = b.Range(d, '0', '7');
  HexDigits(b, d_low, end, 2);
  // A high surrogate \uD800-\uDBFF must be followed by a low one, \uDC00-\uDFFF.
  const Node high = b.NewNode();
  b.Bytes(d, high, '8', '9');
  b.Bytes(d, high, 'a', 'b');
  b.Bytes(d, high, 'A', 'B');
  const Node high_done = b.NewNode();
  HexDigits(b, high, high_done, 2);
  const Node low_u = b.Literal(high_done, "\\u");
  const Node low_d = b.NewNode();
  b.Bytes(low_u, low_d, 'd', 'd');
  b.Bytes(low_u, low_d, 'D', 'D');
  const Node low = b.NewNode();
  b.Bytes(low_d, low, 'c', 'f');
  b.Bytes(low_d, low, 'C', 'F');
  HexDigits(b, low, end, 2);
}

Node JsonRules::Whitespace(Node from) {
  const Node end = b_.NewNode();
  b_.Epsilon(from, end);
  Node at = from;
  for (int i = 0; i < limits_.max_whitespace_bytes; ++i) {
    const Node next = b_.NewNode();
    b_.Bytes(at, next, '\t', '\n');
    b_.Bytes(at, next, '\r', '\r');
    b_.Bytes(at, next, ' ', ' ');
    b_.Epsilon(next, end);
    at = next;
  }
  return end;
}

Node JsonRules::Digits(Node from, int min, int max) {
  Node at = from;
  for (int i = 0; i < min; ++i) at = b_.Range(at, '0', '9');
  const Node end = b_.NewNode();
  b_.Epsilon(at, end);
  for (int i = min; i < max; ++i) {
    at = b_.Range(at, '0', '9');
    b_.Epsilon(at, end);
  }
  return end;
}

Node JsonRules::IntegerPart(Node from) {
  const Node unsigned_start = b_.NewNode();
  b_.Epsilon(from, unsigned_start);
  b_.Bytes(from, unsigned_start, '-', '-');
  const Node end = b_.NewNode();
  b_.Bytes(unsigned_start, end, '0', '0');
  b_.Epsilon(Digits(b_.Range(unsigned_start, '1', '9'), 0, limits_.max_integer_digits - 1), end);
  return end;
}

JsonRules::Rule JsonRules::String() {
  if (string_) return *string_;
  string_ = b_.DeclareRule("a JSON string");
  const Node start = b_.NewNode();
  const Node body = b_.Range(start, '"', '"');
  AnyEncodedCharInto(b_, body, body);
  const Node accept = b_.Range(body, '"', '"');
  b_.DefineRule(*string_, start, accept);
  return *string_;
}

JsonRules::Rule JsonRules::Number() {
  if (number_) return *number_;
  number_ = b_.DeclareRule("a JSON number");
  const Node start = b_.NewNode();
  const Node integer = IntegerPart(start);
  const Node fraction = b_.NewNode();
  b_.Epsilon(integer, fraction);
  b_.Epsilon(Digits(b_.Range(integer, '.', '.'), 1, limits_.max_fraction_digits), fraction);
  const Node accept = b_.NewNode();
  b_.Epsilon(fraction, accept);
  const Node e = b_.NewNode();
  b_.Bytes(fraction, e, 'e', 'e');
  b_.Bytes(fraction, e, 'E', 'E');
  const Node sign = b_.NewNode();
  b_.Epsilon(e, sign);
  b_.Bytes(e, sign, '+', '+');
  b_.Bytes(e, sign, '-', '-');
  b_.Epsilon(Digits(sign, 1, limits_.max_exponent_digits), accept);
  b_.DefineRule(*number_, start, accept);
  return *number_;
}

JsonRules::Rule JsonRules::Integer() {
  if (integer_) return *integer_;
  integer_ = b_.DeclareRule("a JSON integer");
  const Node start = b_.NewNode();
  b_.DefineRule(*integer_, start, IntegerPart(start));
  return *integer_;
}

JsonRules::Rule JsonRules::Boolean() {
  if (boolean_) return *boolean_;
  boolean_ = b_.DeclareRule("a JSON boolean");
  const Node start = b_.NewNode();
  const Node accept = b_.NewNode();
  b_.Epsilon(b_.Literal(start, "true"), accept);
  b_.Epsilon(b_.Literal(start, "false"), accept);
  b_.DefineRule(*boolean_, start, accept);
  return *boolean_;
}

JsonRules::Rule JsonRules::Null() {
  if (null_) return *null_;
  null_ = b_.DeclareRule("null");
  const Node start = b_.NewNode();
  b_.DefineRule(*null_, start, b_.Literal(start, "null"));
  return *null_;
}

JsonRules::Rule JsonRules::AnyValue() {
  if (value_) return *value_;
  value_ = b_.DeclareRule("a JSON value");
  const Node start = b_.NewNode();
  const Node accept = b_.CallAny(start, {String(), Number(), AnyObject(), AnyArray()});
  b_.Epsilon(b_.Literal(start, "true"), accept);
  b_.Epsilon(b_.Literal(start, "false"), accept);
  b_.Epsilon(b_.Literal(start, "null"), accept);
  b_.DefineRule(*value_, start, accept);
  return *value_;
}

JsonRules::Rule JsonRules::AnyObject() {
  if (object_) return *object_;
  object_ = b_.DeclareRule("a JSON object");
  const Node start = b_.NewNode();
  const Node accept = b_.NewNode();
  const Node open = Whitespace(b_.Range(start, '{', '{'));
  b_.Bytes(open, accept, '}', '}');
  const auto member = [&](Node from) {
    const Node colon = b_.Range(Whitespace(b_.CallAny(from, {String()})), ':', ':');
    return b_.CallAny(Whitespace(colon), {AnyValue()});
  };
  const Node after_member = b_.NewNode();
  b_.Epsilon(member(open), after_member);
  const Node gap = Whitespace(after_member);
  b_.Bytes(gap, accept, '}', '}');
  b_.Epsilon(member(Whitespace(b_.Range(gap, ',', ','))), after_member);
  b_.DefineRule(*object_, start, accept);
  return *object_;
}

JsonRules::Rule JsonRules::AnyArray() {
  if (array_) return *array_;
  array_ = b_.DeclareRule("a JSON array");
  const Node start = b_.NewNode();
  const Node accept = b_.NewNode();
  const Node open = Whitespace(b_.Range(start, '[', '['));
  b_.Bytes(open, accept, ']', ']');
  const Node after_item = b_.NewNode();
  b_.Epsilon(b_.CallAny(open, {AnyValue()}), after_item);
  const Node gap = Whitespace(after_item);
  b_.Bytes(gap, accept, ']', ']');
  b_.Epsilon(b_.CallAny(Whitespace(b_.Range(gap, ',', ',')), {AnyValue()}), after_item);
  b_.DefineRule(*array_, start, accept);
  return *array_;
}

}  // namespace tpserve
