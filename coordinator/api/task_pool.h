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

// Both front ends post a request of at least this many bytes (its JSON body, its gRPC message)
// to the render pool as heavy: a chat of ~2,000 messages renders Gemma 4's template in ~0.2 s
// (the template scans back over every earlier message for each one: quadratic by design,
// bench/chat_render_bench), and six of them at once must not hold every render thread.
inline constexpr size_t kHeavyRenderBytes = size_t{64} << 10;

class TaskPool {
 public:
  // At most `max_queued` tasks wait (not counting those running); Post refuses more. The
  // threads are named `name` (at most 15 characters: top -H, perf).
  explicit TaskPool(int threads, size_t max_queued = SIZE_MAX, const char* name = "tpserve-pool");
  ~TaskPool();  // Stop()
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Thread-safe and never blocks on the tasks. False (the task is dropped) after Stop() or
  // when max_queued tasks already wait. A `heavy` task (a large chat to render) runs on at
  // most threads - 1 of the threads at once (1 with one thread), and waiting light tasks are
  // taken first: a burst of heavy tasks always leaves a thread to the light ones.
  bool Post(std::function<void()> task, bool heavy = false);
  // Runs the tasks already posted, then joins the threads. Idempotent; must not be called
  // from a task.
  void Stop();

 private:
  void Work();

  const size_t max_queued_;
  int max_heavy_running_ = 1;  // threads - 1, at least 1
  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> heavy_tasks_ ABSL_GUARDED_BY(mu_);
  int heavy_running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tpserve
