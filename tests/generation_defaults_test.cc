// Tests for coordinator/engine/generation_defaults.h: which generation_config.json fields
// become sampling defaults (vLLM's --generation-config), errors that name the file and field,
// the flag's three forms, and precedence (a request's explicit value, 0 included, wins).
#include "coordinator/engine/generation_defaults.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fixture_files.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Optional;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "generation_defaults_test_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string path() const { return path_.string(); }
  std::string Write(const std::string& text) const {
    const fs::path file = path_ / "generation_config.json";
    std::ofstream(file) << text;
    return file.string();
  }

 private:
  fs::path path_;
};

absl::StatusOr<GenerationDefaults> FromText(const std::string& text) {
  return GenerationDefaultsFromJson(nlohmann::json::parse(text), "m/generation_config.json");
}

std::string ErrorOf(const std::string& text) {
  absl::StatusOr<GenerationDefaults> d = FromText(text);
  EXPECT_FALSE(d.ok()) << text;
  if (d.ok()) return "";
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(d.status().message());
}

TEST(GenerationDefaultsTest, ReadsTheFiveSamplingFields) {
  // Qwen3's generation_config.json, plus min_p and repetition_penalty.
  absl::StatusOr<GenerationDefaults> d = FromText(R"({"bos_token_id": 151643, "do_sample": true,
      "eos_token_id": [151645, 151643], "pad_token_id": 151643, "temperature": 0.6, "top_k": 20,
      "top_p": 0.95, "min_p": 0.05, "repetition_penalty": 1.1, "transformers_version": "4.51.0"})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->temperature, Optional(0.6f));
  EXPECT_THAT(d->top_k, Optional(20));
  EXPECT_THAT(d->top_p, Optional(0.95f));
  EXPECT_THAT(d->min_p, Optional(0.05f));
  EXPECT_THAT(d->repetition_penalty, Optional(1.1f));
  EXPECT_EQ(d->source, "m/generation_config.json");
  EXPECT_THAT(d->notes, IsEmpty());
  EXPECT_FALSE(d->empty());
  EXPECT_EQ(d->ToString(),
            R"({"temperature": 0.6, "top_k": 20, "top_p": 0.95, "min_p": 0.05, "repetition_penalty": 1.1})");
}

TEST(GenerationDefaultsTest, AbsentAndNullFieldsAreUnset) {
  absl::StatusOr<GenerationDefaults> d = FromText(R"({"temperature": null, "top_p": 0.9})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->temperature, std::nullopt);
  EXPECT_EQ(d->top_k, std::nullopt);
  EXPECT_THAT(d->top_p, Optional(0.9f));
  EXPECT_EQ(d->ToString(), R"({"top_p": 0.9})");

  d = FromText("{}");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->empty());
  EXPECT_EQ(d->ToString(), "{}");
}

