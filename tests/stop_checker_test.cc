// Tests for coordinator/engine/stop_checker.h: stop strings across delta boundaries are never
// emitted, held-back text is released, and finish reasons for stop ids, EOS,
// min_tokens and max_tokens; plus a randomized check against plain string search.
#include "coordinator/engine/stop_checker.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

constexpr int32_t kEos = 2;
constexpr int32_t kText = 100;  // an ordinary token id

struct Stream {
  std::vector<std::string> texts;  // one per Push
  std::string emitted;             // all of them, concatenated
  StopUpdate last;
};

Stream PushAll(StopChecker& checker, const std::vector<std::string>& deltas, std::vector<int32_t> ids = {}) {
  Stream run;
  for (size_t i = 0; i < deltas.size() && !checker.finished(); ++i) {
    run.last = checker.Push(i < ids.size() ? ids[i] : kText, deltas[i]);
    run.texts.push_back(run.last.text);
    run.emitted += run.last.text;
  }
  return run;
}

SamplingParams WithStops(std::vector<std::string> stop, int32_t max_tokens = 100) {
  SamplingParams p;
  p.stop = std::move(stop);
  p.max_tokens = max_tokens;
  return p;
}

TEST(StopCheckerTest, StopStringInsideOneDelta) {
  StopChecker checker(WithStops({"\n\n"}), {kEos});
  const Stream run = PushAll(checker, {"Hello", " world.\n\nNext", " line"});
  EXPECT_EQ(run.texts, (std::vector<std::string>{"Hello", " world."}));
  EXPECT_EQ(run.last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(run.last.stop_string, "\n\n");
  EXPECT_TRUE(checker.finished());
  EXPECT_EQ(checker.num_tokens(), 2);
}

TEST(StopCheckerTest, StopStringAcrossDeltasIsNeverEmitted) {
  StopChecker checker(WithStops({"STOP"}), {kEos});
  const Stream run = PushAll(checker, {"Hello S", "T", "O", "P and more"});
  // "S", "ST", "STO" are held back as possible starts of "STOP".
  EXPECT_EQ(run.texts, (std::vector<std::string>{"Hello ", "", "", ""}));
  EXPECT_EQ(run.last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(run.last.stop_string, "STOP");
}

TEST(StopCheckerTest, HeldBackTextIsReleasedWhenItStopsMatching) {
  StopChecker checker(WithStops({"STOP"}), {kEos});
  const Stream run = PushAll(checker, {"a ST", "Ox", "y"});
  EXPECT_EQ(run.texts, (std::vector<std::string>{"a ", "STOx", "y"}));
  EXPECT_EQ(run.last.finish_reason, FinishReason::kNone);
  EXPECT_FALSE(checker.finished());
}

TEST(StopCheckerTest, HeldBackTextIsReleasedAtMaxTokens) {
  StopChecker checker(WithStops({"STOP"}, 2), {kEos});
  const Stream run = PushAll(checker, {"a S", "TO"});
  EXPECT_EQ(run.texts, (std::vector<std::string>{"a ", "STO"}));
  EXPECT_EQ(run.last.finish_reason, FinishReason::kLength);
  EXPECT_TRUE(run.last.stop_string.empty());
}

TEST(StopCheckerTest, StopStringCompletedByTheLastTokenBeatsLength) {
  StopChecker checker(WithStops({"STOP"}, 2), {kEos});
  const Stream run = PushAll(checker, {"a ST", "OP!"});
  EXPECT_EQ(run.emitted, "a ");
  EXPECT_EQ(run.last.finish_reason, FinishReason::kStop);
}

TEST(StopCheckerTest, FlushReturnsHeldBackText) {
  StopChecker checker(WithStops({"<|end|>"}), {kEos});
  EXPECT_EQ(checker.Push(kText, "answer <|e").text, "answer ");
  EXPECT_EQ(checker.Flush(), "<|e");
  EXPECT_EQ(checker.Flush(), "");
}

TEST(StopCheckerTest, EarliestMatchWinsThenListOrder) {
  StopChecker checker(WithStops({"world", "lo w", "hello"}), {kEos});
  Stream run = PushAll(checker, {"say hel", "lo world"});
  EXPECT_EQ(run.emitted, "say ");
  EXPECT_EQ(run.last.stop_string, "hello");

  StopChecker same_start(WithStops({"abc", "ab"}), {kEos});
  run = PushAll(same_start, {"xxabc"});
  EXPECT_EQ(run.emitted, "xx");
  EXPECT_EQ(run.last.stop_string, "abc");
}

TEST(StopCheckerTest, StopTokenIdAndEosEndWithoutTheirText) {
  SamplingParams p = WithStops({"END"});
  p.stop_token_ids = {7};
  StopChecker checker(p, {kEos});
  Stream run = PushAll(checker, {"fine E", "<stop7>"}, {kText, 7});
  EXPECT_EQ(run.texts, (std::vector<std::string>{"fine ", "E"}));
  EXPECT_EQ(run.last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(run.last.stop_token_id, 7);

  StopChecker eos(SamplingParams(), {kEos, 3});
  run = PushAll(eos, {"a", "</s>"}, {kText, 3});
  EXPECT_EQ(run.emitted, "a");
  EXPECT_EQ(run.last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(run.last.stop_token_id, -1);
}

TEST(StopCheckerTest, IgnoreEosKeepsGoing) {
  SamplingParams p;
  p.ignore_eos = true;
  p.max_tokens = 3;
  StopChecker checker(p, {kEos});
  const Stream run = PushAll(checker, {"a", "", "b"}, {kText, kEos, kText});
  EXPECT_EQ(run.emitted, "ab");
  EXPECT_EQ(run.last.finish_reason, FinishReason::kLength);
}

TEST(StopCheckerTest, MinTokensDelaysStops) {
  SamplingParams p = WithStops({"!"});
  p.min_tokens = 2;
  p.stop_token_ids = {7};
  StopChecker checker(p, {kEos});
  // Token 1: EOS and "!" are ignored. Token 2: "!" counts (vLLM looks for stop strings
  // from the min_tokens-th token). Stop ids only count from token 3.
  StopUpdate u = checker.Push(kEos, "x!");
  EXPECT_EQ(u.text, "x!");
  EXPECT_EQ(u.finish_reason, FinishReason::kNone);
  u = checker.Push(kText, "y!z");
  EXPECT_EQ(u.text, "y");
  EXPECT_EQ(u.finish_reason, FinishReason::kStop);

  StopChecker ids(p, {kEos});
  EXPECT_EQ(ids.Push(7, "a").finish_reason, FinishReason::kNone);
  EXPECT_EQ(ids.Push(kEos, "b").finish_reason, FinishReason::kNone);
  u = ids.Push(7, "c");
  EXPECT_EQ(u.finish_reason, FinishReason::kStop);
  EXPECT_EQ(u.stop_token_id, 7);
}

TEST(StopCheckerTest, MultiByteStopStrings) {
  StopChecker checker(WithStops({"。\n"}), {kEos});
  const Stream run = PushAll(checker, {"你好", "。", "\n再见"});
  EXPECT_EQ(run.texts, (std::vector<std::string>{"你好", "", ""}));
  EXPECT_EQ(run.last.finish_reason, FinishReason::kStop);
}

TEST(StopCheckerTest, RandomSplitsMatchPlainSearch) {
  // Texts over a small alphabet so that partial matches are frequent.
  std::mt19937 gen(1);
  const std::vector<std::string> stops = {"abba", "bab", "aaa"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int length = 1 + gen() % 30;
    for (int i = 0; i < length; ++i) text += "ab"[gen() % 2];
    std::vector<std::string> deltas;
    for (size_t pos = 0; pos < text.size();) {
      const size_t n = std::min<size_t>(gen() % 4, text.size() - pos);  // empty deltas too
      deltas.push_back(text.substr(pos, n));
      pos += n;
    }
    size_t first = std::string::npos;
    for (const std::string& s : stops) first = std::min(first, text.find(s));
    const std::string want = first == std::string::npos ? text : text.substr(0, first);

    StopChecker checker(WithStops(stops, static_cast<int32_t>(deltas.size())), {kEos});
    const Stream run = PushAll(checker, deltas);
    ASSERT_EQ(run.emitted, want) << text;
    for (const std::string& s : stops) ASSERT_EQ(run.emitted.find(s), std::string::npos) << text;
    ASSERT_TRUE(checker.finished());
    EXPECT_EQ(run.last.finish_reason, first == std::string::npos ? FinishReason::kLength : FinishReason::kStop);
  }
}

}  // namespace
}  // namespace tpserve
