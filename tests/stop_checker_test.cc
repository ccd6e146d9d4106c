// Tests for coordinator/engine/stop_checker.h: stop strings across delta boundaries are never
// emitted, held-back text is released, min_tokens delays matching; plus a randomized check
// against plain string search. (Stop token ids, EOS and max_tokens are the engine's:
// tests/scheduler_test.cc.)
#include "coordinator/engine/stop_checker.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

struct Stream {
  std::vector<std::string> texts;  // one per Push
  std::string emitted;             // all of them, concatenated
  StopUpdate last;
};

Stream PushAll(StopChecker& checker, const std::vector<std::string>& deltas) {
  Stream run;
  for (size_t i = 0; i < deltas.size() && !checker.finished(); ++i) {
    run.last = checker.Push(deltas[i]);
    run.texts.push_back(run.last.text);
    run.emitted += run.last.text;
  }
  return run;
}

SamplingParams WithStops(std::vector<std::string> stop) {
  SamplingParams p;
  p.stop = std::move(stop);
  p.max_tokens = 100;
  return p;
}

TEST(StopCheckerTest, StopStringInsideOneDelta) {
  StopChecker checker(WithStops({"\n\n"}));
  const Stream run = PushAll(checker, {"Hello", " world.\n\nNext", " line"});
  EXPECT_EQ(run.texts, (std::vector<std::string>{"Hello", " world."}));
  EXPECT_EQ(run.last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(run.last.stop_string, "\n\n");
  EXPECT_TRUE(checker.finished());
  EXPECT_EQ(checker.num_tokens(), 2);
}

TEST(StopCheckerTest, StopStringAcrossDeltasIsNeverEmitted) {
  StopChecker checker(WithStops({"STOP"}));
  const Stream run = PushAll(checker, {"Hello S", "T", "O", "P and more"});
  // "S", "ST", "STO" are held back as possible starts of "STOP".
  EXPECT_EQ(run.texts, (std::vector<std::string>{"Hello ", "", "", ""}));
  EXPECT_EQ(run.last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(run.last.stop_string, "STOP");
}

TEST(StopCheckerTest, HeldBackTextIsReleasedWhenItStopsMatching) {
  StopChecker checker(WithStops({"STOP"}));
  const Stream run = PushAll(checker, {"a ST", "Ox", "y"});
  EXPECT_EQ(run.texts, (std::vector<std::string>{"a ", "STOx", "y"}));
  EXPECT_EQ(run.last.finish_reason, FinishReason::kNone);
  EXPECT_FALSE(checker.finished());
}

TEST(StopCheckerTest, FlushReturnsHeldBackText) {
  StopChecker checker(WithStops({"<|end|>"}));
  EXPECT_EQ(checker.Push("answer <|e").text, "answer ");
  EXPECT_EQ(checker.Flush(), "<|e");
  EXPECT_EQ(checker.Flush(), "");
}

TEST(StopCheckerTest, EarliestMatchWinsThenListOrder) {
  StopChecker checker(WithStops({"world", "lo w", "hello"}));
  Stream run = PushAll(checker, {"say hel", "lo world"});
  EXPECT_EQ(run.emitted, "say ");
  EXPECT_EQ(run.last.stop_string, "hello");

  StopChecker same_start(WithStops({"abc", "ab"}));
  run = PushAll(same_start, {"xxabc"});
  EXPECT_EQ(run.emitted, "xx");
  EXPECT_EQ(run.last.stop_string, "abc");
}

TEST(StopCheckerTest, MinTokensDelaysStopStrings) {
  SamplingParams p = WithStops({"!"});
  p.min_tokens = 2;
  StopChecker checker(p);
  // Token 1's "!" is emitted; from token 2 on (vLLM looks for stop strings from the
  // min_tokens-th token) it stops the output.
  StopUpdate u = checker.Push("x!");
  EXPECT_EQ(u.text, "x!");
  EXPECT_EQ(u.finish_reason, FinishReason::kNone);
  u = checker.Push("y!z");
  EXPECT_EQ(u.text, "y");
  EXPECT_EQ(u.finish_reason, FinishReason::kStop);
  EXPECT_EQ(u.stop_string, "!");
}

TEST(StopCheckerTest, MultiByteStopStrings) {
  StopChecker checker(WithStops({"。\n"}));
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

    StopChecker checker(WithStops(stops));
    Stream run = PushAll(checker, deltas);
    if (!checker.finished()) run.emitted += checker.Flush();  // the output ended otherwise
    ASSERT_EQ(run.emitted, want) << text;
    for (const std::string& s : stops) ASSERT_EQ(run.emitted.find(s), std::string::npos) << text;
    EXPECT_EQ(checker.finished(), first != std::string::npos) << text;
  }
}

}  // namespace
}  // namespace tpserve
