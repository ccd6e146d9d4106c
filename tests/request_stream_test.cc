// RequestStream: ordering, timeouts, the notify hook, cancel and finish flags.
#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/engine/request.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

OutputEvent Token(int32_t id, FinishReason finish = FinishReason::kNone) {
  OutputEvent e;
  e.token_ids = {id};
  e.finish = finish;
  return e;
}

TEST(RequestStreamTest, DeliversEventsInOrder) {
  RequestStream s("r1");
  EXPECT_EQ(s.request_id(), "r1");
  s.Push(Token(1));
  s.Push(Token(2, FinishReason::kLength));
  OutputEvent e;
  ASSERT_TRUE(s.TryNext(&e));
  EXPECT_EQ(e.token_ids[0], 1);
  EXPECT_TRUE(s.finished());  // the final event was pushed, even if not yet read
  ASSERT_TRUE(s.Next(&e, absl::Seconds(1)));
  EXPECT_EQ(e.token_ids[0], 2);
  EXPECT_EQ(e.finish, FinishReason::kLength);
  EXPECT_FALSE(s.TryNext(&e));
}

TEST(RequestStreamTest, NextTimesOutAndWakesOnPush) {
  RequestStream s("r");
  OutputEvent e;
  EXPECT_FALSE(s.Next(&e, absl::Milliseconds(10)));
  std::thread producer([&s] {
    absl::SleepFor(absl::Milliseconds(20));
    s.Push(Token(7));
  });
  EXPECT_TRUE(s.Next(&e, absl::InfiniteDuration()));
  EXPECT_EQ(e.token_ids[0], 7);
  producer.join();
}

TEST(RequestStreamTest, NotifyRunsAfterEachPushWithoutTheLock) {
  RequestStream s("r");
  std::atomic<int> calls{0};
  s.SetNotify([&] {
    OutputEvent e;
    EXPECT_TRUE(s.TryNext(&e));  // would deadlock if the hook ran under the lock
    ++calls;
  });
  s.Push(Token(1));
  s.Push(Token(2, FinishReason::kStop));
  EXPECT_EQ(calls.load(), 2);
}

TEST(RequestStreamTest, NothingFollowsTheFinalEvent) {
  RequestStream s("r");
  s.Push(Token(1, FinishReason::kCancelled));
  s.Push(Token(2, FinishReason::kError));
  OutputEvent e;
  ASSERT_TRUE(s.TryNext(&e));
  EXPECT_EQ(e.finish, FinishReason::kCancelled);
  EXPECT_FALSE(s.TryNext(&e));
  EXPECT_TRUE(s.finished());
}

TEST(RequestStreamTest, CancelIsSticky) {
  RequestStream s("r");
  EXPECT_FALSE(s.cancelled());
  s.Cancel();
  s.Cancel();
  EXPECT_TRUE(s.cancelled());
}

TEST(RequestStreamTest, FinishReasonNames) {
  EXPECT_STREQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_STREQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_STREQ(FinishReasonName(FinishReason::kCancelled), "cancelled");
  EXPECT_STREQ(FinishReasonName(FinishReason::kError), "error");
}

}  // namespace
}  // namespace tpserve
