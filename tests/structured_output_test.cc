// Tests for coordinator/structured/: JSON Schema compilation (json_schema.h) and the
// byte-level matcher (grammar_matcher.h): documents of every supported kind accepted or
// refused byte by byte, unsupported keywords refused with their path, and the grammar
// builder's checks. Token masks are in structured_output_mask_test.cc.
#include <string>
#include <vector>

#include "coordinator/structured/grammar_builder.h"
#include "coordinator/structured/grammar_matcher.h"
#include "coordinator/structured/json_schema.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/json_schema_validator.h"

namespace tpserve {
namespace {

std::shared_ptr<const Grammar> Compile(const std::string& schema, const JsonSchemaOptions& options = {}) {
  auto grammar = GrammarFromJsonSchemaText(schema, options);
  EXPECT_TRUE(grammar.ok()) << schema << ": " << grammar.status();
  return grammar.ok() ? *grammar : nullptr;
}

// The whole of `text` is a document of the grammar.
bool Matches(const std::shared_ptr<const Grammar>& grammar, const std::string& text) {
  GrammarMatcher matcher(grammar);
  return matcher.AdvanceBytes(text) && matcher.CanEnd();
}

struct Case {
  std::string schema;
  std::vector<std::string> accept;
  std::vector<std::string> reject;
};

// Every accepted document also parses and validates (JSON Schema's meaning).
void CheckCase(const Case& c) {
  SCOPED_TRACE(c.schema);
  const auto grammar = Compile(c.schema);
  ASSERT_NE(grammar, nullptr);
  const auto schema = nlohmann::json::parse(c.schema);
  const testing_json::SchemaValidator validator(schema);
  for (const std::string& doc : c.accept) {
    EXPECT_TRUE(Matches(grammar, doc)) << "should accept: " << doc;
    const auto parsed = nlohmann::json::parse(doc, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << doc;
    if (!schema.is_object() || !schema.contains("type") || schema["type"] != "json_object") {
      EXPECT_EQ(validator.Check(parsed), "") << doc;
    }
  }
  for (const std::string& doc : c.reject) EXPECT_FALSE(Matches(grammar, doc)) << "should reject: " << doc;
}

TEST(JsonSchemaTest, JsonObjectMode) {
  CheckCase({R"({"type": "json_object"})",
             {"{}", R"({"a": [1, -2.5e3, "x\n\u00e9\ud83d\ude00", true, false, null, {"b": {}}]})", " {\"k\":{}} \n",
              "{\n \"a\": 1,\r\n\"b\": [\n 2\n ]\n}"},
             {"[]", "\"s\"", "1", "{\"a\" 1}", "{\"a\":1,}", "{} {}", "{'a':1}", "{\"a\":01}", "{\"a\":\"\\ud83d\"}",
              "{\"a\":\"\x01\"}", "{\"a\":tru}", "{", "",
              // Indented deeper than the default whitespace bound (2 bytes a gap) allows.
              "{\n  \"a\": 1\n}"}});
  // The same from the dedicated entry point.
  auto grammar = GrammarForAnyJsonObject();
  ASSERT_TRUE(grammar.ok());
  EXPECT_TRUE(Matches(*grammar, "{\"x\": [null]}"));
}

TEST(JsonSchemaTest, WhitespaceRunsAreBounded) {
  JsonSchemaOptions options;
  options.text.max_whitespace_bytes = 3;
  const auto grammar = Compile(R"({"type": "object", "properties": {"a": {"type": "integer"}}})", options);
  ASSERT_NE(grammar, nullptr);
  EXPECT_TRUE(Matches(grammar, "{   \"a\"   :   1   }"));
  EXPECT_FALSE(Matches(grammar, "{    \"a\": 1}"));
  EXPECT_FALSE(Matches(grammar, "{\"a\":\n\n\n\n1}"));
  EXPECT_TRUE(Matches(grammar, "   {}   "));
  EXPECT_FALSE(Matches(grammar, "{}    "));
  // The default bound is 2: separators with a space, CRLF, one space after a newline.
  const auto defaults = Compile(R"({"type": "json_object"})");
  EXPECT_TRUE(Matches(defaults, "{" + std::string(2, ' ') + "}"));
  EXPECT_FALSE(Matches(defaults, "{" + std::string(3, ' ') + "}"));
  EXPECT_TRUE(Matches(defaults, "{\"a\": [1, 2],\r\n\"b\":\n {}} "));
  EXPECT_FALSE(Matches(defaults, "{\"a\":\n\n\n1}"));
}

TEST(JsonSchemaTest, ObjectsWithRequiredAndOptionalProperties) {
  CheckCase({R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                 "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name"]})",
             {R"({"name": "x"})", R"({"name": "x", "age": 3})", R"({"name":"x","tags":[]})",
              R"({"name": "x", "age": -7, "tags": ["a", "b"]})", R"({ "name" : "" })"},
             {"{}", R"({"age": 3})", R"({"age": 3, "name": "x"})", R"({"name": "x", "extra": 1})", R"({"name": "x",})",
              R"({"name": "x", "age": 3.5})", R"({"name": "x" "age": 3})", R"({"name": 1})"}});
  // All optional: the empty object, any subset in order.
  CheckCase({R"({"properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"const": 1}}})",
             {"{}", R"({"a": true})", R"({"b": null})", R"({"c": 1})", R"({"a": false, "c": 1})",
              R"({"a": true, "b": null, "c": 1})"},
             {R"({,"a": true})", R"({"c": 1, "a": true})", R"({"a": true,})", R"({"c": 2})"}});
  // A property whose schema is false may not appear.
  CheckCase({R"({"properties": {"a": {"type": "integer"}, "b": false}})", {"{}", R"({"a": 1})"}, {R"({"b": 1})"}});
  // additionalProperties false without properties: only {}.
  CheckCase({R"({"type": "object", "additionalProperties": false})", {"{}", "{ }"}, {R"({"a": 1})"}});
  // Keys that need escaping are written as JSON writes them.
  CheckCase({R"({"type": "object", "properties": {"a\"b/c": {"type": "integer"}}, "required": ["a\"b/c"]})",
             {R"({"a\"b/c": 1})"},
             {R"({"a"b/c": 1})"}});
}

