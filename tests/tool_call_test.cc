// Tests of coordinator/text/tool_calls.h: every format read back from what the chat template
// fixtures render for assistants' tool calls (expected.json) and from hand-written model
// outputs; streamed at every split and in random chunkings, which must agree with the whole
// parse; the tool_choice schemas and the checks of `tools`.
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "coordinator/text/tool_calls.h"
#include "gtest/gtest.h"
#include "tests/fixture_files.h"

namespace tpserve {
namespace {

using Json = nlohmann::json;  // compares objects whatever their key order
using OrderedJson = nlohmann::ordered_json;

// ---- Streaming agrees with the whole parse.

// Feeds `text` cut at `cuts` (ascending) and collects the deltas as a ParsedToolOutput.
ParsedToolOutput Stream(ToolCallFormat format, std::string_view text, const std::vector<size_t>& cuts,
                        const ToolCallContext& context) {
  StreamingToolCallParser parser(format, context);
  ParsedToolOutput out;
  auto take = [&out](ToolStreamDelta delta) {
    out.content += delta.content;
    for (ToolCallDelta& call : delta.tool_calls) {
      if (call.index == static_cast<int>(out.calls.size())) {
        EXPECT_FALSE(call.id.empty() || call.name.empty()) << "a call's first delta names it";
        out.calls.push_back({call.id, call.name, ""});
      } else {
        ASSERT_LT(call.index, static_cast<int>(out.calls.size()));
        EXPECT_TRUE(call.id.empty() && call.name.empty()) << "only a call's first delta names it";
      }
      out.calls[call.index].arguments += call.arguments;
    }
  };
  size_t from = 0;
  for (size_t cut : cuts) {
    take(parser.Feed(text.substr(from, cut - from)));
    from = cut;
  }
  take(parser.Feed(text.substr(from)));
  take(parser.Finish());
  return out;
}

void ExpectSame(const ParsedToolOutput& want, const ParsedToolOutput& got, const std::string& how) {
  EXPECT_EQ(want.content, got.content) << how;
  ASSERT_EQ(want.calls.size(), got.calls.size()) << how;
  for (size_t i = 0; i < want.calls.size(); ++i) {
    EXPECT_EQ(want.calls[i].id, got.calls[i].id) << how;
    EXPECT_EQ(want.calls[i].name, got.calls[i].name) << how;
    EXPECT_EQ(want.calls[i].arguments, got.calls[i].arguments) << how;
  }
}

// ParseToolCalls(text), checked for what holds of every output, and streamed split at every
// byte, byte by byte, and in random chunkings: all must agree with it.
ParsedToolOutput ParseAndStream(ToolCallFormat format, std::string_view text, const ToolCallContext& context = {}) {
  const ParsedToolOutput whole = ParseToolCalls(format, text, context);
  if (whole.calls.empty()) {
    EXPECT_EQ(whole.content, text) << "without calls, all text is content";
  }
  for (const ToolCall& call : whole.calls) {
    EXPECT_TRUE(Json::accept(call.arguments) && Json::parse(call.arguments).is_object()) << call.arguments;
    EXPECT_EQ(call.arguments, OrderedJson::parse(call.arguments).dump()) << "arguments are compact";
  }
  std::vector<size_t> every_byte;
  for (size_t cut = 1; cut < text.size(); ++cut) {
    ExpectSame(whole, Stream(format, text, {cut}, context), "split at " + std::to_string(cut));
    every_byte.push_back(cut);
  }
  ExpectSame(whole, Stream(format, text, every_byte, context), "byte by byte");
  std::mt19937 rng(text.size());
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<size_t> cuts;
    for (size_t cut = 1 + rng() % 8; cut < text.size(); cut += 1 + rng() % 8) cuts.push_back(cut);
    ExpectSame(whole, Stream(format, text, cuts, context), "random chunks, trial " + std::to_string(trial));
  }
  return whole;
}

// ---- Formats.

TEST(ToolCallFormatTest, DetectedFromEachFixtureTemplate) {
  const std::map<std::string, ToolCallFormat> want = {
      {"gemma4", ToolCallFormat::kGemma4},         {"gemma3", ToolCallFormat::kNone},
      {"llama3_1", ToolCallFormat::kLlama3Json},   {"llama3_2", ToolCallFormat::kLlama3Json},
      {"llama3_3", ToolCallFormat::kLlama3Json},   {"qwen2_5", ToolCallFormat::kHermes},
      {"qwen3", ToolCallFormat::kHermes},          {"hermes3_tool_use", ToolCallFormat::kHermes},
      {"qwen3_5", ToolCallFormat::kQwen3Coder},    {"gpt_oss", ToolCallFormat::kNone},
      {"deepseek_v3_1", ToolCallFormat::kNone},    {"mistral_small_3_2", ToolCallFormat::kNone},
      {"functionary_v3_1", ToolCallFormat::kNone}, {"seed_oss", ToolCallFormat::kNone},
  };
  for (const auto& [name, format] : want) {
    const std::string source = ReadFile(Fixture("chat_templates/" + name + ".jinja"));
    ASSERT_FALSE(source.empty()) << name;
    EXPECT_EQ(ToolCallFormatName(DetectToolCallFormat(source)), ToolCallFormatName(format)) << name;
  }
}

TEST(ToolCallFormatTest, NamesRoundTripAndUnknownNamesListTheKnown) {
  for (ToolCallFormat format : {ToolCallFormat::kNone, ToolCallFormat::kGemma4, ToolCallFormat::kLlama3Json,
                                ToolCallFormat::kHermes, ToolCallFormat::kQwen3Coder}) {
    absl::StatusOr<ToolCallFormat> parsed = ParseToolCallFormatName(ToolCallFormatName(format));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, format);
  }
  EXPECT_EQ(ToolCallFormatName(ToolCallFormat::kLlama3Json), "llama3_json");
  absl::StatusOr<ToolCallFormat> unknown = ParseToolCallFormatName("pythonic");
  ASSERT_FALSE(unknown.ok());
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "'pythonic'")) << unknown.status();
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "gemma4, llama3_json, hermes, qwen3_coder"))
      << unknown.status();
}

