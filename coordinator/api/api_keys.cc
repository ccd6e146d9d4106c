// ApiKeys and the constant-time comparison. Tested by tests/api_keys_test.cc.
#include "coordinator/api/api_keys.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace tpserve {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  // Different lengths differ, but the loop still runs over every byte of the longer one.
  uint64_t diff = static_cast<uint64_t>(a.size() ^ b.size());
  // volatile: the compiler may not stop the loop once `diff` is known to be non-zero.
  volatile uint8_t bytes_diff = 0;
  for (size_t i = 0; i < n; ++i) {
    // Past its end a string reads as zeros (the length difference is already in `diff`).
    const uint8_t x = i < a.size() ? static_cast<uint8_t>(a[i]) : 0;
    const uint8_t y = i < b.size() ? static_cast<uint8_t>(b[i]) : 0;
    bytes_diff = bytes_diff | static_cast<uint8_t>(x ^ y);
  }
  diff |= bytes_diff;
  return diff == 0;
}

ApiKeys::ApiKeys(std::vector<std::string> keys) {
  for (std::string& key : keys) {
    if (!key.empty()) keys_.push_back(std::move(key));
  }
}

absl::Status ApiKeys::Check(absl::string_view authorization) const {
  if (keys_.empty()) return absl::OkStatus();
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        "this server needs an API key: send the header \"Authorization: Bearer <key>\" (gRPC: the metadata "
        "\"authorization: Bearer <key>\")");
  }
  constexpr absl::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme)) {
    return absl::UnauthenticatedError("the Authorization header must be \"Bearer <key>\"");
  }
  const absl::string_view token = absl::StripAsciiWhitespace(authorization.substr(kScheme.size()));
  bool match = false;
  for (const std::string& key : keys_) match |= ConstantTimeEquals(token, key);  // no early exit
  if (!match) return absl::UnauthenticatedError("the API key is not valid for this server");
  return absl::OkStatus();
}

}  // namespace tpserve
