// Tests of the chat template interpreter (coordinator/chat_template*.h). Every published
// template under fixtures/chat_templates/ must render byte for byte what transformers
// rendered (expected.json, recorded by tools/make_chat_template_fixtures.py); small
// templates probe Jinja semantics (expressions.json); model directories test loading.
#include "coordinator/text/chat_template.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "coordinator/text/builtin_chat_templates.h"
#include "coordinator/text/chat_template_globals.h"
#include "coordinator/text/chat_template_loader.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

const fs::path kFixtures = fs::path(TPSERVE_FIXTURES) / "chat_templates";

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Json ReadJson(const fs::path& path) { return Json::parse(ReadText(path)); }

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The time the fixtures pinned strftime_now() to (2024-07-26 12:00:00).
ChatTemplateRenderOptions FixedTime() {
  ChatTemplateRenderOptions options;
  options.time_zone = absl::UTCTimeZone();
  options.now = absl::FromCivil(absl::CivilSecond(2024, 7, 26, 12, 0, 0), absl::UTCTimeZone());
  return options;
}

// Points at the first difference, which a plain EXPECT_EQ on 10 kB prompts hides.
std::string FirstDifference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t from = i < 60 ? 0 : i - 60;
  return "first difference at byte " + std::to_string(i) +
         "\n  want: " + Json(want.substr(from, 120)).dump() +
         "\n  got:  " + Json(got.substr(from, 120)).dump();
}

// Compares a rendering with a fixture case's "expected" or "expected_error".
void ExpectMatches(const Json& c, const absl::StatusOr<std::string>& rendered) {
  if (c.contains("expected")) {
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    const std::string want = c["expected"].get<std::string>();
    EXPECT_TRUE(*rendered == want) << FirstDifference(want, *rendered);
  } else {
    ASSERT_FALSE(rendered.ok()) << "expected an error containing: " << c["expected_error"];
    EXPECT_TRUE(
        absl::StrContains(rendered.status().message(), c["expected_error"].get<std::string>()))
        << rendered.status() << "\n  want: " << c["expected_error"];
  }
}

ApplyChatTemplateOptions OptionsFrom(const Json& c) {
  ApplyChatTemplateOptions options;
  const Json& o = c["options"];
  options.add_generation_prompt = o["add_generation_prompt"].get<bool>();
  options.tools = o["tools"];
  options.documents = o["documents"];
  options.extra_context = o["extra_context"];
  options.render = FixedTime();
  return options;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "chat_template_test_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(ChatTemplateFixtures, RenderMatchesTransformers) {
  const Json fixtures = ReadJson(kFixtures / "expected.json");
  std::map<std::string, ChatTemplate> parsed;
  int checked = 0;
  for (const Json& c : fixtures["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string file = c["template"].get<std::string>();
    if (!parsed.count(file)) {
      auto t = ChatTemplate::Parse(ReadText(kFixtures / file));
      ASSERT_TRUE(t.ok()) << t.status();
      parsed.emplace(file, *t);
    }
    ExpectMatches(c, parsed.at(file).Render(c["render_context"], FixedTime()));
    ++checked;
  }
  EXPECT_GE(checked, 300);
}

// The same conversations through LoadChatTemplate + Apply, which must reproduce
// apply_chat_template's own input handling (special tokens, dropped null keys, reasoning
// aliases) from a model directory laid out as the generator laid it out.
TEST(ChatTemplateFixtures, ApplyFromModelDirMatchesTransformers) {
  const Json fixtures = ReadJson(kFixtures / "expected.json");
  TempDir tmp;
  std::map<std::string, ModelChatTemplate> loaded;
  for (const Json& c : fixtures["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string file = c["template"].get<std::string>();
    if (!loaded.count(file)) {
      const fs::path dir = tmp.path() / file;
      fs::create_directories(dir);
      Json config = {{"tokenizer_class", "PreTrainedTokenizerFast"}};
      for (const auto& [key, value] : c["special_tokens"].items()) config[key] = value;
      WriteText(dir / "tokenizer_config.json", config.dump(2));
      WriteText(dir / "chat_template.jinja", ReadText(kFixtures / file));
      auto model = LoadChatTemplate(dir.string());
      ASSERT_TRUE(model.ok()) << model.status();
      EXPECT_EQ(nlohmann::json(model->special_tokens()), nlohmann::json(c["special_tokens"]));
      loaded.emplace(file, std::move(*model));
    }
    ExpectMatches(c, loaded.at(file).Apply(c["messages"], OptionsFrom(c)));
  }
}

TEST(ChatTemplateFixtures, ExpressionsMatchJinja) {
  const Json fixtures = ReadJson(kFixtures / "expressions.json");
  for (const Json& c : fixtures["cases"]) {
    const std::string source = c["template"].get<std::string>();
    SCOPED_TRACE(source);
    absl::StatusOr<std::string> rendered = absl::UnknownError("not parsed");
    auto t = ChatTemplate::Parse(source);
    if (t.ok())
      rendered = t->Render(c["context"], FixedTime());
    else
      rendered = t.status();
    if (c.contains("expected")) {
      ASSERT_TRUE(rendered.ok()) << rendered.status();
      EXPECT_EQ(*rendered, c["expected"].get<std::string>());
    } else {
      EXPECT_FALSE(rendered.ok()) << "Jinja raised " << c["expected_error"] << ", we rendered "
                                  << Json(*rendered).dump();
    }
  }
}

TEST(ChatTemplateLoader, ModelDirectoryLayouts) {
  const Json fixtures = ReadJson(kFixtures / "loader_expected.json");
  for (const Json& c : fixtures["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto model = LoadChatTemplate((kFixtures / c["model_dir"].get<std::string>()).string());
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ(nlohmann::json(model->special_tokens()), nlohmann::json(c["special_tokens"]));
    ExpectMatches(c, model->Apply(c["messages"], OptionsFrom(c)));
  }
}

TEST(ChatTemplateLoader, NamedTemplates) {
  auto model = LoadChatTemplate((kFixtures / "model_dirs" / "config_named_list").string());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->template_names(), (std::vector<std::string>{"default", "tool_use"}));
  ApplyChatTemplateOptions options;
  options.template_name = "rag";
  auto missing = model->Apply(Json::array({{{"role", "user"}, {"content", "x"}}}), options);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "default, tool_use"));
}