TEST(JsonSchemaTest, Scalars) {
  CheckCase({R"({"type": "integer"})",
             {"0", "-0", "12", "-345", "12345678901234567890"},
             {"01", "1.0", "1e3", "-", "+1", "123456789012345678901", " - 1"}});
  CheckCase({R"({"type": "number"})",
             {"0", "1.5", "-0.25", "1e10", "1E+2", "2.5e-07", "99999999999999999999.99999999999999999999e99"},
             {"1.", ".5", "1e", "1e+", "1e100", "0x10", "NaN", "Infinity", "1.2.3"}});
  CheckCase({R"({"type": "boolean"})", {"true", "false"}, {"True", "1", "null"}});
  CheckCase({R"({"type": "null"})", {"null", " null "}, {"nul", "None"}});
  CheckCase({R"({"type": "string"})",
             {R"("")", R"("abc")", R"("\"\\\/\b\f\n\r\t")", R"("\u0041\uFFFF\uD834\uDD1E")",
              "\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"", "\"\x7F\""},
             {R"("abc)", "\"a\nb\"", R"("\x")", R"("\u12")", R"("\uDC00")", R"("\uD800")", R"("\uD800\u0041")",
              "\"\xC3\"", "\"\xED\xA0\x80\"", "\"\xC0\xAF\"", "\"\xF5\x80\x80\x80\"", "'a'"}});
}

TEST(JsonSchemaTest, StringLengths) {
  // Lengths count code points: an escape or a 4-byte character is one.
  CheckCase({R"({"type": "string", "minLength": 2, "maxLength": 3})",
             {R"("ab")", R"("abc")", "\"\xF0\x9F\x98\x80\xC3\xA9\"", R"("\n\u0041")", R"("\ud83d\ude00a")"},
             {R"("a")", R"("abcd")", R"("")", "\"\xF0\x9F\x98\x80\""}});
  CheckCase({R"({"minLength": 3})", {R"("abc")", R"("abcdefgh")"}, {R"("ab")", "123"}});
  CheckCase({R"({"type": "string", "maxLength": 0})", {R"("")"}, {R"("a")"}});
}