TEST(GenerationDefaultsTest, ValuesEqualToTransformersOldDefaultsStillCount) {
  // transformers 5's GenerationConfig defaults are all None, so vLLM keeps every value a file
  // sets, top_k 50 and temperature 1.0 included.
  absl::StatusOr<GenerationDefaults> d = FromText(R"({"do_sample": true, "temperature": 1.0, "top_k": 50})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->temperature, Optional(1.0f));
  EXPECT_THAT(d->top_k, Optional(50));
}

TEST(GenerationDefaultsTest, TopKForms) {
  EXPECT_THAT(FromText(R"({"top_k": -1})")->top_k, Optional(0));  // off, as SamplingParams spells it
  EXPECT_THAT(FromText(R"({"top_k": 0})")->top_k, Optional(0));
  EXPECT_THAT(FromText(R"({"top_k": 40.0})")->top_k, Optional(40));
  EXPECT_THAT(ErrorOf(R"({"top_k": 40.5})"),
              AllOf(HasSubstr("m/generation_config.json"), HasSubstr("\"top_k\" must be an integer, got 40.5")));
  EXPECT_THAT(ErrorOf(R"({"top_k": "40"})"), HasSubstr("\"top_k\" must be an integer, got \"40\""));
  EXPECT_THAT(ErrorOf(R"({"top_k": 3000000000})"), HasSubstr("\"top_k\" must be an integer"));
  EXPECT_THAT(ErrorOf(R"({"top_k": -2})"), HasSubstr("top_k must be -1 or 0 (off) or >= 1, got -2"));
}

TEST(GenerationDefaultsTest, WrongTypesNameTheFileAndField) {
  EXPECT_EQ(ErrorOf(R"({"temperature": "hot"})"),
            "m/generation_config.json: \"temperature\" must be a number, got \"hot\"");
  EXPECT_THAT(ErrorOf(R"({"top_p": true})"), HasSubstr("\"top_p\" must be a number, got true"));
  EXPECT_THAT(ErrorOf(R"({"min_p": [0.1]})"), HasSubstr("\"min_p\" must be a number, got [0.1]"));
  EXPECT_THAT(ErrorOf(R"({"repetition_penalty": {}})"), HasSubstr("\"repetition_penalty\" must be a number"));
  EXPECT_EQ(ErrorOf("[1, 2]"), "m/generation_config.json: must be a JSON object, got [1,2]");
}

TEST(GenerationDefaultsTest, ValuesTheEngineWouldRefuseFailAtLoad) {
  EXPECT_EQ(ErrorOf(R"({"top_p": 1.5})"), "m/generation_config.json: top_p must be in (0, 1] (1 = off), got 1.5");
  EXPECT_THAT(ErrorOf(R"({"temperature": -0.5})"), HasSubstr("temperature must be >= 0 and finite"));
  EXPECT_THAT(ErrorOf(R"({"min_p": 2})"), HasSubstr("min_p must be in [0, 1]"));
  EXPECT_THAT(ErrorOf(R"({"repetition_penalty": 0})"), HasSubstr("repetition_penalty must be > 0"));
  // Temperature 0 (greedy) is a valid default.
  EXPECT_THAT(FromText(R"({"temperature": 0})")->temperature, Optional(0.0f));
}

TEST(GenerationDefaultsTest, DoSampleIsIgnoredAsVllmDoes) {
  // do_sample false beside sampling fields: the fields still count, and a note says so.
  absl::StatusOr<GenerationDefaults> d = FromText(R"({"do_sample": false, "temperature": 0.7, "top_p": 0.8})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->temperature, Optional(0.7f));
  EXPECT_THAT(d->top_p, Optional(0.8f));
  ASSERT_EQ(d->notes.size(), 1u);
  EXPECT_THAT(d->notes[0], AllOf(HasSubstr("do_sample is false"), HasSubstr("\"temperature\": 0.7")));
  // do_sample alone sets nothing: no defaults, nothing to say.
  d = FromText(R"({"do_sample": false})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->empty());
  EXPECT_THAT(d->notes, IsEmpty());
  d = FromText(R"({"do_sample": true, "temperature": 0.7})");
  EXPECT_THAT(d->notes, IsEmpty());
  // Temperature 0 is greedy too: nothing differs from transformers.
  d = FromText(R"({"do_sample": false, "temperature": 0, "top_p": 0.9})");
  EXPECT_THAT(d->notes, IsEmpty());
  d = FromText(R"({"do_sample": false, "top_p": 0.9})");
  EXPECT_EQ(d->notes.size(), 1u);
}

TEST(GenerationDefaultsTest, MaxNewTokensIsNotedNotApplied) {
  absl::StatusOr<GenerationDefaults> d = FromText(R"({"max_new_tokens": 2048})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->empty());
  ASSERT_EQ(d->notes.size(), 1u);
  EXPECT_THAT(d->notes[0], HasSubstr("max_new_tokens 2048 is not applied"));
}

TEST(GenerationDefaultsTest, LogLinesFollowVllm) {
  EXPECT_THAT(DescribeGenerationDefaults({}), IsEmpty());
  absl::StatusOr<GenerationDefaults> d = FromText(R"({"do_sample": false, "temperature": 0.5})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(DescribeGenerationDefaults(*d),
              ElementsAre(AllOf(HasSubstr("Default sampling parameters have been overridden by the model's generation "
                                          "config (m/generation_config.json): {\"temperature\": 0.5}"),
                                HasSubstr("--generation-config vllm")),
                          HasSubstr("m/generation_config.json: do_sample is false")));
}

TEST(GenerationDefaultsTest, FolderWithoutTheFileHasNoDefaults) {
  TempDir dir;
  absl::StatusOr<GenerationDefaults> d = LoadGenerationConfigDir(dir.path());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->empty());
  EXPECT_EQ(d->source, "");
}

TEST(GenerationDefaultsTest, FileErrorsNameTheFile) {
  TempDir dir;
  const std::string file = dir.Write(R"({"temperature": 0.3, )");
  absl::StatusOr<GenerationDefaults> d = LoadGenerationConfigDir(dir.path());
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr(file + ": not valid JSON"));
  dir.Write(R"({"top_k": "many"})");
  d = LoadGenerationConfigDir(dir.path());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), file + ": \"top_k\" must be an integer, got \"many\"");
  dir.Write(R"({"temperature": 0.3})");
  d = LoadGenerationConfigDir(dir.path());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->temperature, Optional(0.3f));
  EXPECT_EQ(d->source, file);
}