TEST(ChatTemplateLoader, ErrorsSayWhatToFix) {
  auto no_dir = LoadChatTemplate("/nonexistent/model");
  EXPECT_EQ(no_dir.status().code(), absl::StatusCode::kNotFound);

  TempDir tmp;
  auto no_template = LoadChatTemplate(tmp.path().string());
  EXPECT_EQ(no_template.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(no_template.status().message(), "chat_template.jinja"));

  WriteText(tmp.path() / "tokenizer_config.json", R"({"chat_template": "{% for x in y %}"})");
  auto bad = LoadChatTemplate(tmp.path().string());
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "tokenizer_config.json"));
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "'endfor'"));

  WriteText(tmp.path() / "tokenizer_config.json", R"({"chat_template": "{{ messages }}"})");
  auto model = LoadChatTemplate(tmp.path().string());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->Apply(Json::array()).status().code(), absl::StatusCode::kInvalidArgument);
  ApplyChatTemplateOptions options;
  options.extra_context = {{"messages", 1}};
  EXPECT_FALSE(model->Apply(Json::array({{{"role", "user"}}}), options).ok());
}

std::string SyntaxError(const std::string& source) {
  auto t = ChatTemplate::Parse(source);
  return t.ok() ? "parsed" : std::string(t.status().message());
}

TEST(ChatTemplateErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(SyntaxError("line one\n{% if x %}\n  {{ x + }}\n{% endif %}"),
            "chat template syntax error at line 3, column 10: unexpected end of print "
            "statement '}}'");
  EXPECT_EQ(SyntaxError("{% for m in messages %}\n{{ m }}"),
            "chat template syntax error at line 2, column 8: unexpected end of template: "
            "expected 'endfor' or 'else' to close the 'for' tag at line 1, column 4");
  EXPECT_EQ(SyntaxError("ok\n  {% frobnicate %}"),
            "chat template syntax error at line 2, column 6: unknown tag 'frobnicate'");
  EXPECT_TRUE(absl::StartsWith(SyntaxError("{{ 'é' | nosuchfilter }}"),
                               "chat template syntax error at line 1, column 10: unknown filter "
                               "'nosuchfilter'"));
  EXPECT_EQ(SyntaxError("{{ 'abc }}"),
            "chat template syntax error at line 1, column 4: unterminated string literal");
  EXPECT_EQ(SyntaxError("a {{ x"),
            "chat template syntax error at line 1, column 3: missing '}}' "
            "to close this tag");
  EXPECT_EQ(SyntaxError("{{ (1 }}"),
            "chat template syntax error at line 1, column 7: "
            "unexpected '}', expected ')'");
  EXPECT_EQ(SyntaxError("{% break %}"),
            "chat template syntax error at line 1, column 4: "
            "'break' outside of a for loop");
  EXPECT_EQ(SyntaxError("{# never closed"),
            "chat template syntax error at line 1, column 1: "
            "missing end of comment tag '#}'");
  EXPECT_TRUE(absl::StrContains(SyntaxError("{% include 'x.jinja' %}"), "not supported"));
}