TEST(JsonSchemaTest, Patterns) {
  CheckCase({R"({"type": "string", "pattern": "^[a-z]+$"})", {R"("abc")"}, {R"("")", R"("aBc")", R"("ab1")"}});
  CheckCase({R"({"type": "string", "pattern": "^\\d{3}-\\d{2,4}$"})",
             {R"("123-45")", R"("123-4567")"},
             {R"("12-345")", R"("123-45678")", R"("123-4")"}});
  // Unanchored: any text around a match.
  CheckCase({R"({"type": "string", "pattern": "ab+c"})", {R"("abc")", R"("xxabbbcyy")"}, {R"("ac")", R"("xyz")"}});
  CheckCase(
      {R"({"type": "string", "pattern": "^(cat|dog)s?$"})", {R"("cat")", R"("dogs")"}, {R"("cats!")", R"("bird")"}});
  // Characters JSON must escape are written escaped.
  CheckCase({R"({"type": "string", "pattern": "^\"[^\"]*\"$"})", {R"("\"hi\"")", R"("\"\"")"}, {R"(""hi"")"}});
  CheckCase({R"({"type": "string", "pattern": "^\\s?\\w+\\.$"})", {R"("\tword.")", R"("x_1.")"}, {R"("a b.")"}});
  CheckCase({R"({"type": "string", "pattern": "^[^a-c]{2}$"})", {"\"xy\""}, {"\"ab\"", "\"x\""}});
  CheckCase({R"({"type": "string", "pattern": "^.$"})", {"\"a\""}, {"\"\\n\"", "\"ab\""}});
  // Characters are code points (the validator's std::regex counts bytes, so only the grammar here).
  EXPECT_TRUE(Matches(Compile(R"({"type": "string", "pattern": "^[^a-c]{2}$"})"), "\"\xC3\xA9!\""));
  EXPECT_TRUE(Matches(Compile(R"({"type": "string", "pattern": "^.$"})"), "\"\xE2\x82\xAC\""));
  EXPECT_FALSE(Matches(Compile(R"({"type": "string", "pattern": "^.$"})"), "\"\xC3\xA9\xC3\xA9\""));
}

TEST(JsonSchemaTest, EnumAndConst) {
  CheckCase({R"({"enum": ["red", "green", 3, null, {"a": [1]}, 1.5]})",
             {R"("red")", R"("green")", "3", "null", R"({"a":[1]})", "1.5"},
             {R"("blue")", "4", R"({"a": [1]})", R"("gree")", "1.50"}});
  // 'type' filters the values.
  CheckCase({R"({"type": "string", "enum": ["a", 1, "b"]})", {R"("a")", R"("b")"}, {"1"}});
  CheckCase({R"({"const": "fixed"})", {R"("fixed")"}, {R"("other")"}});
  CheckCase({R"({"enum": ["a", "b"], "const": "b"})", {R"("b")"}, {R"("a")"}});
}

TEST(JsonSchemaTest, Arrays) {
  CheckCase({R"({"type": "array", "items": {"type": "integer"}})",
             {"[]", "[1]", "[1, 2, 3]", "[ 1 ,2 ]"},
             {"[1,]", "[,1]", "[1 2]", "[\"a\"]", "["}});
  CheckCase({R"({"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3})",
             {"[true, false]", "[true,true,true]"},
             {"[]", "[true]", "[true, true, true, true]"}});
  CheckCase({R"({"type": "array", "minItems": 1})", {"[1]", R"([{"a": null}, "x"])"}, {"[]"}});
  CheckCase({R"({"type": "array", "items": false})", {"[]"}, {"[1]"}});
  CheckCase({R"({"type": "array", "maxItems": 0})", {"[]"}, {"[1]"}});
}

TEST(JsonSchemaTest, UnionsAndTypeLists) {
  CheckCase({R"({"type": ["string", "null"]})", {R"("x")", "null"}, {"1", "[]"}});
  CheckCase({R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]})",
             {"7", R"("ab")"},
             {R"("abc")", "1.5"}});
  // oneOf is compiled as anyOf; with disjoint branches that is the same.
  CheckCase(
      {R"({"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind", "x"]},
                           {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind", "y"]}]})",
       {R"({"kind": "a", "x": 1})", R"({"kind": "b", "y": "z"})"},
       {R"({"kind": "a", "y": "z"})", R"({"kind": "c", "x": 1})"}});
  CheckCase({R"({"allOf": [{"type": "integer"}]})", {"5"}, {"\"5\""}});
  CheckCase({"true", {"1", "\"x\"", "[{}]", "null"}, {"", "nul"}});
  CheckCase({"{}", {"1", "{\"a\": [true]}"}, {"{a}"}});
}