TEST(GenerationDefaultsTest, FixtureModelsSetNoSamplingDefaults) {
  // The fixtures' generation_config.json files are transformers' save_pretrained output for
  // configs without sampling fields: "auto" changes nothing for the tests that use them.
  for (const char* model : {"gemma3_text", "gemma4_multimodal", "gemma4_text", "llama3", "qwen2", "qwen3"}) {
    absl::StatusOr<GenerationDefaults> d = LoadGenerationDefaults("auto", Fixture(std::string("models/") + model));
    ASSERT_TRUE(d.ok()) << model << ": " << d.status();
    EXPECT_TRUE(d->empty()) << model << ": " << d->ToString();
    EXPECT_THAT(d->notes, IsEmpty()) << model;
  }
}

TEST(GenerationDefaultsFlagTest, AutoVllmAndFolder) {
  TempDir model;
  model.Write(R"({"temperature": 0.25})");
  TempDir other;
  other.Write(R"({"top_p": 0.5})");

  absl::StatusOr<GenerationDefaults> d = LoadGenerationDefaults("auto", model.path());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->temperature, Optional(0.25f));
  d = LoadGenerationDefaults("vllm", model.path());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->empty());
  d = LoadGenerationDefaults(other.path(), model.path());  // the folder's file, not the model's
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->temperature, std::nullopt);
  EXPECT_THAT(d->top_p, Optional(0.5f));
  // A built-in model name has no folder and so no defaults.
  d = LoadGenerationDefaults("auto", "gemma-4-tiny");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->empty());
}

TEST(GenerationDefaultsFlagTest, BadValuesSayWhatItTakes) {
  TempDir empty;
  TempDir with_file;
  const std::string file = with_file.Write("{}");
  auto message = [](absl::string_view value) {
    absl::Status s = ValidateGenerationConfigFlag(value);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << value;
    return std::string(s.message());
  };
  EXPECT_TRUE(ValidateGenerationConfigFlag("auto").ok());
  EXPECT_TRUE(ValidateGenerationConfigFlag("vllm").ok());
  EXPECT_TRUE(ValidateGenerationConfigFlag(with_file.path()).ok());
  EXPECT_EQ(message("Auto"),
            "--generation-config must be auto, vllm or a folder holding generation_config.json; got \"Auto\", which "
            "is none of these");
  EXPECT_THAT(message(""), HasSubstr("must be auto, vllm or a folder"));
  EXPECT_THAT(message(file), AllOf(HasSubstr("takes a folder"), HasSubstr("pass its folder instead")));
  EXPECT_EQ(message(empty.path()), "--generation-config " + empty.path() + ": the folder has no generation_config.json");
  // LoadGenerationDefaults checks the flag too.
  EXPECT_FALSE(LoadGenerationDefaults("none", "gemma-4-tiny").ok());
}

TEST(ApplyGenerationDefaultsTest, ExplicitValuesWinIncludingZero) {
  GenerationDefaults d;
  d.temperature = 0.6f;
  d.top_k = 20;
  d.top_p = 0.95f;
  d.min_p = 0.05f;
  d.repetition_penalty = 1.1f;

  SamplingParams unset;
  ApplyGenerationDefaults(d, {}, unset);
  EXPECT_EQ(unset.temperature, 0.6f);
  EXPECT_EQ(unset.top_k, 20);
  EXPECT_EQ(unset.top_p, 0.95f);
  EXPECT_EQ(unset.min_p, 0.05f);
  EXPECT_EQ(unset.repetition_penalty, 1.1f);

  SamplingParams explicit_zero;
  explicit_zero.temperature = 0;
  explicit_zero.top_k = 0;
  ExplicitSamplingFields given;
  given.temperature = true;
  given.top_k = true;
  ApplyGenerationDefaults(d, given, explicit_zero);
  EXPECT_EQ(explicit_zero.temperature, 0);
  EXPECT_EQ(explicit_zero.top_k, 0);
  EXPECT_EQ(explicit_zero.top_p, 0.95f);  // not set by the request: the default

  // Fields without a default keep the request's (or SamplingParams') value.
  SamplingParams partial;
  partial.min_p = 0.2f;
  GenerationDefaults only_top_p;
  only_top_p.top_p = 0.5f;
  ApplyGenerationDefaults(only_top_p, {}, partial);
  EXPECT_EQ(partial.temperature, 1.0f);
  EXPECT_EQ(partial.top_p, 0.5f);
  EXPECT_EQ(partial.min_p, 0.2f);
}

}  // namespace
}  // namespace tpserve
