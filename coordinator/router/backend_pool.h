// The router's live view of one model's backends: requests in flight at the router, passive
// health (a backend that refused a connection, timed out or answered 5xx is ejected for its
// cooldown_s), active health (a backend failing its health probe is out until one passes), and
// the routing policy that orders the healthy ones for a request. Thread-safe.
// Tested by tests/router_config_test.cc (policies, ejection) and tests/router_test.sh.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/router/router_config.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// cache_aware's granularity: a prompt is indexed every this many bytes (of PromptText).
inline constexpr size_t kPrefixStep = 128;
inline constexpr size_t kPrefixIndexEntries = size_t{1} << 18;

// The text cache_aware matches on: a chat's messages as "role\ncontent\n" (text parts of a
// content list in order) or a completion's prompt (a list: its first element; token ids as
// their decimal text), at most kPrefixIndexEntries / 4 steps' bytes of it.
std::string PromptText(const nlohmann::json& body);

class BackendPool {
 public:
  explicit BackendPool(RouterModel model);

  const RouterModel& model() const { return model_; }
  const RouterBackend& backend(size_t i) const { return model_.backends[i]; }

  // The backends a request tries, in order: the healthy ones (not in a cooldown at `now`, not
  // failing their health probe) as
  // the policy ranks them (round_robin: starting one further than the last request's start;
  // least_load: fewest in flight first, ties in round-robin order; cache_aware: below). Each
  // at most once. `prompt`: the request's prompt text (PromptText), read by cache_aware only.
  //
  // cache_aware keeps an approximate index of the prompt prefixes each backend was sent, in
  // steps of kPrefixStep bytes (a hash per step over the prompt so far; about the last
  // kPrefixIndexEntries steps kept). The backend that was sent the longest indexed prefix of
  // this prompt goes first where that prefix is more than cache_threshold of the prompt and
  // the load is in balance (CacheAwareOptions); otherwise least_load's order. Every step of
  // the prompt is then indexed to the first backend of the order.
  std::vector<size_t> Order(absl::Time now, absl::string_view prompt = {});
  // The backends in a cooldown at `now`, by URL (for the error naming what was skipped).
  std::vector<std::string> Ejected(absl::Time now) const;

  // A request to backend i started / ended (least_load's count).
  void Begin(size_t i);
  // Begin where backend i has fewer than `cap` requests in flight (cap > 0); false, and nothing
  // counted, where it is full.
  bool TryBegin(size_t i, int64_t cap);
  void End(size_t i);
  int64_t in_flight(size_t i) const;
  // Backend i failed (connection, timeout, 5xx): skipped by Order until now + its cooldown
  // (RouterBackend::connection; 0: not skipped).
  void Eject(size_t i, absl::Time now);
  // Backend i's latest health probe failed (skipped by Order) or passed. Returns whether that
  // changed its probe state (every backend starts passing).
  bool SetProbeFailing(size_t i, bool failing);
  // The backends failing their health probe now, by URL.
  std::vector<std::string> ProbeFailing() const;
  // Routable at `now`: neither in a cooldown nor failing its health probe.
  bool Healthy(size_t i, absl::Time now) const;

 private:
  std::vector<size_t> CacheAwareOrder(std::vector<size_t> healthy, absl::string_view prompt);

  const RouterModel model_;
  // cache_aware's prefix index: step hash -> backend, in two generations (a lookup reads both;
  // when the newer holds kPrefixIndexEntries / 2 it becomes the older, and the older is
  // dropped): a bounded, roughly least-recently-used index.
  absl::flat_hash_map<uint64_t, uint32_t> prefixes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint32_t> older_prefixes_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<std::atomic<int64_t>[]> in_flight_;
  std::atomic<uint64_t> next_{0};
  mutable absl::Mutex mu_;
  std::vector<absl::Time> ejected_until_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> probe_failing_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tpserve