// ---- Round trip: what a template renders for an assistant's calls reads back as those calls.

struct AssistantTurnMarkers {
  std::string_view open;
  std::vector<std::string_view> close;  // the first of these ends the turn
};

AssistantTurnMarkers TurnMarkers(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kGemma4:
      return {"<|turn>model\n", {"<|tool_response>", "<turn|>"}};
    case ToolCallFormat::kLlama3Json:
      return {"<|start_header_id|>assistant<|end_header_id|>\n\n", {"<|eot_id|>", "<|eom_id|>"}};
    default:
      return {"<|im_start|>assistant\n", {"<|im_end|>"}};
  }
}

std::vector<std::string> AssistantTurns(const std::string& rendered, const AssistantTurnMarkers& markers) {
  std::vector<std::string> turns;
  for (size_t pos = rendered.find(markers.open); pos != std::string::npos; pos = rendered.find(markers.open, pos)) {
    pos += markers.open.size();
    size_t end = rendered.size();
    for (std::string_view close : markers.close) end = std::min(end, rendered.find(close, pos));
    turns.push_back(rendered.substr(pos, end - pos));
  }
  return turns;
}

// The calls of a fixture case's assistant messages, arguments as JSON.
std::vector<std::pair<std::string, Json>> CallsInMessages(const Json& messages) {
  std::vector<std::pair<std::string, Json>> calls;
  for (const Json& message : messages) {
    if (message["role"] != "assistant" || !message.contains("tool_calls")) continue;
    for (const Json& call : message["tool_calls"]) {
      const Json& arguments = call["function"]["arguments"];
      calls.emplace_back(call["function"]["name"],
                         arguments.is_string() ? Json::parse(arguments.get<std::string>()) : arguments);
    }
  }
  return calls;
}

