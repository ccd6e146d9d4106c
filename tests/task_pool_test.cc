// TaskPool: runs what is posted, drains on Stop, refuses afterwards.
#include "coordinator/api/task_pool.h"

#include <atomic>

#include "absl/synchronization/notification.h"
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

}  // namespace
}  // namespace tpserve
