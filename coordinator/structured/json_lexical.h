// The lexical pieces of JSON text as GrammarBuilder fragments: whitespace, string
// characters (UTF-8 and escapes), numbers, and the shared rules for any string, number and
// value that schema rules call. Used by json_schema.cc and regex_subset.cc; tested by
// tests/structured_output_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "coordinator/structured/grammar_builder.h"

namespace tpserve {

// Sorted, disjoint, inclusive ranges of Unicode code points.
using CodepointRanges = std::vector<std::pair<char32_t, char32_t>>;
inline constexpr char32_t kMaxCodepoint = 0x10FFFF;

CodepointRanges NormalizeRanges(CodepointRanges ranges);
CodepointRanges ComplementRanges(const CodepointRanges& ranges);  // within [0, kMaxCodepoint]
CodepointRanges IntersectRanges(const CodepointRanges& a, const CodepointRanges& b);

// The UTF-8 encodings of the code points in `ranges` (surrogates D800-DFFF skipped), as
// sequences of byte ranges: the i-th byte of an encoding lies in the i-th range.
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> Utf8Sequences(const CodepointRanges& ranges);

// One code point of `ranges` as a JSON string writes it: raw UTF-8, except '"', '\' and
// control characters, which get their one escape (\" \\ \b \f \n \r \t, else \u00xx).
// Builds after `from`; returns the end node. `ranges` must not be empty.
GrammarBuilder::Node EncodedCharOf(GrammarBuilder& b, GrammarBuilder::Node from, const CodepointRanges& ranges);
// One code point in any encoding JSON allows: raw UTF-8 (not '"', '\' or a control), a
// short escape, \uXXXX of a non-surrogate, or a \uD8xx\uDCxx surrogate pair.
GrammarBuilder::Node AnyEncodedChar(GrammarBuilder& b, GrammarBuilder::Node from);
// The same, ending at `to` (which may be `from`: a loop whose every pass reaches the same
// automaton state, so determinizing does not make equivalent copies).
void AnyEncodedCharInto(GrammarBuilder& b, GrammarBuilder::Node from, GrammarBuilder::Node to);

// Limits on JSON text that keep a model from looping and keep every number a finite double.
struct JsonTextLimits {
  // JSON whitespace bytes in a row. 2 fits compact JSON, json.dumps's ", " and ": ", CRLF line
  // ends and one leading space (SentencePiece), and keeps a model that favours whitespace (as
  // random weights do) from spending its tokens between JSON tokens: each gap costs at most 2.
  // Pretty-printed indentation is cut to one space after a newline. (xgrammar's
  // any_whitespace=False allows only the ", " and ": " separators; vLLM exposes it as
  // disable_any_whitespace.)
  int max_whitespace_bytes = 2;
  int max_integer_digits = 20;   // digits before the decimal point
  int max_fraction_digits = 20;  // digits after it
  int max_exponent_digits = 2;   // so the largest number is below 1e120
};

// The rules every JSON grammar shares, declared on first use.
class JsonRules {
 public:
  using Rule = GrammarBuilder::Rule;
  using Node = GrammarBuilder::Node;
  JsonRules(GrammarBuilder* builder, const JsonTextLimits& limits) : b_(*builder), limits_(limits) {}

  // 0 to max_whitespace_bytes of ' ', '\t', '\n', '\r'.
  Node Whitespace(Node from);
  Rule String();   // any JSON string
  Rule Number();   // -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)? within the digit limits
  Rule Integer();  // -?(0|[1-9]d*) within the digit limit
  Rule Boolean();
  Rule Null();
  Rule AnyValue();
  Rule AnyObject();  // any object: keys any strings, values any values
  Rule AnyArray();

 private:
  Node Digits(Node from, int min, int max);
  Node IntegerPart(Node from);

  GrammarBuilder& b_;
  JsonTextLimits limits_;
  std::optional<Rule> string_, number_, integer_, boolean_, null_, value_, object_, array_;
};

}  // namespace tpserve
