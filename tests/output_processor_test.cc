// Tests for coordinator/engine/output_processor.h with a real tokenizer (gemma's): engine
// outputs become stream events on the processor's thread; a token the engine stopped on is
// not emitted as text; a stop string ends the stream, asks the engine to abort, and later
// outputs of the request are dropped; held-back text goes out when the engine ends the
// output, but not after an error.
#include "coordinator/engine/output_processor.h"

#include <mutex>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

struct Received {
  std::string text;
  std::vector<int32_t> ids;
  OutputEvent last;
};

Received Drain(RequestStream& s) {
  Received r;
  OutputEvent e;
  while (s.Next(&e, absl::Seconds(30))) {
    r.text += e.text;
    r.ids.insert(r.ids.end(), e.token_ids.begin(), e.token_ids.end());
    if (e.finish != FinishReason::kNone) {
      r.last = e;
      break;
    }
  }
  return r;
}

EngineOutput Output(const std::string& id, std::vector<int32_t> tokens, FinishReason finish = FinishReason::kNone,
                    std::string error = "") {
  EngineOutput o;
  o.request_id = id;
  o.num_output_tokens = static_cast<int32_t>(tokens.size());
  o.token_ids = std::move(tokens);
  o.finish = finish;
  o.error = std::move(error);
  return o;
}

class OutputProcessorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::FromFile(std::string(TPSERVE_FIXTURES) + "/tokenizers/gemma/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    processor_ = std::make_unique<OutputProcessor>(*tokenizer_, [this](const std::string& id) {
      std::lock_guard<std::mutex> lock(mu_);
      aborts_.push_back(id);
    });
  }
  std::shared_ptr<RequestStream> Add(const std::string& id, SamplingParams params = {}) {
    auto stream = std::make_shared<RequestStream>(id);
    processor_->Add(id, stream, params, 3);
    return stream;
  }
  std::vector<int32_t> Ids(const std::string& text) { return tokenizer_->Encode(text, /*add_special_tokens=*/false); }
  std::vector<std::string> Aborts() {
    std::lock_guard<std::mutex> lock(mu_);
    return aborts_;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<OutputProcessor> processor_;
  std::mutex mu_;
  std::vector<std::string> aborts_;
};

TEST_F(OutputProcessorTest, TheTokenTheEngineStoppedOnIsNotEmitted) {
  std::vector<int32_t> words = Ids("Hello world!");
  ASSERT_GE(words.size(), 2u);
  const std::vector<int32_t> stop = {words.back()};
  words.pop_back();
  const std::string want = tokenizer_->Decode(words, /*skip_special_tokens=*/true);
  ASSERT_NE(want, "Hello world!");
  auto s = Add("a");
  processor_->Process({Output("a", words)});
  processor_->Process({Output("a", stop, FinishReason::kStop)});
  const Received r = Drain(*s);
  EXPECT_EQ(r.text, want);
  EXPECT_EQ(r.last.finish, FinishReason::kStop);
  std::vector<int32_t> all = words;
  all.push_back(stop[0]);
  EXPECT_EQ(r.ids, all);  // the id is reported, its text is not
  EXPECT_EQ(r.last.prompt_tokens, 3);
  EXPECT_TRUE(Aborts().empty());  // the engine already stopped it
  EXPECT_EQ(r.last.stop_token_id, -1);  // EOS, not a stop_token_id
}

TEST_F(OutputProcessorTest, AStopStringEndsTheStreamAndAsksTheEngineToAbort) {
  SamplingParams p;
  p.stop = {" world"};
  auto s = Add("b", p);
  const std::vector<int32_t> ids = Ids("Hello world and more");
  processor_->Process({Output("b", ids)});
  processor_->Process({Output("b", Ids(" later"))});  // a step already under way: dropped
  processor_->Process({Output("b", {}, FinishReason::kCancelled)});  // the engine's abort
  const Received r = Drain(*s);
  EXPECT_EQ(r.text, "Hello");
  EXPECT_EQ(r.last.finish, FinishReason::kStop);
  EXPECT_EQ(r.last.stop_string, " world");  // vLLM's stop_reason
  processor_->Close();
  EXPECT_EQ(Aborts(), std::vector<std::string>{"b"});
  OutputEvent extra;
  EXPECT_FALSE(s->TryNext(&extra));  // nothing after the final event
}

TEST_F(OutputProcessorTest, HeldBackTextGoesOutWhenTheEngineEndsTheOutputButNotAfterAnError) {
  SamplingParams p;
  p.stop = {"byebye"};
  auto s = Add("c", p);
  processor_->Process({Output("c", Ids("Hello bye"))});  // " bye" could start "byebye": held
  processor_->Process({Output("c", {}, FinishReason::kLength)});
  Received r = Drain(*s);
  EXPECT_EQ(r.text, "Hello bye");
  EXPECT_EQ(r.last.finish, FinishReason::kLength);

  auto e = Add("d", p);
  processor_->Process({Output("d", Ids("Hello bye"))});
  processor_->Process({Output("d", {}, FinishReason::kError, "the model step failed: boom")});
  r = Drain(*e);
  EXPECT_EQ(r.text, "Hello ");
  EXPECT_EQ(r.last.finish, FinishReason::kError);
  EXPECT_EQ(r.last.error, "the model step failed: boom");
}

}  // namespace
}  // namespace tpserve