TEST(ToolCallRoundTripTest, FixtureRenderingsParseBackToTheirCalls) {
  const std::map<std::string, ToolCallFormat> formats = {
      {"gemma4", ToolCallFormat::kGemma4},           {"llama3_1", ToolCallFormat::kLlama3Json},
      {"llama3_2", ToolCallFormat::kLlama3Json},     {"llama3_3", ToolCallFormat::kLlama3Json},
      {"qwen2_5", ToolCallFormat::kHermes},          {"qwen3", ToolCallFormat::kHermes},
      {"hermes3_tool_use", ToolCallFormat::kHermes}, {"qwen3_5", ToolCallFormat::kQwen3Coder},
  };
  const Json fixtures = Json::parse(ReadFile(Fixture("chat_templates/expected.json")));
  int cases_checked = 0;
  for (const Json& c : fixtures["cases"]) {
    const std::string name = c["name"];
    auto format = formats.find(name.substr(0, name.find('/')));
    std::vector<std::pair<std::string, Json>> want = CallsInMessages(c["messages"]);
    if (format == formats.end() || !c.contains("expected") || want.empty()) continue;
    SCOPED_TRACE(name);
    ToolCallContext context;
    context.tools = c["options"]["tools"];
    std::vector<std::pair<std::string, Json>> got;
    std::string content;
    for (const std::string& turn : AssistantTurns(c["expected"], TurnMarkers(format->second))) {
      ParsedToolOutput parsed = ParseAndStream(format->second, turn, context);
      for (const ToolCall& call : parsed.calls) got.emplace_back(call.name, Json::parse(call.arguments));
      if (!parsed.calls.empty()) content += parsed.content;
    }
    if (absl::StrContains(c["expected"].get<std::string>(), "<|python_tag|>brave_search.call(")) {
      // Llama 3.1's built-in tool syntax is not read back (Llama 3.2 writes them as JSON).
      EXPECT_TRUE(got.empty());
      continue;
    }
    ++cases_checked;
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].first);
      EXPECT_EQ(got[i].second, want[i].second) << "got " << got[i].second.dump() << "\nwant " << want[i].second.dump();
    }
    // What is left of a turn with calls is at most the empty thinking block Qwen 3.5 writes.
    EXPECT_TRUE(content.empty() || content == "<think>\n\n</think>") << content;
  }
  EXPECT_EQ(cases_checked, 36);
}

// ---- Hand-written outputs, format by format.

struct OutputCase {
  std::string text;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments as JSON text
};

void ExpectOutputs(ToolCallFormat format, const std::vector<OutputCase>& cases, const ToolCallContext& context = {}) {
  for (const OutputCase& c : cases) {
    SCOPED_TRACE(c.text);
    ParsedToolOutput parsed = ParseAndStream(format, c.text, context);
    EXPECT_EQ(parsed.content, c.content);
    ASSERT_EQ(parsed.calls.size(), c.calls.size());
    for (size_t i = 0; i < c.calls.size(); ++i) {
      EXPECT_EQ(parsed.calls[i].name, c.calls[i].first);
      EXPECT_EQ(Json::parse(parsed.calls[i].arguments), Json::parse(c.calls[i].second)) << parsed.calls[i].arguments;
    }
  }
}

