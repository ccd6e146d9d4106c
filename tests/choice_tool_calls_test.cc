// ChoiceToolCalls (coordinator/api/choice_tool_calls.h): the one tool_choice dispatch both front
// ends use. Whatever the split of the text, streamed deltas and whole calls agree (content,
// names, arguments and ids), ids depend on the response id and choice index only, and a
// constrained output cut short stays content.
#include "coordinator/api/choice_tool_calls.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

using Delivery = ChoiceToolCalls::Delivery;

ToolUse Use(ToolUse::Choice choice, std::string function = "") {
  ToolUse u;
  u.choice = choice;
  u.function = std::move(function);
  u.tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
          "properties": {"city": {"type": "string"}}}}}, {"type": "function", "function": {"name": "f"}}])");
  return u;
}

// Feeds `text` in pieces of `step` bytes (the last one final), and merges the deltas into
// whole calls the way a client does: a delta with an id starts a call, others extend it.
struct Result {
  std::string content;
  std::vector<ToolCall> calls;
  int counted = 0;
};
Result FeedAll(const ToolUse& use, ToolCallFormat format, const std::string& text, size_t step, Delivery delivery,
           const std::string& response_id = "chatcmpl-1", int index = 0) {
  ChoiceToolCalls t(use, format, response_id, index, delivery);
  Result r;
  for (size_t at = 0;; at += step) {
    const bool final = at + step >= text.size();
    const ToolStreamDelta d = t.Feed(text.substr(at, final ? std::string::npos : step), final);
    r.content += d.content;
    for (const ToolCallDelta& c : d.tool_calls) {
      if (!c.id.empty()) {
        r.calls.push_back({c.id, c.name, c.arguments});
      } else {
        EXPECT_FALSE(r.calls.empty()) << "a delta without an id before any call";
        if (!r.calls.empty()) r.calls.back().arguments += c.arguments;
      }
    }
    if (final) break;
  }
  r.counted = t.calls();
  return r;
}

void ExpectSame(const Result& a, const Result& b) {
  EXPECT_EQ(a.content, b.content);
  ASSERT_EQ(a.calls.size(), b.calls.size());
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].id, b.calls[i].id) << i;
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << i;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << i;
  }
  EXPECT_EQ(a.counted, b.counted);
}

TEST(ChoiceToolCallsTest, NamedFunctionStreamsArgumentsAndAgreesWithWhole) {
  const std::string args = R"({"city": "Paris"})";
  const Result whole = FeedAll(Use(ToolUse::Choice::kNamed, "get_weather"), ToolCallFormat::kNone, args, 1000,
                           Delivery::kWhole);
  ASSERT_EQ(whole.calls.size(), 1u);
  EXPECT_EQ(whole.calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(whole.calls[0].arguments), nlohmann::json::parse(args));
  EXPECT_EQ(whole.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(whole.content, "");
  for (size_t step : {1, 3, 7}) {
    const Result streamed =
        FeedAll(Use(ToolUse::Choice::kNamed, "get_weather"), ToolCallFormat::kNone, args, step, Delivery::kStreamed);
    ASSERT_EQ(streamed.calls.size(), 1u) << step;
    EXPECT_EQ(streamed.calls[0].id, whole.calls[0].id) << step;  // the same id either way
    EXPECT_EQ(streamed.calls[0].name, "get_weather");
    EXPECT_EQ(streamed.calls[0].arguments, args) << step;  // as the model wrote them
    EXPECT_EQ(streamed.counted, 1);
  }
}

TEST(ChoiceToolCallsTest, RequiredListIsParsedAtTheEndAndCutShortStaysContent) {
  const std::string text = R"([{"name": "get_weather", "parameters": {"city": "Oslo"}}, {"name": "f", "parameters": {}}])";
  const Result whole = FeedAll(Use(ToolUse::Choice::kRequired), ToolCallFormat::kNone, text, 1000, Delivery::kWhole);
  ASSERT_EQ(whole.calls.size(), 2u);
  EXPECT_EQ(whole.calls[0].name, "get_weather");
  EXPECT_EQ(whole.calls[1].name, "f");
  EXPECT_NE(whole.calls[0].id, whole.calls[1].id);
  EXPECT_EQ(whole.counted, 2);
  ExpectSame(FeedAll(Use(ToolUse::Choice::kRequired), ToolCallFormat::kNone, text, 5, Delivery::kStreamed), whole);

  const std::string cut = text.substr(0, 30);  // max_tokens hit mid-way
  for (Delivery d : {Delivery::kWhole, Delivery::kStreamed}) {
    const Result r = FeedAll(Use(ToolUse::Choice::kRequired), ToolCallFormat::kNone, cut, 4, d);
    EXPECT_EQ(r.content, cut);
    EXPECT_TRUE(r.calls.empty());
    EXPECT_EQ(r.counted, 0);
  }
  const Result named_cut =
      FeedAll(Use(ToolUse::Choice::kNamed, "get_weather"), ToolCallFormat::kNone, "{\"ci", 100, Delivery::kWhole);
  EXPECT_EQ(named_cut.content, "{\"ci");
  EXPECT_TRUE(named_cut.calls.empty());
}

TEST(ChoiceToolCallsTest, AutoParsesTheModelsSyntaxTheSameForAnySplit) {
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const std::string text = "I'll check.\n\n" + call + "\n" + call;
  const Result whole = FeedAll(Use(ToolUse::Choice::kAuto), ToolCallFormat::kHermes, text, 10000, Delivery::kWhole);
  EXPECT_EQ(whole.content, "I'll check.");
  ASSERT_EQ(whole.calls.size(), 2u);
  EXPECT_EQ(whole.counted, 2);
  for (size_t step : {1, 2, 13}) {
    ExpectSame(FeedAll(Use(ToolUse::Choice::kAuto), ToolCallFormat::kHermes, text, step, Delivery::kStreamed), whole);
  }
}

TEST(ChoiceToolCallsTest, NoToolsIsContent) {
  const Result r = FeedAll(Use(ToolUse::Choice::kNone), ToolCallFormat::kHermes,
                       "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", 3, Delivery::kStreamed);
  EXPECT_EQ(r.content, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
  EXPECT_TRUE(r.calls.empty());
}

TEST(ChoiceToolCallsTest, IdsDependOnTheResponseAndTheChoiceOnly) {
  const std::string args = R"({"city": "Paris"})";
  const ToolUse use = Use(ToolUse::Choice::kNamed, "get_weather");
  const std::string a0 = FeedAll(use, ToolCallFormat::kNone, args, 100, Delivery::kWhole, "resp-a", 0).calls.at(0).id;
  EXPECT_EQ(FeedAll(use, ToolCallFormat::kNone, args, 2, Delivery::kStreamed, "resp-a", 0).calls.at(0).id, a0);
  EXPECT_NE(FeedAll(use, ToolCallFormat::kNone, args, 100, Delivery::kWhole, "resp-a", 1).calls.at(0).id, a0);
  EXPECT_NE(FeedAll(use, ToolCallFormat::kNone, args, 100, Delivery::kWhole, "resp-b", 0).calls.at(0).id, a0);
  EXPECT_EQ(ToolCallIdSeed("resp-a", 1), ToolCallIdSeed("resp-a", 0) + 1);
}

}  // namespace
}  // namespace tpserve
