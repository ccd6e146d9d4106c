// BackendPool: the policies' orderings and passive ejection. Tested by
// tests/router_config_test.cc.
#include "coordinator/router/backend_pool.h"

#include <algorithm>
#include <utility>

namespace tpserve {

BackendPool::BackendPool(RouterModel model, absl::Duration cooldown)
    : model_(std::move(model)),
      cooldown_(cooldown),
      in_flight_(new std::atomic<int64_t>[model_.backends.size()]),
      ejected_until_(model_.backends.size(), absl::InfinitePast()) {
  for (size_t i = 0; i < model_.backends.size(); ++i) in_flight_[i].store(0);
}

std::vector<size_t> BackendPool::Order(absl::Time now) {
  const size_t n = model_.backends.size();
  const size_t start = next_.fetch_add(1) % n;
  std::vector<size_t> order;
  {
    absl::MutexLock lock(&mu_);
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (start + k) % n;
      if (ejected_until_[i] <= now) order.push_back(i);
    }
  }
  if (model_.policy == RoutingPolicyKind::kLeastLoad) {
    std::vector<int64_t> load(n);
    for (size_t i : order) load[i] = in_flight_[i].load();
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return load[a] < load[b]; });
  }
  return order;
}

std::vector<std::string> BackendPool::Ejected(absl::Time now) const {
  std::vector<std::string> out;
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < model_.backends.size(); ++i) {
    if (ejected_until_[i] > now) out.push_back(model_.backends[i].url);
  }
  return out;
}

void BackendPool::Begin(size_t i) { in_flight_[i].fetch_add(1); }
void BackendPool::End(size_t i) { in_flight_[i].fetch_sub(1); }
int64_t BackendPool::in_flight(size_t i) const { return in_flight_[i].load(); }

void BackendPool::Eject(size_t i, absl::Time now) {
  absl::MutexLock lock(&mu_);
  ejected_until_[i] = now + cooldown_;
}

}  // namespace tpserve
