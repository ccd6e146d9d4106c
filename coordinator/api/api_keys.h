// API keys (`serve --api-key`): the keys a request must present as "Authorization: Bearer KEY"
// (HTTP header or gRPC metadata), compared in constant time. Tested by tests/api_keys_test.cc,
// and through both servers by tests/frontend_http_test.cc, frontend_test.cc and serve_test.sh.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// Whether `a` and `b` hold the same bytes, in a time that depends only on the longer of the
// two lengths: every byte up to it is compared and nothing returns early, so the time does not
// tell how much of a guess was right (the lengths themselves are not hidden).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// The server's keys. Empty: requests need none.
class ApiKeys {
 public:
  ApiKeys() = default;
  // Empty strings are dropped (a key must have at least one byte).
  explicit ApiKeys(std::vector<std::string> keys);

  bool enabled() const { return !keys_.empty(); }
  size_t size() const { return keys_.size(); }

  // OK when no key is set, or `authorization` (the header's value, empty when absent) is
  // "Bearer K" (the scheme in any case) with K one of the keys; else UNAUTHENTICATED saying
  // what is missing. Every key is compared, whichever matches.
  absl::Status Check(absl::string_view authorization) const;

 private:
  std::vector<std::string> keys_;
};

}  // namespace tpserve
