// A few threads running posted closures: the engine's notify hooks post response writing
// here instead of doing it on the engine thread. Tested by tests/task_pool_test.cc.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tpserve {

class TaskPool {
 public:
  explicit TaskPool(int threads);
  ~TaskPool();  // Stop()
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Thread-safe and never blocks on the tasks. False (the task is dropped) after Stop().
  bool Post(std::function<void()> task);
  // Runs the tasks already posted, then joins the threads. Idempotent; must not be called
  // from a task.
  void Stop();

 private:
  void Work();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tpserve
