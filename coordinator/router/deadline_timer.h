// A timer on a request's strand that runs a callback once at a deadline: the router's
// request_timeout_s, for both front ends (proxy_request.h, grpc_front_generate.h), and a
// grpc:// backend call's connect and response timeouts (grpc_generate_call.cc). Setting it
// again, or cancelling it, voids the earlier setting, even one whose callback is already
// queued on the strand. Header-only; tested through tests/router_knobs_test.sh,
// tests/router_grpc_test.cc and tests/router_grpc_front_test.cc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/time/time.h"
#include "boost/asio/steady_timer.hpp"
#include "coordinator/router/upstream_call.h"

namespace tpserve {

class DeadlineTimer {
 public:
  explicit DeadlineTimer(const Strand& strand) : timer_(strand) {}

  // `fire` runs on the strand at `deadline` unless set again or cancelled first; InfiniteFuture:
  // never (cancels). `fire` holds what it needs alive (or weakly): the timer may be gone by then.
  void Set(absl::Time deadline, std::function<void()> fire) {
    const uint64_t generation = ++*generation_;
    if (deadline == absl::InfiniteFuture()) {
      timer_.cancel();
      return;
    }
    timer_.expires_after(absl::ToChronoNanoseconds(std::max(deadline - absl::Now(), absl::ZeroDuration())));
    timer_.async_wait([current = generation_, generation, fire = std::move(fire)](const boost::system::error_code& ec) {
      if (!ec && *current == generation) fire();
    });
  }
  void Cancel() {
    ++*generation_;
    timer_.cancel();
  }

 private:
  boost::asio::steady_timer timer_;
  // Shared with the waits: a wait compares its own setting's number with the latest.
  std::shared_ptr<uint64_t> generation_ = std::make_shared<uint64_t>(0);
};

}  // namespace tpserve
