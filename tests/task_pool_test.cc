// TaskPool: runs what is posted, drains on Stop, refuses afterwards.
#include "coordinator/api/task_pool.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(TaskPoolTest, RunsPostedTasksOnItsThreads) {
  TaskPool pool(2);
  absl::Notification done;
  std::thread::id ran_on;
  ASSERT_TRUE(pool.Post([&] {
    ran_on = std::this_thread::get_id();
    done.Notify();
  }));
  done.WaitForNotification();
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(TaskPoolTest, StopDrainsThenRefuses) {
  TaskPool pool(1);
  std::atomic<int> ran{0};
  for (int i = 0; i < 100; ++i) pool.Post([&] { ++ran; });
  pool.Stop();
  EXPECT_EQ(ran.load(), 100);
  EXPECT_FALSE(pool.Post([&] { ++ran; }));
  pool.Stop();  // idempotent
  EXPECT_EQ(ran.load(), 100);
}

TEST(TaskPoolTest, RefusesBeyondItsQueueLimit) {
  TaskPool pool(1, /*max_queued=*/2);
  absl::Notification running, release;
  std::atomic<int> ran{0};
  ASSERT_TRUE(pool.Post([&] {
    running.Notify();
    release.WaitForNotification();
    ++ran;
  }));
  running.WaitForNotification();  // the running task does not count against the limit
  EXPECT_TRUE(pool.Post([&] { ++ran; }));
  EXPECT_TRUE(pool.Post([&] { ++ran; }));
  EXPECT_FALSE(pool.Post([&] { ++ran; }));
  release.Notify();
  pool.Stop();
  EXPECT_EQ(ran.load(), 3);
}

// Heavy tasks (large chats) hold at most threads - 1 threads: with both of two threads' worth
// of heavy tasks blocked, a light task still runs at once; the heavy ones queued behind them
// run as the first finish, and Stop drains both lanes. With one thread, heavy tasks run too.
TEST(TaskPoolTest, HeavyTasksLeaveAThreadToLightOnes) {
  TaskPool pool(2);
  absl::Notification release;
  std::atomic<int> heavy_started{0}, heavy_done{0};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(pool.Post(
        [&] {
          ++heavy_started;
          release.WaitForNotification();
          ++heavy_done;
        },
        /*heavy=*/true));
  }
  for (int i = 0; i < 1000 && heavy_started.load() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  absl::SleepFor(absl::Milliseconds(50));  // time for a second heavy task to start, were it allowed
  EXPECT_EQ(heavy_started.load(), 1);  // only threads - 1 = 1 heavy task at a time
  absl::Notification light;
  EXPECT_TRUE(pool.Post([&] { light.Notify(); }));
  // Within 10 s: the light task has a thread although three heavy ones wait or run.
  EXPECT_TRUE(light.WaitForNotificationWithTimeout(absl::Seconds(10)));
  release.Notify();  // (not after an ASSERT: Stop would wait for the blocked tasks forever)
  pool.Stop();
  EXPECT_EQ(heavy_done.load(), 3);

  TaskPool one(1);
  std::atomic<int> ran{0};
  for (int i = 0; i < 5; ++i) one.Post([&] { ++ran; }, /*heavy=*/i % 2 == 0);
  one.Stop();
  EXPECT_EQ(ran.load(), 5);
}

}  // namespace
}  // namespace tpserve