TEST(ToolCallParseTest, Gemma4) {
  const std::string q = "<|\"|>";
  ExpectOutputs(
      ToolCallFormat::kGemma4,
      {
          {"<|tool_call>call:get_weather{city:" + q + "Paris" + q + ",days:3}<tool_call|>",
           "",
           {{"get_weather", R"({"city": "Paris", "days": 3})"}}},
          {"Let me look.\n<|tool_call>call:a{}<tool_call|><|tool_call>call:b{n:[1,2.5,-3e2],o:{t:true,f:false,z:None,"
           "y:null},s:" +
               q + "a, \"b\" {c}: [d]" + q + ",l:[" + q + "x" + q + ",{k:" + q + "v" + q + "}]}<tool_call|>",
           "Let me look.",
           {{"a", "{}"}, {"b", R"({"n": [1, 2.5, -300.0], "o": {"t": true, "f": false, "z": null, "y": null},
                              "s": "a, \"b\" {c}: [d]", "l": ["x", {"k": "v"}]})"}}},
          // Keys in quotes, spaces around tokens, and a bare word taken as the string it meant.
          {"<|tool_call>call:f{ " + q + "my key" + q + " : 1 , unit : celsius }<tool_call|>",
           "",
           {{"f", R"({"my key": 1, "unit": "celsius"})"}}},
          // Content after a call; an unclosed call at the end that parses is a call.
          {"<|tool_call>call:f{a:1}<tool_call|> Done.", "Done.", {{"f", R"({"a": 1})"}}},
          {"<|tool_call>call:f{a:1}", "", {{"f", R"({"a": 1})"}}},
          // Not well-formed: content, markers and all.
          {"<|tool_call>call:f{city:" + q + "Paris}<tool_call|> then",
           "<|tool_call>call:f{city:" + q + "Paris}<tool_call|> then",
           {}},
          {"<|tool_call>call:f{a:1,}<tool_call|>", "<|tool_call>call:f{a:1,}<tool_call|>", {}},
          {"<|tool_call>call:f[1]<tool_call|>", "<|tool_call>call:f[1]<tool_call|>", {}},
          {"<|tool_call>call:f{a:" + q + "Par", "<|tool_call>call:f{a:" + q + "Par", {}},
          {"Hi <|tool_", "Hi <|tool_", {}},
          {"plain text, <tool_call> and all", "plain text, <tool_call> and all", {}},
      });
}

TEST(ToolCallParseTest, Llama3Json) {
  ExpectOutputs(
      ToolCallFormat::kLlama3Json,
      {
          {R"({"name": "get_weather", "parameters": {"city": "Paris"}})",
           "",
           {{"get_weather", R"({"city": "Paris"})"}}},
          {" \n<|python_tag|>{\"name\": \"a\", \"arguments\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}",
           "",
           {{"a", R"({"x": 1})"}, {"b", "{}"}}},
          {R"({"name": "a", "parameters": "{\"x\": [1, {\"y\": null}]}"})", "", {{"a", R"({"x": [1, {"y": null}]})"}}},
          {R"({"name": "a", "parameters": {"code": "if (x) { y(\"}\"); }"}})",
           "",
           {{"a", R"({"code": "if (x) { y(\"}\"); }"})"}}},
          {R"({"name": "a", "parameters": {"q": "a\"}\\", "r": ["]"]}})",
           "",
           {{"a", R"({"q": "a\"}\\", "r": ["]"]})"}}},
          {R"({"name": "a", "parameters": {}} Done.)", "Done.", {{"a", "{}"}}},
          // JSON that is not a call, calls after content, built-in tools, cut short: content.
          {R"({"answer": 42})", R"({"answer": 42})", {}},
          {R"(Sure: {"name": "a", "parameters": {}})", R"(Sure: {"name": "a", "parameters": {}})", {}},
          {R"(<|python_tag|>brave_search.call(query="x"))", R"(<|python_tag|>brave_search.call(query="x"))", {}},
          {R"({"name": "a", "parameters": {"x": "ab)", R"({"name": "a", "parameters": {"x": "ab)", {}},
          {R"({"name": "a", "parameters": [1]})", R"({"name": "a", "parameters": [1]})", {}},
          {"<|python", "<|python", {}},
      });
}

TEST(ToolCallParseTest, Hermes) {
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  ExpectOutputs(ToolCallFormat::kHermes,
                {
                    {"I'll check.\n\n" + call, "I'll check.", {{"get_weather", R"({"city": "Paris"})"}}},
                    {call + "\n" + call + "\n",
                     "",
                     {{"get_weather", R"({"city": "Paris"})"}, {"get_weather", R"({"city": "Paris"})"}}},
                    {"<think>\nhmm\n</think>\n\n" + call + "\nAnd more.",
                     "<think>\nhmm\n</think>And more.",
                     {{"get_weather", R"({"city": "Paris"})"}}},
                    {"<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>",
                     "",
                     {{"f", R"({"a": 1})"}}},
                    {"<tool_call>{\"name\": \"now\"}</tool_call>", "", {{"now", "{}"}}},
                    {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"h\\u00e9llo \\\"x\\\"\"}}\n",
                     "",
                     {{"f", R"({"s": "héllo \"x\""})"}}},
                    // Not well-formed: content.
                    {"<tool_call>\n{\"name\": get_weather}\n</tool_call>",
                     "<tool_call>\n{\"name\": get_weather}\n</tool_call>",
                     {}},
                    {"<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",
                     "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",
                     {}},
                    {"<tool_call>\n{\"name\": \"f\", \"argu", "<tool_call>\n{\"name\": \"f\", \"argu", {}},
                    {"Use the <tool_call> tag.", "Use the <tool_call> tag.", {}},
                    {"a <b> c <tool", "a <b> c <tool", {}},
                    {"  \n", "  \n", {}},
                });
}

TEST(ToolCallParseTest, Qwen3CoderTypesValuesByTheToolsSchemas) {
  ToolCallContext context;
  context.tools = OrderedJson::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"s": {"type": "string"}, "i": {"type": "integer"}, "n": {"type": "number"},
                     "b": {"type": "boolean"}, "o": {"type": "object"}, "a": {"type": "array"},
                     "ns": {"type": ["string", "null"]}, "any": {"anyOf": [{"type": "null"}, {"type": "integer"}]}}}}}])");
  auto call = [](const std::string& parameters) {
    return "<tool_call>\n<function=f>\n" + parameters + "</function>\n</tool_call>";
  };
  auto p = [](const std::string& key, const std::string& value) {
    return "<parameter=" + key + ">\n" + value + "\n</parameter>\n";
  };
  ExpectOutputs(
      ToolCallFormat::kQwen3Coder,
      {
          {call(p("s", "42") + p("i", "7") + p("n", "2.5") + p("b", "True") + p("o", R"({"k": [1]})") +
                p("a", "[1, 2]")),
           "",
           {{"f", R"({"s": "42", "i": 7, "n": 2.5, "b": true, "o": {"k": [1]}, "a": [1, 2]})"}}},
          {call(p("ns", "None") + p("any", "null") + p("s", "null") + p("b", "false")),
           "",
           {{"f", R"({"ns": null, "any": null, "s": "null", "b": false})"}}},
          // Text that is not the schema's type stays text; untyped parameters are read as JSON where they are.
          {call(p("i", "2.5") + p("b", "maybe") + p("o", "{'k': 1}") + p("x", "12") + p("y", "Paris") + p("z", "None")),
           "",
           {{"f", R"({"i": "2.5", "b": "maybe", "o": "{'k': 1}", "x": 12, "y": "Paris", "z": null})"}}},
          {"Let me write it.\n\n" + call(p("s", "def f():\n    return {\"a\": \"<b>\"}\n")) + "\n" + call(""),
           "Let me write it.",
           {{"f", R"({"s": "def f():\n    return {\"a\": \"<b>\"}\n"})"}, {"f", "{}"}}},
          // Not well-formed: content.
          {call("<parameter=s>\nx\n"), call("<parameter=s>\nx\n"), {}},
          {"<tool_call>\n<function=f>\n<parameter=s>\nx", "<tool_call>\n<function=f>\n<parameter=s>\nx", {}},
          {"<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", {}},
      },
      context);
}

TEST(ToolCallParseTest, NoneIsAllContent) {
  const std::string text = "<tool_call>\n{\"name\": \"f\"}\n</tool_call>  ";
  ExpectOutputs(ToolCallFormat::kNone, {{text, text, {}}});
  StreamingToolCallParser parser(ToolCallFormat::kNone);
  EXPECT_EQ(parser.Feed("<tool").content, "<tool");
}

// Random outputs from the formats' pieces: no format throws, loses text without a call, or
// streams differently.
TEST(ToolCallParseTest, RandomPiecesAgreeAndNeverThrow) {
  const std::vector<std::string> pieces = {"<tool_call>",
                                           "</tool_call>",
                                           "<|tool_call>",
                                           "<tool_call|>",
                                           "call:f",
                                           "{",
                                           "}",
                                           "[",
                                           "]",
                                           "\"name\": \"f\"",
                                           "\"arguments\": ",
                                           ",",
                                           ":",
                                           " ",
                                           "\n",
                                           ";",
                                           "<|python_tag|>",
                                           "<function=f>",
                                           "<parameter=a>",
                                           "</parameter>",
                                           "</function>",
                                           "<|\"|>",
                                           "x",
                                           "1",
                                           "None",
                                           "\"",
                                           "\\",
                                           "\xc3",
                                           "é"};
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    for (int n = rng() % 24; n > 0; --n) text += pieces[rng() % pieces.size()];
    for (ToolCallFormat format :
         {ToolCallFormat::kGemma4, ToolCallFormat::kLlama3Json, ToolCallFormat::kHermes, ToolCallFormat::kQwen3Coder}) {
      SCOPED_TRACE(std::string(ToolCallFormatName(format)) + ": " + text);
      ParseAndStream(format, text);
    }
  }
}

