// Compiles a JSON Schema (the OpenAI response_format subset) into a Grammar whose matches
// are exactly JSON texts that parse and validate against the schema, in one fixed shape
// (see docs/structured_output.md). Tested by tests/structured_output_test.cc.
//
// Supported keywords: type (a name or a list; "integer", "number", "string", "boolean",
// "null", "object", "array"), enum, const, properties, required, additionalProperties
// (false, or true/{} on an object without properties), items, minItems, maxItems,
// minLength, maxLength, pattern (regex_subset.h; not together with minLength/maxLength),
// anyOf, oneOf (as anyOf: the output matches at least one branch, perhaps several), allOf
// with one schema, $ref to "#" or any local JSON pointer ("#/$defs/x", "#/definitions/x";
// recursion allowed), $defs and definitions. Annotations are ignored: title, description,
// examples, default, $schema, $id, $comment, deprecated, readOnly, writeOnly. Any other
// keyword is an InvalidArgument error naming it and its JSON pointer, e.g.
//   response_format.json_schema: keyword 'patternProperties' at #/properties/a is not supported
//
// What the grammar produces, and where that is narrower than JSON Schema:
//   - Objects with `properties` allow no other keys (additionalProperties: false is the
//     default, whatever the schema says) and write them in the schema's order; optional ones
//     may be left out. An object schema without `properties` accepts any object.
//   - A schema without `type` has the types its keywords imply (properties -> object,
//     items -> array, pattern/min/maxLength -> string), or any value when none does.
//   - enum/const values are written as nlohmann::json dumps them (compact).
//   - Numbers have at most 20 integer digits, 20 fraction digits and 2 exponent digits;
//     whitespace runs are bounded (JsonTextLimits); strings and arrays are unbounded unless
//     the schema bounds them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "coordinator/structured/grammar.h"
#include "coordinator/structured/json_lexical.h"
#include "nlohmann/json.hpp"

namespace tpserve {

struct JsonSchemaOptions {
  // Whitespace and number-digit bounds of the JSON text.
  JsonTextLimits text;
  // The largest minItems, maxItems, minLength, maxLength and pattern {n,m} count (they are
  // unrolled into automaton states); larger ones are refused.
  int max_repetition = 256;
  // Bound on automaton states: a schema that needs more is refused.
  uint32_t max_states = 200'000;
  // Start of every error message: where the schema came from.
  std::string error_prefix = "response_format.json_schema";
};

// `schema` keeps its key order (properties are written in it).
absl::StatusOr<std::shared_ptr<const Grammar>> GrammarFromJsonSchema(const nlohmann::ordered_json& schema,
                                                                     const JsonSchemaOptions& options = {});
// As above from the schema's JSON text; also {"type": "json_object"}, which is
// response_format's json_object mode: any JSON object.
absl::StatusOr<std::shared_ptr<const Grammar>> GrammarFromJsonSchemaText(std::string_view schema_text,
                                                                         const JsonSchemaOptions& options = {});
// Any JSON object (response_format {"type": "json_object"}).
absl::StatusOr<std::shared_ptr<const Grammar>> GrammarForAnyJsonObject(const JsonSchemaOptions& options = {});

}  // namespace tpserve
