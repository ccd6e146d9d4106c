// JSON Schema `pattern` (ECMA-262 regular expressions, a subset) as the inside of a JSON
// string: what the model writes between the quotes so that the decoded string matches.
// Tested by tests/structured_output_test.cc.
//
// Supported: literals, '.', classes [a-z] [^...], \d \w \s \D \W \S, escapes (\n \t \r \f
// \v \0 \xHH \uHHHH and escaped punctuation), groups (...) (?:...) (?<name>...),
// alternation, quantifiers ? * + {n} {n,} {n,m} (lazy forms too: same language), and '^' /
// '$' at the start / end of a top-level alternative. As in JSON Schema, a pattern is not
// anchored: a side without its anchor may have any text. Refused, with the offset:
// backreferences, lookaround, \b \B, other anchors, counts above the repetition limit.
// Characters are code points (as with ECMA's `u` flag); \d \w \s are ECMA's ASCII \d \w and
// Unicode \s. Characters that JSON must escape are written with their one short escape.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "coordinator/structured/grammar_builder.h"

namespace tpserve {

// Builds after `from` the encoded string contents `pattern` matches; returns the end node.
// `max_repetition` bounds {n,m} counts (they are unrolled). Errors are InvalidArgument,
// describing the feature and its byte offset in the pattern.
absl::StatusOr<GrammarBuilder::Node> BuildPatternContents(GrammarBuilder& builder, GrammarBuilder::Node from,
                                                          std::string_view pattern, int max_repetition);

}  // namespace tpserve