TEST(StreamingToolCallParserTest, HoldsBackOnlyWhatMayBeACall) {
  StreamingToolCallParser parser(ToolCallFormat::kHermes, {});
  EXPECT_EQ(parser.Feed("Hello <b>wor").content, "Hello <b>wor");
  EXPECT_EQ(parser.Feed("ld \n").content, "ld");
  EXPECT_EQ(parser.Feed("<tool").content, "");
  EXPECT_EQ(parser.Feed("_call>\n{\"name\": \"f\", ").content, "");
  ToolStreamDelta delta = parser.Feed("\"arguments\": {\"a\": 1}}\n</tool_call>\n");
  EXPECT_EQ(delta.content, "");
  ASSERT_EQ(delta.tool_calls.size(), 1u);
  EXPECT_EQ(delta.tool_calls[0].index, 0);
  EXPECT_EQ(delta.tool_calls[0].name, "f");
  EXPECT_EQ(delta.tool_calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(parser.Feed("\nBye").content, "Bye");
  EXPECT_EQ(parser.Feed(" <tool_call> x").content, "");
  EXPECT_EQ(parser.Finish().content, " <tool_call> x");
}

TEST(ToolCallIdTest, VllmShapedUniqueAndSeeded) {
  const std::string text = "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\"}</tool_call>";
  ToolCallContext seven;
  seven.id_seed = 7;
  ParsedToolOutput first = ParseToolCalls(ToolCallFormat::kHermes, text, seven);
  ASSERT_EQ(first.calls.size(), 2u);
  for (const ToolCall& call : first.calls) {
    ASSERT_EQ(call.id.size(), 29u) << call.id;
    EXPECT_TRUE(absl::StartsWith(call.id, "call_")) << call.id;
    for (char c : call.id.substr(5)) EXPECT_TRUE(absl::ascii_isalnum(static_cast<unsigned char>(c))) << call.id;
  }
  EXPECT_NE(first.calls[0].id, first.calls[1].id);
  EXPECT_EQ(ParseToolCalls(ToolCallFormat::kHermes, text, seven).calls[1].id, first.calls[1].id);
  EXPECT_NE(ParseToolCalls(ToolCallFormat::kHermes, text).calls[0].id, first.calls[0].id);
}

// ---- tool_choice.

const char* const kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "now"}}
])";

