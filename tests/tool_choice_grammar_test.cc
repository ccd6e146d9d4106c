// The tool_choice schemas (coordinator/text/tool_calls.h) through the structured output
// compiler (coordinator/structured/json_schema.h): they compile, the outputs they allow read
// back as calls, and they refuse what a tool's schema does not allow.
#include <memory>
#include <string>
#include <vector>

#include "coordinator/structured/grammar_matcher.h"
#include "coordinator/structured/json_schema.h"
#include "coordinator/text/tool_calls.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using Json = nlohmann::ordered_json;

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object",
    "properties": {"tags": {"type": "array", "items": {"type": "string"}},
                   "options": {"type": "object", "properties": {"limit": {"type": "number"}}}}}}},
  {"type": "function", "function": {"name": "now"}}
])");

std::shared_ptr<const Grammar> Compile(const absl::StatusOr<std::string>& schema) {
  EXPECT_TRUE(schema.ok()) << schema.status();
  if (!schema.ok()) return nullptr;
  auto grammar = GrammarFromJsonSchemaText(*schema);
  EXPECT_TRUE(grammar.ok()) << *schema << ": " << grammar.status();
  return grammar.ok() ? *grammar : nullptr;
}

bool Matches(const std::shared_ptr<const Grammar>& grammar, const std::string& text) {
  GrammarMatcher matcher(grammar);
  return matcher.AdvanceBytes(text) && matcher.CanEnd();
}

TEST(ToolChoiceGrammarTest, RequiredAllowsCallsOfTheToolsOnly) {
  const auto grammar = Compile(RequiredToolsSchema(kTools));
  ASSERT_NE(grammar, nullptr);
  const std::string weather = R"({"name": "get_weather", "parameters": {"city": "Oslo", "unit": "celsius"}})";
  const std::string search = R"({"name": "search", "parameters": {"tags": ["a"], "options": {"limit": 2.5}}})";
  const std::string now = R"({"name": "now", "parameters": {}})";
  for (const std::string& output : {"[" + weather + "]", "[" + weather + ", " + search + ", " + now + "]"}) {
    EXPECT_TRUE(Matches(grammar, output)) << output;
    absl::StatusOr<std::vector<ToolCall>> calls = ToolCallsFromConstrainedOutput(output, "", 3);
    ASSERT_TRUE(calls.ok()) << calls.status();
    EXPECT_EQ((*calls)[0].arguments, R"({"city":"Oslo","unit":"celsius"})");
  }
  for (const std::string& output :
       {std::string("[]"), std::string(R"([{"name": "other", "parameters": {}}])"),
        std::string(R"([{"name": "now", "parameters": {"city": "Oslo"}}])"),
        std::string(R"([{"name": "get_weather", "parameters": {"unit": "celsius"}}])"),
        std::string(R"([{"name": "get_weather", "parameters": {"city": "Oslo", "days": 1.5}}])")}) {
    EXPECT_FALSE(Matches(grammar, output)) << output;
  }
}

TEST(ToolChoiceGrammarTest, NamedAllowsThatFunctionsArguments) {
  const auto weather = Compile(NamedToolSchema(kTools, "get_weather"));
  ASSERT_NE(weather, nullptr);
  EXPECT_TRUE(Matches(weather, R"({"city": "Oslo", "days": 3})"));
  EXPECT_FALSE(Matches(weather, R"({"days": 3})"));
  absl::StatusOr<std::vector<ToolCall>> calls =
      ToolCallsFromConstrainedOutput(R"({"city": "Oslo", "days": 3})", "get_weather", 3);
  ASSERT_TRUE(calls.ok()) << calls.status();
  EXPECT_EQ((*calls)[0].arguments, R"({"city":"Oslo","days":3})");

  const auto now = Compile(NamedToolSchema(kTools, "now"));
  ASSERT_NE(now, nullptr);
  EXPECT_TRUE(Matches(now, "{}"));
}

}  // namespace
}  // namespace tpserve
