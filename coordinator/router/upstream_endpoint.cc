// UpstreamEndpoint: the idle-connection pool. Tested by tests/upstream_call_test.cc.
#include "coordinator/router/upstream_endpoint.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve {

UpstreamEndpoint::UpstreamEndpoint(std::string host, int port, ConnectionPoolOptions pool)
    : host_(std::move(host)), port_(port), pool_(pool) {}

std::string UpstreamEndpoint::host_header() const {
  return port_ == 80 ? host_ : absl::StrCat(host_, ":", port_);
}

std::unique_ptr<UpstreamConnection> UpstreamEndpoint::TakeIdle(absl::Time now) {
  absl::MutexLock lock(&mu_);
  DropExpired(now);
  if (idle_.empty()) return nullptr;
  // The newest: the least likely to have been closed by the server's own idle timer.
  std::unique_ptr<UpstreamConnection> c = std::move(idle_.back());
  idle_.pop_back();
  return c;
}

void UpstreamEndpoint::PutIdle(std::unique_ptr<UpstreamConnection> connection, absl::Time now) {
  connection->stream.expires_never();
  connection->idle_since = now;
  absl::MutexLock lock(&mu_);
  DropExpired(now);
  if (idle_.size() >= pool_.max_idle) return;  // closed as `connection` goes
  idle_.push_back(std::move(connection));
}

size_t UpstreamEndpoint::idle_count() const {
  absl::MutexLock lock(&mu_);
  return idle_.size();
}

void UpstreamEndpoint::DropExpired(absl::Time now) {
  size_t expired = 0;
  while (expired < idle_.size() && now - idle_[expired]->idle_since > pool_.idle_timeout) ++expired;
  idle_.erase(idle_.begin(), idle_.begin() + static_cast<std::ptrdiff_t>(expired));
}

}  // namespace tpserve
