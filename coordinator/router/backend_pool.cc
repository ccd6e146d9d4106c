// BackendPool: the policies' orderings, passive ejection and the health probes' verdicts. Tested by
// tests/router_config_test.cc.
#include "coordinator/router/backend_pool.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace tpserve {

BackendPool::BackendPool(RouterModel model)
    : model_(std::move(model)),
      in_flight_(new std::atomic<int64_t>[model_.backends.size()]),
      ejected_until_(model_.backends.size(), absl::InfinitePast()),
      probe_failing_(model_.backends.size(), false) {
  for (size_t i = 0; i < model_.backends.size(); ++i) in_flight_[i].store(0);
}

std::string PromptText(const nlohmann::json& body) {
  constexpr size_t kMaxBytes = kPrefixStep * (kPrefixIndexEntries / 4);
  std::string text;
  auto add = [&](const nlohmann::json& v) {
    if (text.size() >= kMaxBytes) return;
    if (v.is_string()) {
      text += v.get_ref<const std::string&>();
    } else if (v.is_number_integer()) {
      absl::StrAppend(&text, v.get<int64_t>(), " ");
    }
  };
  if (body.contains("messages") && body["messages"].is_array()) {
    for (const nlohmann::json& m : body["messages"]) {
      if (!m.is_object()) continue;
      if (m.contains("role")) add(m["role"]);
      text += '\n';
      if (!m.contains("content")) continue;
      const nlohmann::json& c = m["content"];
      if (c.is_array()) {
        for (const nlohmann::json& part : c) {
          if (part.is_object() && part.contains("text")) add(part["text"]);
        }
      } else {
        add(c);
      }
      text += '\n';
    }
  } else if (body.contains("prompt")) {
    const nlohmann::json& p = body["prompt"];
    if (p.is_array() && !p.empty() && !p[0].is_number()) {
      add(p[0]);  // a list of prompts: the first
    } else if (p.is_array()) {
      for (const nlohmann::json& id : p) add(id);  // token ids
    } else {
      add(p);
    }
  }
  if (text.size() > kMaxBytes) text.resize(kMaxBytes);
  return text;
}

std::vector<size_t> BackendPool::CacheAwareOrder(std::vector<size_t> healthy, absl::string_view prompt) {
  // least_load's order first: what a request without a usable prefix match takes.
  std::vector<int64_t> load(model_.backends.size());
  for (size_t i : healthy) load[i] = in_flight_[i].load();
  std::stable_sort(healthy.begin(), healthy.end(), [&](size_t a, size_t b) { return load[a] < load[b]; });
  if (healthy.empty()) return healthy;
  const CacheAwareOptions& o = model_.cache_aware;
  const int64_t idlest = load[healthy.front()], busiest = load[healthy.back()];
  const bool balanced = !(busiest - idlest > o.balance_abs_threshold &&
                          static_cast<double>(busiest) > o.balance_rel_threshold * static_cast<double>(idlest));
  // The prompt's step hashes: hashes[k] covers bytes [0, (k + 1) * kPrefixStep), the last step
  // possibly shorter.
  std::vector<uint64_t> hashes;
  uint64_t h = 0;
  for (size_t at = 0; at < prompt.size(); at += kPrefixStep) {
    h = absl::HashOf(h, prompt.substr(at, kPrefixStep));
    hashes.push_back(h);
  }
  absl::MutexLock lock(&mu_);
  if (balanced) {
    for (size_t k = hashes.size(); k-- > 0;) {
      auto it = prefixes_.find(hashes[k]);
      if (it == prefixes_.end()) {
        it = older_prefixes_.find(hashes[k]);
        if (it == older_prefixes_.end()) continue;
      }
      const size_t matched = std::min(prompt.size(), (k + 1) * kPrefixStep);
      const auto pos = std::find(healthy.begin(), healthy.end(), static_cast<size_t>(it->second));
      if (pos != healthy.end() &&
          static_cast<double>(matched) > o.cache_threshold * static_cast<double>(prompt.size())) {
        std::rotate(healthy.begin(), pos, pos + 1);  // it first, the rest in least_load's order
      }
      break;  // the longest indexed prefix decides (an ejected holder: least_load's order)
    }
  }
  for (uint64_t step : hashes) {
    if (prefixes_.size() >= kPrefixIndexEntries / 2) {
      older_prefixes_ = std::move(prefixes_);
      prefixes_.clear();
    }
    prefixes_[step] = static_cast<uint32_t>(healthy.front());
  }
  return healthy;
}

std::vector<size_t> BackendPool::Order(absl::Time now, absl::string_view prompt) {
  const size_t n = model_.backends.size();
  const size_t start = next_.fetch_add(1) % n;
  std::vector<size_t> order;
  {
    absl::MutexLock lock(&mu_);
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (start + k) % n;
      if (ejected_until_[i] <= now && !probe_failing_[i]) order.push_back(i);
    }
  }
  if (model_.policy == RoutingPolicyKind::kCacheAware) return CacheAwareOrder(std::move(order), prompt);
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

bool BackendPool::SetProbeFailing(size_t i, bool failing) {
  absl::MutexLock lock(&mu_);
  if (probe_failing_[i] == failing) return false;
  probe_failing_[i] = failing;
  return true;
}

std::vector<std::string> BackendPool::ProbeFailing() const {
  std::vector<std::string> out;
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < model_.backends.size(); ++i) {
    if (probe_failing_[i]) out.push_back(model_.backends[i].url);
  }
  return out;
}

bool BackendPool::Healthy(size_t i, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  return ejected_until_[i] <= now && !probe_failing_[i];
}

void BackendPool::Begin(size_t i) { in_flight_[i].fetch_add(1); }
bool BackendPool::TryBegin(size_t i, int64_t cap) {
  int64_t n = in_flight_[i].load();
  while (n < cap) {
    if (in_flight_[i].compare_exchange_weak(n, n + 1)) return true;
  }
  return false;
}
void BackendPool::End(size_t i) { in_flight_[i].fetch_sub(1); }
int64_t BackendPool::in_flight(size_t i) const { return in_flight_[i].load(); }

void BackendPool::Eject(size_t i, absl::Time now) {
  absl::MutexLock lock(&mu_);
  ejected_until_[i] = now + model_.backends[i].connection.cooldown;
}

}  // namespace tpserve