// Found by tests/fuzz/chat_template_fuzzer.cc: each of these overflowed the parser's
// stack (or, for long chains, the evaluator's and the tree destructor's).
TEST(ChatTemplateErrors, DeepNestingIsASyntaxError) {
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  for (const std::string& source :
       {"{{ " + repeat("(", 5000) + "1" + repeat(")", 5000) + " }}",
        "{{ " + repeat("[", 5000) + repeat("]", 5000) + " }}", "{{ " + repeat("not ", 5000) + "1 }}",
        "{{ " + repeat("-", 5000) + "1 }}", "{{ 1" + repeat(" ~ 1", 5000) + " }}",
        "{{ 1" + repeat(" and 1", 5000) + " }}", "{{ x" + repeat(".a", 5000) + " }}",
        "{{ x" + repeat("|string", 5000) + " }}", "{{ " + repeat("1 if 1 else ", 5000) + "1 }}",
        repeat("{% if 1 %}", 5000) + repeat("{% endif %}", 5000)}) {
    EXPECT_TRUE(absl::StrContains(SyntaxError(source), "nests more than 128 levels deep"))
        << source.substr(0, 40);
  }
  // Nesting that templates use stays fine.
  auto t = ChatTemplate::Parse("{{ " + repeat("(", 60) + "1" + repeat(")", 60) + " ~ 'a'" + repeat(" ~ 'a'", 60) +
                               " }}" + repeat("{% if true %}", 60) + "x" + repeat("{% endif %}", 60));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Render(Json::object()), "1" + repeat("a", 61) + "x");
}

// A long single-line template lexed in quadratic time (columns were counted from the
// line start for every token): 140 kB took minutes. Columns must stay right. No clock:
// the guard is the size. This 700 kB line would take the quadratic lexer 25 times those
// minutes, past ctest's TIMEOUT (300 s, tests/CMakeLists.txt); the linear one lexes,
// parses and renders it in ~0.15 s.
TEST(ChatTemplateErrors, LongLinesLexInLinearTime) {
  std::string source;
  for (int i = 0; i < 100000; ++i) source += "{{ 1 }}";
  auto t = ChatTemplate::Parse(source);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->Render(Json::object())->size(), 100000u);
  EXPECT_EQ(SyntaxError("é {{ 1 }} é {{ 2 }} {{ 'x' }}\né {{ 1 }} {{ 1 + }}"),
            "chat template syntax error at line 2, column 18: unexpected end of print statement '}}'");
}

std::string RenderError(const std::string& source) {
  auto t = ChatTemplate::Parse(source);
  if (!t.ok()) return std::string(t.status().message());
  auto rendered = t->Render(Json{{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}});
  return rendered.ok() ? "rendered: " + rendered->substr(0, 40) : std::string(rendered.status().message());
}

// Found by tests/fuzz/chat_template_fuzzer.cc: a float too large for int64 converted
// to it (undefined behaviour); Python's int is unbounded, so this is an error.
TEST(ChatTemplateErrors, IntFilterOfAHugeFloatIsAnError) {
  EXPECT_TRUE(absl::StrContains(RenderError("{{ 1e23|int }}"), "does not fit a 64-bit integer"));
  EXPECT_TRUE(absl::StrContains(RenderError("{{ '4.4e96'|int }}"), "does not fit a 64-bit integer"));
  EXPECT_TRUE(absl::StrContains(RenderError("{{ -1e19|int }}"), "does not fit a 64-bit integer"));
  EXPECT_EQ(RenderError("{{ -9.2e18|int }} {{ '2.9'|int }} {{ (1e300*1e300)|int }}"),
            "rendered: -9200000000000000000 2 0");
}

