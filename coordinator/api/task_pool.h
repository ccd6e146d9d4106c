// A few threads running posted closures, with an optional bound on the tasks waiting: the
// gRPC server's response pumps, the HTTP server's request rendering. Tested by
// tests/task_pool_test.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tpserve {

class TaskPool {
 public:
  // At most `max_queued` tasks wait (not counting those running); Post refuses more. The
  // threads are named `name` (at most 15 characters: top -H, perf).
  explicit TaskPool(int threads, size_t max_queued = SIZE_MAX, const char* name = "tpserve-pool");
  ~TaskPool();  // Stop()
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Thread-safe and never blocks on the tasks. False (the task is dropped) after Stop() or
  // when max_queued tasks already wait.
  bool Post(std::function<void()> task);
  // Runs the tasks already posted, then joins the threads. Idempotent; must not be called
  // from a task.
  void Stop();

 private:
  void Work();

  const size_t max_queued_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tpserve
