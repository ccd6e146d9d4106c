// RequestLog: JSON lines. Tested by tests/router_test.sh.
#include "coordinator/router/request_log.h"

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tpserve {

absl::StatusOr<std::unique_ptr<RequestLog>> RequestLog::Open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("--request-log ", path, ": cannot open for appending: ",
                                               std::strerror(errno)));
  }
  return std::unique_ptr<RequestLog>(new RequestLog(f));
}

RequestLog::~RequestLog() { std::fclose(file_); }

void RequestLog::Append(const RequestRecord& r, absl::Time now) {
  auto optional = [](const std::optional<int64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  absl::MutexLock lock(&mu_);
  nlohmann::ordered_json line = {
      {"seq", ++seq_},
      {"timestamp", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", now, absl::UTCTimeZone())},
      {"model", r.model},
      {"backend", r.backend.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.backend)},
      {"latency_ms", r.latency_ms},
      {"status", r.status},
      {"success", r.success},
      {"error", r.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.error)},
      {"prompt_tokens", optional(r.prompt_tokens)},
      {"completion_tokens", optional(r.completion_tokens)},
      {"grpc_status", r.grpc_status.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.grpc_status)},
  };
  if (r.priced) line["cost_usd"] = r.cost_usd ? nlohmann::json(*r.cost_usd) : nlohmann::json(nullptr);
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::fwrite(text.data(), 1, text.size(), file_);
  std::fflush(file_);
}

}  // namespace tpserve