// Found by tests/fuzz/chat_template_fuzzer.cc: sizes that wrapped a size check (a hang)
// or were allocated at once (out of memory) now fail with an error.
TEST(ChatTemplateErrors, HugeResultsAreErrors) {
  EXPECT_TRUE(absl::StrContains(RenderError("{{ 'xxxx' * 4611686018427387904 }}"), "too large"));
  EXPECT_TRUE(absl::StrContains(RenderError("{{ [1, 2] * 9223372036854775807 }}"), "too large"));
  EXPECT_EQ(RenderError("{{ '' * 9223372036854775807 }}{{ [] * 9223372036854775807 }}"), "rendered: []");
  EXPECT_TRUE(absl::StrContains(RenderError("{{ 'x\nx'|indent(10**12) }}"), "too large"));
  EXPECT_TRUE(absl::StrContains(RenderError("{{ messages|tojson(indent=10**12) }}"), "too large"));
  EXPECT_TRUE(absl::StrContains(RenderError("{{ 'x'|center(10**12) }}"), "too large"));
  EXPECT_TRUE(absl::StrContains(RenderError("{{ 'x'.zfill(10**12) }}"), "too large"));
  EXPECT_TRUE(absl::StrContains(
      RenderError("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
      "too large"));
  EXPECT_TRUE(absl::StrContains(
      RenderError("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"),
      "too large"));
  EXPECT_TRUE(absl::StrContains(
      RenderError("{% set ns = namespace(s=[1]) %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"),
      "too large"));
  EXPECT_EQ(RenderError("{{ 'ab' * 3 }}|{{ 'x'|center(5) }}|{{ messages|tojson(indent=1) }}"),
            "rendered: ababab|  x  |[\n {\n  \"role\": \"user\",\n  \"c");
}

TEST(ChatTemplateErrors, RaiseExceptionIsAClearError) {
  auto t = ChatTemplate::Parse(ReadText(kFixtures / "gemma3.jinja"));
  ASSERT_TRUE(t.ok()) << t.status();
  Json context = {{"messages", Json::array({{{"role", "user"}, {"content", "a"}},
                                            {{"role", "user"}, {"content", "b"}}})},
                  {"bos_token", "<bos>"}};
  auto rendered = t->Render(context);
  ASSERT_FALSE(rendered.ok());
  EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(rendered.status().message()),
            "chat template raised an exception at line 15, column 12: Conversation roles must "
            "alternate user/assistant/user/assistant/...");
  EXPECT_TRUE(
      rendered.status().GetPayload(chat_template_internal::kRaisedByTemplatePayload).has_value());
}

TEST(ChatTemplateErrors, RuntimeErrorsNamePosition) {
  auto t = ChatTemplate::Parse("{%- for m in messages %}\n{{ m.content.upper() + 1 }}{% endfor %}");
  ASSERT_TRUE(t.ok()) << t.status();
  auto rendered = t->Render({{"messages", Json::array({{{"content", "x"}}})}});
  EXPECT_EQ(std::string(rendered.status().message()),
            "chat template error at line 2, column 22: can only concatenate str (not \"int\") "
            "to str");
  auto undefined = ChatTemplate::Parse("{{ messages[0].role.upper() }}")->Render({{"x", 1}});
  EXPECT_EQ(std::string(undefined.status().message()),
            "chat template error at line 1, column 12: 'messages' is undefined");
}

TEST(ChatTemplate, StrftimeNowUsesTheGivenTime) {
  auto t = ChatTemplate::Parse("{{ strftime_now('%d %b %Y') }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->Render(Json::object(), FixedTime()), "26 Jul 2024");
  EXPECT_EQ(t->Render(Json::object())->size(), 11u);  // the current date
}

TEST(ChatTemplate, TojsonKeepsOrderedJsonKeyOrder) {
  auto t = ChatTemplate::Parse("{{ tool | tojson }}");
  ASSERT_TRUE(t.ok());
  Json ordered = {{"tool", {{"name", "f"}, {"description", "d"}}}};
  EXPECT_EQ(*t->Render(ordered), R"({"name": "f", "description": "d"})");
  nlohmann::json sorted = {{"tool", {{"name", "f"}, {"description", "d"}}}};
  EXPECT_EQ(*t->Render(sorted), R"({"description": "d", "name": "f"})");
}

TEST(ChatTemplate, RenderIsThreadSafe) {
  auto t = ChatTemplate::Parse(ReadText(kFixtures / "gemma4.jinja"));
  ASSERT_TRUE(t.ok()) << t.status();
  Json context = {{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})},
                  {"bos_token", "<bos>"},
                  {"add_generation_prompt", true}};
  const std::string want = *t->Render(context);
  std::vector<std::string> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 50; ++k) got[i] = *t->Render(context);
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}