TEST(ToolChoiceTest, NamedToolSchemaIsTheFunctionsParameters) {
  const OrderedJson tools = OrderedJson::parse(kTools);
  EXPECT_EQ(*NamedToolSchema(tools, "get_weather"),
            R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})");
  EXPECT_EQ(*NamedToolSchema(tools, "now"), R"({"type":"object","properties":{}})");
  absl::StatusOr<std::string> missing = NamedToolSchema(tools, "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "\"nope\" is not in tools")) << missing.status();
}

TEST(ToolChoiceTest, RequiredToolsSchemaIsAnArrayOfNamedCalls) {
  EXPECT_EQ(*RequiredToolsSchema(OrderedJson::parse(kTools)),
            R"({"type":"array","minItems":1,"items":{"anyOf":[)"
            R"({"type":"object","properties":{"name":{"const":"get_weather"},"parameters":{"type":"object",)"
            R"("properties":{"city":{"type":"string"}},"required":["city"]}},"required":["name","parameters"]},)"
            R"({"type":"object","properties":{"name":{"const":"now"},"parameters":{"type":"object","properties":{}}},)"
            R"("required":["name","parameters"]}]}})");
  EXPECT_FALSE(RequiredToolsSchema(OrderedJson::array()).ok());
}

TEST(ToolChoiceTest, CallsFromConstrainedOutput) {
  absl::StatusOr<std::vector<ToolCall>> named =
      ToolCallsFromConstrainedOutput(R"( {"city": "Paris"} )", "get_weather", 1);
  ASSERT_TRUE(named.ok()) << named.status();
  ASSERT_EQ(named->size(), 1u);
  EXPECT_EQ((*named)[0].name, "get_weather");
  EXPECT_EQ((*named)[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(
      (*named)[0].id,
      ParseToolCalls(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"x\"}</tool_call>", {.id_seed = 1}).calls[0].id);

  absl::StatusOr<std::vector<ToolCall>> required = ToolCallsFromConstrainedOutput(
      R"([{"name": "get_weather", "parameters": {"city": "Oslo"}}, {"name": "now", "parameters": {}}])", "", 1);
  ASSERT_TRUE(required.ok()) << required.status();
  ASSERT_EQ(required->size(), 2u);
  EXPECT_EQ((*required)[0].name, "get_weather");
  EXPECT_EQ((*required)[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ((*required)[1].name, "now");
  EXPECT_EQ((*required)[1].arguments, "{}");
  EXPECT_NE((*required)[0].id, (*required)[1].id);

  EXPECT_FALSE(ToolCallsFromConstrainedOutput(R"({"city": "Par)", "get_weather", 1).ok());
  EXPECT_FALSE(ToolCallsFromConstrainedOutput("[1]", "get_weather", 1).ok());
  EXPECT_FALSE(ToolCallsFromConstrainedOutput("[]", "", 1).ok());
  EXPECT_FALSE(ToolCallsFromConstrainedOutput(R"([{"name": "now", "parameters": {}}, {"nam)", "", 1).ok());
  EXPECT_FALSE(ToolCallsFromConstrainedOutput(R"([{"parameters": {}}])", "", 1).ok());
}

TEST(ToolChoiceTest, ValidateToolsNamesTheIndexAndField) {
  ASSERT_TRUE(ValidateTools(OrderedJson::parse(kTools)).ok());
  ASSERT_TRUE(ValidateTools(OrderedJson::array()).ok());
  const std::string weather = R"({"type": "function", "function": {"name": "get_weather"}})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type": "function"})", "tools: must be an array"},
      {"[1]", "tools[0]: must be an object"},
      {"[" + weather + R"(, {"type": "retrieval", "function": {"name": "f"}}])", "tools[1].type: must be \"function\""},
      {R"([{"type": "function"}])", "tools[0].function: must be an object"},
      {R"([{"type": "function", "function": {"name": ""}}])", "tools[0].function.name: must be a non-empty string"},
      {R"([{"type": "function", "function": {"description": "x"}}])", "tools[0].function.name: must be a non-empty"},
      {R"([{"type": "function", "function": {"name": "f", "description": 5}}])",
       "tools[0].function.description: must be a string"},
      {"[" + weather + R"(, {"function": {"name": "f", "parameters": "x"}}])",
       "tools[1].function.parameters: must be a JSON Schema object"},
      {R"([{"function": {"name": "f", "strict": "yes"}}])", "tools[0].function.strict: must be true or false"},
      {"[" + weather + R"(, {"function": {"name": "f"}}, )" + weather + "]",
       "tools[2].function.name: \"get_weather\" is also tools[0]'s"},
  };
  for (const auto& [tools, error] : cases) {
    absl::Status status = ValidateTools(OrderedJson::parse(tools));
    EXPECT_FALSE(status.ok()) << tools;
    EXPECT_TRUE(absl::StrContains(status.message(), error)) << status << "\n  want: " << error;
    EXPECT_FALSE(NamedToolSchema(OrderedJson::parse(tools), "f").ok());
  }
}

}  // namespace
}  // namespace tpserve