TEST(JsonSchemaTest, References) {
  CheckCase(
      {R"({"$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}},
                 "type": "array", "items": {"$ref": "#/$defs/point"}})",
       {"[]", R"([{"x": 1, "y": 2.5}])"},
       {R"([{"x": 1}])"}});
  CheckCase({R"({"definitions": {"name": {"type": "string", "title": "Name"}}, "type": "object",
                 "properties": {"first": {"$ref": "#/definitions/name", "description": "ignored"}}, "required": ["first"]})",
             {R"({"first": "a"})"},
             {R"({"first": 1})"}});
  // Recursion: a tree.
  CheckCase(
      {R"({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
                 "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"]}},
                 "$ref": "#/$defs/node"})",
       {R"({"value": 1})", R"({"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}, {"value": 4}]})"},
       {R"({"value": 1, "children": [{}]})"}});
  // Recursion through the root.
  CheckCase(
      {R"({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["next"]})",
       {R"({"next": null})", R"({"next": {"next": {"next": null}}})"},
       {R"({"next": {}})"}});
}

void ExpectError(const std::string& schema, const std::string& message) {
  const auto grammar = GrammarFromJsonSchemaText(schema);
  ASSERT_FALSE(grammar.ok()) << schema;
  EXPECT_EQ(grammar.status().code(), absl::StatusCode::kInvalidArgument) << grammar.status();
  EXPECT_EQ(grammar.status().message(), message) << schema;
}

TEST(JsonSchemaTest, UnsupportedKeywordsAreRefusedWithTheirPath) {
  ExpectError(R"({"type": "object", "properties": {"a": {"type": "object", "patternProperties": {"x": {}}}}})",
              "response_format.json_schema: keyword 'patternProperties' at #/properties/a is not supported");
  ExpectError(R"({"type": "integer", "minimum": 0})",
              "response_format.json_schema: keyword 'minimum' at # is not supported");
  ExpectError(R"({"type": "array", "items": {"type": "string", "format": "email"}})",
              "response_format.json_schema: keyword 'format' at #/items is not supported");
  ExpectError(R"({"$defs": {"a~b/c": {"uniqueItems": true}}, "$ref": "#/$defs/a~0b~1c"})",
              "response_format.json_schema: keyword 'uniqueItems' at #/$defs/a~0b~1c is not supported");
  ExpectError(R"({"anyOf": [{"type": "string"}, {"not": {}}]})",
              "response_format.json_schema: keyword 'not' at #/anyOf/1 is not supported");
  ExpectError(R"({"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "string"}})",
              "response_format.json_schema: 'additionalProperties' other than false at #/additionalProperties is not "
              "supported beside 'properties' or 'required', or as a schema; list every property under 'properties'");
  ExpectError(R"({"$ref": "https://example.com/s.json"})",
              "response_format.json_schema: '$ref' \"https://example.com/s.json\" at #/$ref is not supported; only "
              "references into this schema (\"#/$defs/...\") are");
  ExpectError(R"({"$ref": "#/$defs/missing"})",
              "response_format.json_schema: '$ref' \"#/$defs/missing\" at #/$ref does not exist");
  ExpectError(R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})",
              "response_format.json_schema: 'allOf' with other than one schema at #/allOf is not supported");
  ExpectError(R"({"type": "string", "anyOf": [{"maxLength": 3}]})",
              "response_format.json_schema: keyword 'type' beside 'anyOf' at # is not supported");
  ExpectError(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})",
              "response_format.json_schema: required property 'b' at #/required is not in 'properties'; no other "
              "properties are allowed");
  ExpectError(R"({"type": "date"})", "response_format.json_schema: type 'date' at #/type is not supported");
  ExpectError(R"j({"type": "string", "pattern": "^(?=a)"})j",
              "response_format.json_schema: 'pattern' \"^(?=a)\" at #/pattern cannot be compiled: lookaround or a "
              "group flag at offset 2 is not supported");
  ExpectError(R"({"type": "string", "pattern": "(a)\\1"})",
              "response_format.json_schema: 'pattern' \"(a)\\\\1\" at #/pattern cannot be compiled: the escape '\\1' "
              "at offset 4 is not supported");
  ExpectError(R"({"type": "string", "maxLength": 100000})",
              "response_format.json_schema: 'maxLength' 100000 at #/maxLength is above 256, the largest count "
              "supported");
  ExpectError(R"({"type": "array", "minItems": 3, "maxItems": 2})",
              "response_format.json_schema: 'maxItems' below 'minItems' at # admits no value");
  ExpectError("false", "response_format.json_schema: the schema false at # admits no value");
  ExpectError("{", "response_format.json_schema: the schema is not valid JSON");
}

