// ChoiceStreams: when later choices are submitted, what a refusal leaves, cancelling.
#include "coordinator/api/choice_streams.h"

#include <memory>
#include <string>
#include <vector>

#include "coordinator/api/request_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::ElementsAre;

// Records what is submitted; refuses the submission numbered `refuse_at` (0-based), if any.
class RecordingEngine : public EngineApi {
 public:
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(ServeRequest r) override {
    if (static_cast<int>(submitted.size()) == refuse_at) return absl::ResourceExhaustedError("queue full");
    submitted.push_back(r.request_id);
    streams.push_back(std::make_shared<RequestStream>(r.request_id));
    return streams.back();
  }
  EngineStats Stats() const override { return {}; }
  const ModelInfo& Info() const override { return info; }
  bool Ready() const override { return true; }

  int refuse_at = -1;
  std::vector<std::string> submitted;
  std::vector<std::shared_ptr<RequestStream>> streams;
  ModelInfo info;
};

struct Choices {
  explicit Choices(int n, int refuse_at = -1) {
    engine.refuse_at = refuse_at;
    ServeRequest first;
    first.request_id = "cmpl-1";
    std::vector<ServeRequest> later = MoreChoices(first, n);
    auto stream = *engine.Submit(first);
    choices = std::make_unique<ChoiceStreams>(engine, stream, RequestTracker(nullptr), std::move(later),
                                              [this](RequestStream& s) { watched.push_back(s.request_id()); });
  }
  RecordingEngine engine;
  std::vector<std::string> watched;
  std::unique_ptr<ChoiceStreams> choices;
};

OutputEvent Token(FinishReason finish = FinishReason::kNone) {
  OutputEvent e;
  e.token_ids = {7};
  e.finish = finish;
  return e;
}

TEST(ChoiceStreamsTest, LaterChoicesAreSubmittedOnceWhenAsked) {
  Choices c(3);
  EXPECT_EQ(c.choices->num_submitted(), 1u);
  EXPECT_THAT(c.engine.submitted, ElementsAre("cmpl-1"));
  OutputEvent e;
  EXPECT_FALSE(c.choices->Next(0, &e));
  c.engine.streams[0]->Push(Token());
  ASSERT_TRUE(c.choices->Next(0, &e));
  EXPECT_THAT(e.token_ids, ElementsAre(7));
  ASSERT_TRUE(c.choices->SubmitLater().ok());
  EXPECT_THAT(c.engine.submitted, ElementsAre("cmpl-1", "cmpl-1-1", "cmpl-1-2"));
  EXPECT_THAT(c.watched, ElementsAre("cmpl-1-1", "cmpl-1-2"));  // the first is the caller's to watch
  EXPECT_EQ(c.choices->num_submitted(), 3u);
  EXPECT_EQ(c.choices->stream(2).request_id(), "cmpl-1-2");
  ASSERT_TRUE(c.choices->SubmitLater().ok());  // nothing more to submit
  EXPECT_EQ(c.engine.submitted.size(), 3u);
  c.engine.streams[2]->Push(Token());
  EXPECT_FALSE(c.choices->Next(1, &e));
  EXPECT_TRUE(c.choices->Next(2, &e));
}

TEST(ChoiceStreamsTest, ARefusedChoiceStopsTheRestAndIsNamedByItsIndex) {
  Choices c(4, /*refuse_at=*/2);  // choice 2 is the engine's third submission
  const absl::Status refused = c.choices->SubmitLater();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(c.choices->num_submitted(), 2u);  // the refused choice is choice 2
  EXPECT_THAT(c.engine.submitted, ElementsAre("cmpl-1", "cmpl-1-1"));
  EXPECT_TRUE(c.choices->SubmitLater().ok());  // choice 3 is never submitted
  EXPECT_EQ(c.engine.submitted.size(), 2u);
  const OutputEvent e = RefusedChoiceEvent(refused);
  EXPECT_EQ(e.finish, FinishReason::kError);
  EXPECT_EQ(e.error, "queue full");
  EXPECT_EQ(e.error_code, absl::StatusCode::kResourceExhausted);
}

TEST(ChoiceStreamsTest, CancelsOnlyTheChoicesThatHaveNotFinished) {
  Choices c(3);
  ASSERT_TRUE(c.choices->SubmitLater().ok());
  c.engine.streams[1]->Push(Token(FinishReason::kLength));
  int notified = 0;
  c.engine.streams[0]->SetNotify([&] { ++notified; });
  c.choices->CancelUnfinished();
  EXPECT_TRUE(c.engine.streams[0]->cancelled());
  EXPECT_FALSE(c.engine.streams[1]->cancelled());
  EXPECT_TRUE(c.engine.streams[2]->cancelled());
  c.engine.streams[0]->Push(Token());
  EXPECT_EQ(notified, 0);  // notifications stopped
}

}  // namespace
}  // namespace tpserve
