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

}  // namespace
}  // namespace tpserve