TEST(JsonSchemaTest, RecursionThatCannotEndIsRefused) {
  ExpectError(
      R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"})",
      "response_format.json_schema: the schema at #/$defs/a refers to itself before any output (left recursion)");
  ExpectError(R"({"type": "object", "properties": {"self": {"$ref": "#"}}, "required": ["self"]})",
              "response_format.json_schema: the document matches nothing: every way through it needs endless output");
  // An optional self-reference is fine.
  EXPECT_NE(Compile(R"({"type": "object", "properties": {"self": {"$ref": "#"}}})"), nullptr);
}

TEST(JsonSchemaTest, AnnotationsAreIgnored) {
  const auto grammar = Compile(R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x", "title": "T",
      "description": "d", "examples": [1], "default": 1, "$comment": "c", "type": "integer"})");
  EXPECT_TRUE(Matches(grammar, "1"));
}

TEST(JsonSchemaTest, TooLargeSchemasAreRefused) {
  JsonSchemaOptions options;
  options.max_states = 2000;
  const auto grammar = GrammarFromJsonSchemaText(
      R"({"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 200})", options);
  ASSERT_FALSE(grammar.ok());
  EXPECT_EQ(grammar.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(grammar.status().message().find("needs more than 2000 automaton states"), std::string::npos)
      << grammar.status();
}

TEST(GrammarMatcherTest, ShortestCompletionAndCopies) {
  const auto grammar =
      Compile(R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
                                   "required": ["a"]})");
  GrammarMatcher matcher(grammar);
  EXPECT_EQ(matcher.ShortestCompletion(), R"({"a":[""]})");
  ASSERT_TRUE(matcher.AdvanceBytes(R"({"a": ["x)"));
  GrammarMatcher copy = matcher;
  EXPECT_EQ(copy.ShortestCompletion(), R"("]})");
  EXPECT_FALSE(copy.Advance('\x01'));  // refused bytes leave the state alone
  EXPECT_TRUE(copy.AdvanceBytes(R"(", "y"]})"));
  EXPECT_TRUE(copy.CanEnd());
  EXPECT_FALSE(matcher.CanEnd());  // the original did not move
  EXPECT_FALSE(matcher.AdvanceBytes("\"]}x"));
  EXPECT_TRUE(matcher.AdvanceBytes("\"]}"));
  EXPECT_TRUE(matcher.CanEnd());
}

TEST(GrammarBuilderTest, DeterminizesAndPrunes) {
  // ab | ac | a(dead end calling a rule that matches nothing)
  GrammarBuilder b;
  const auto never = b.DeclareRule("never");
  {
    const auto s = b.NewNode();
    const auto loop = b.NewNode();
    b.Epsilon(s, loop);
    b.Call(loop, loop, never);  // only ever calls itself: matches nothing
    b.DefineRule(never, s, b.NewNode());
  }
  const auto root = b.DeclareRule("root");
  const auto s = b.NewNode();
  const auto end = b.NewNode();
  b.Epsilon(b.Literal(s, "ab"), end);
  b.Epsilon(b.Literal(s, "ac"), end);
  b.Epsilon(b.CallAny(b.Range(s, 'a', 'a'), {never}), end);
  b.DefineRule(root, s, end);
  auto grammar = b.Build(root);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  // root: start, after 'a', final (the builder may share the final state): no state for 'never'.
  EXPECT_EQ((*grammar)->num_rules(), 1u) << (*grammar)->DebugString();
  EXPECT_TRUE(Matches(*grammar, "ab"));
  EXPECT_TRUE(Matches(*grammar, "ac"));
  EXPECT_FALSE(Matches(*grammar, "a"));
  GrammarMatcher m(*grammar);
  ASSERT_TRUE(m.Advance('a'));
  EXPECT_EQ(m.ShortestCompletion().size(), 1u);
}

}  // namespace
}  // namespace tpserve
