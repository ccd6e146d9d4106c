// StreamUsage: SSE lines -> the latest usage. Tested by tests/stream_usage_test.cc.
#include "coordinator/router/stream_usage.h"

#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace tpserve {
namespace {

// A usage chunk is a few hundred bytes; a longer line (a big content delta) is not one.
constexpr size_t kMaxLine = 1 << 20;

// Whether `line` holds "usage" followed by an object (not null): the only lines worth parsing.
bool MayHoldUsage(absl::string_view line) {
  for (size_t at = line.find("\"usage\""); at != absl::string_view::npos; at = line.find("\"usage\"", at + 1)) {
    size_t i = at + 7;
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i >= line.size() || line[i] != ':') continue;
    ++i;
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i < line.size() && line[i] == '{') return true;
  }
  return false;
}

}  // namespace

std::optional<UsageTokens> ReadUsage(const nlohmann::json& response) {
  if (!response.is_object() || !response.contains("usage") || !response["usage"].is_object()) return std::nullopt;
  const nlohmann::json& usage = response["usage"];
  if (!usage.contains("prompt_tokens") || !usage["prompt_tokens"].is_number_integer() ||
      !usage.contains("completion_tokens") || !usage["completion_tokens"].is_number_integer()) {
    return std::nullopt;
  }
  return UsageTokens{usage["prompt_tokens"].get<int64_t>(), usage["completion_tokens"].get<int64_t>()};
}

void StreamUsage::Feed(absl::string_view piece) {
  while (!piece.empty()) {
    const size_t newline = piece.find('\n');
    if (newline == absl::string_view::npos) {
      if (!skipping_) partial_.append(piece.data(), piece.size());
      if (partial_.size() > kMaxLine) {
        partial_.clear();
        skipping_ = true;
      }
      return;
    }
    const absl::string_view head = piece.substr(0, newline);
    piece.remove_prefix(newline + 1);
    if (skipping_) {
      skipping_ = false;
    } else if (partial_.empty()) {
      Line(head);
    } else {
      partial_.append(head.data(), head.size());
      Line(partial_);
    }
    partial_.clear();
  }
}

void StreamUsage::Line(absl::string_view line) {
  if (!absl::ConsumePrefix(&line, "data:") || !MayHoldUsage(line)) return;
  const std::optional<UsageTokens> usage =
      ReadUsage(nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false));
  if (usage.has_value()) usage_ = usage;
}

}  // namespace tpserve
