// `tpserve router --request-log FILE`: one JSON line per proxied request (seq, timestamp,
// model, backend, latency_ms, status, success, error, prompt_tokens, completion_tokens,
// grpc_status, and cost_usd where the backend is priced),
// appended and flushed as each request ends. Thread-safe. Tested by tests/router_test.sh.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tpserve {

struct RequestRecord {
  std::string model;    // as the client asked
  std::string backend;  // the URL that answered; empty: none did
  double latency_ms = 0;
  // The HTTP status the client got; for a call to the router's gRPC port, the one serve's HTTP
  // front end gives its code (OK 200, INVALID_ARGUMENT 400, ...; 499: the client went away).
  int status = 0;
  std::string grpc_status;  // such a call's code, e.g. "OK"; empty (null): an HTTP request
  bool success = false;
  std::string error;  // empty on success
  // From the backend's "usage" (a whole JSON response's, a stream's usage chunk, a gRPC
  // backend's messages'); else unknown (null).
  std::optional<int64_t> prompt_tokens;
  std::optional<int64_t> completion_tokens;
  // The answering backend has prices (price_per_mtok): the line has cost_usd, what those tokens
  // cost at them (null: the tokens are unknown). Unpriced: no cost_usd key.
  bool priced = false;
  std::optional<double> cost_usd;
};

class RequestLog {
 public:
  // Opens `path` for appending; UNAVAILABLE naming the file when it cannot.
  static absl::StatusOr<std::unique_ptr<RequestLog>> Open(const std::string& path);
  ~RequestLog();
  RequestLog(const RequestLog&) = delete;
  RequestLog& operator=(const RequestLog&) = delete;

  void Append(const RequestRecord& record, absl::Time now);

 private:
  explicit RequestLog(std::FILE* file) : file_(file) {}
  absl::Mutex mu_;
  std::FILE* const file_;
  int64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tpserve
