// The router's live view of one model's backends: requests in flight at the router and passive
// health (a backend that refused a connection, timed out or answered 5xx is ejected for a
// cooldown), and the routing policy that orders the healthy ones for a request. Thread-safe.
// Tested by tests/router_config_test.cc (policies, ejection) and tests/router_test.sh.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/router/router_config.h"

namespace tpserve {

class BackendPool {
 public:
  BackendPool(RouterModel model, absl::Duration cooldown);

  const RouterModel& model() const { return model_; }
  const RouterBackend& backend(size_t i) const { return model_.backends[i]; }

  // The backends a request tries, in order: the healthy ones (not in a cooldown at `now`) as
  // the policy ranks them (round_robin: starting one further than the last request's start;
  // least_load: fewest in flight first, ties in round-robin order). Each at most once.
  std::vector<size_t> Order(absl::Time now);
  // The backends in a cooldown at `now`, by URL (for the error naming what was skipped).
  std::vector<std::string> Ejected(absl::Time now) const;

  // A request to backend i started / ended (least_load's count).
  void Begin(size_t i);
  void End(size_t i);
  int64_t in_flight(size_t i) const;
  // Backend i failed (connection, timeout, 5xx): skipped by Order until now + cooldown.
  void Eject(size_t i, absl::Time now);

 private:
  const RouterModel model_;
  const absl::Duration cooldown_;
  std::unique_ptr<std::atomic<int64_t>[]> in_flight_;
  std::atomic<uint64_t> next_{0};
  mutable absl::Mutex mu_;
  std::vector<absl::Time> ejected_until_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tpserve