// Namespaces are mutable, so `ns.a = ns` would make a cycle that printing follows for
// ever (tests/fuzz/chat_template_fuzzer.cc); any path back to the namespace is refused,
// while namespaces inside other namespaces and lists stay fine.
TEST(ChatTemplateErrors, NamespaceCyclesAreErrors) {
  const std::string prelude = "{% set ns = namespace(a=1) %}{% set other = namespace(b=[]) %}";
  for (const char* body : {"{% set ns.a = ns %}{{ ns }}", "{% set ns.a = [1, {'k': (2, ns)}] %}{{ ns }}",
                           "{% set other.b = [ns] %}{% set ns.a = {'x': other} %}{{ ns }}"}) {
    EXPECT_TRUE(absl::StrContains(RenderError(prelude + body), "cannot form cycles")) << body;
  }
  EXPECT_EQ(RenderError(prelude + "{% set other.b = [ns, ns] %}{% set ns.a = 2 %}{% set other.b = other.b + [ns] %}"
                                  "{{ other.b|length }} {{ other.b[2].a }}"),
            "rendered: 3 2");
}

// Loops build `loop` only when their body names it, and reuse an iteration's frame when
// nothing kept it (chat_template_evaluator.cc); neither may show through.
TEST(ChatTemplate, LoopObjectAndIterationFramesAreInvisible) {
  // `loop` in an inner loop's iterable is the outer loop's; in its body, its own.
  EXPECT_EQ(RenderError("{% for a in 'xyz' %}{% for b in range(loop.index0) %}{{ b }}{% endfor %};{% endfor %}"),
            "rendered: ;0;01;");
  EXPECT_EQ(RenderError("{% for a in 'xy' %}{% for b in 'pq' %}{{ loop.index }}{% endfor %}{% endfor %}"),
            "rendered: 1212");
  // A macro defined in the loop body sees that iteration's `loop`.
  EXPECT_EQ(RenderError("{% for a in 'xy' %}{% macro m() %}{{ loop.index }}{% endmacro %}{{ m() }}{% endfor %}"),
            "rendered: 12");
  // Every iteration starts with no variables of the last one's.
  EXPECT_EQ(RenderError("{% for a in [1, 2] %}{{ x is defined }}{% set x = a %}{% endfor %}"),
            "rendered: FalseFalse");
  // A macro kept from an earlier iteration still fails once its iteration is over.
  EXPECT_TRUE(absl::StrContains(
      RenderError("{% set ns = namespace(f=none) %}{% for a in [1, 2] %}{% if ns.f %}{{ ns.f() }}{% endif %}"
                  "{% macro m() %}{{ a }}{% endmacro %}{% set ns.f = m %}{% endfor %}"),
      "outside the block that defined it"));
}

TEST(ChatTemplate, DuplicateMacroArgumentsAreASyntaxError) {
  auto t = ChatTemplate::Parse("{% macro m(a, b, a=1) %}{{ a }}{% endmacro %}{{ m(1, 2) }}");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::StrContains(t.status().message(), "duplicate argument 'a'")) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "column 18")) << t.status();
}

TEST(ChatTemplate, DeepRecursionFailsCleanly) {
  auto t = ChatTemplate::Parse("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_TRUE(t.ok());
  auto rendered = t->Render(Json::object());
  ASSERT_FALSE(rendered.ok());
  EXPECT_TRUE(absl::StrContains(rendered.status().message(), "nested more than"));
}

// The built-in template for GGUF files without one is Gemma 3's published text, exactly.
TEST(BuiltinChatTemplateTest, Gemma3IsThePublishedTemplate) {
  std::optional<std::string> gemma3 = BuiltinChatTemplate("gemma3");
  ASSERT_TRUE(gemma3.has_value());
  EXPECT_EQ(*gemma3, ReadText(kFixtures / "gemma3.jinja"));
  EXPECT_FALSE(BuiltinChatTemplate("llama").has_value());
}

}  // namespace
}  // namespace tpserve
