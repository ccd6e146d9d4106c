// StreamUsage: SSE lines -> the latest usage. Tested by tests/stream_usage_test.cc.
#include "coordinator/router/stream_usage.h"

#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace tpserve {
namespace {

// A usage chunk is a few hundred bytes; a longer line (a big content delta) is not one.
constexpr size_t kMaxLine = 1 << 20;

// Whether `line` holds the JSON key `key` (quoted) whose value starts with `first`: a cheap test
// that says which lines are worth parsing. (Inside a JSON string the key's quotes are escaped.)
bool HoldsKeyWithValue(absl::string_view line, absl::string_view key, char first) {
  for (size_t at = line.find(key); at != absl::string_view::npos; at = line.find(key, at + 1)) {
    size_t i = at + key.size();
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i >= line.size() || line[i] != ':') continue;
    ++i;
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i < line.size() && line[i] == first) return true;
  }
  return false;
}

// "usage" followed by an object (not null): the only lines worth parsing for usage.
bool MayHoldUsage(absl::string_view line) { return HoldsKeyWithValue(line, "\"usage\"", '{'); }

// "finish_reason" with a string (not null): a chunk that finishes a choice.
bool MayFinish(absl::string_view data) { return HoldsKeyWithValue(data, "\"finish_reason\"", '"'); }

// ReadUsage for either of nlohmann's object types (Strip keeps a chunk's key order).
template <class Json>
std::optional<UsageTokens> ReadUsageOf(const Json& response) {
  if (!response.is_object() || !response.contains("usage") || !response["usage"].is_object()) return std::nullopt;
  const Json& usage = response["usage"];
  if (!usage.contains("prompt_tokens") || !usage["prompt_tokens"].is_number_integer() ||
      !usage.contains("completion_tokens") || !usage["completion_tokens"].is_number_integer()) {
    return std::nullopt;
  }
  return UsageTokens{usage["prompt_tokens"].template get<int64_t>(), usage["completion_tokens"].template get<int64_t>()};
}

}  // namespace

std::optional<UsageTokens> ReadUsage(const nlohmann::json& response) { return ReadUsageOf(response); }

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

void StreamUsage::Note(absl::string_view data) {
  if (head_.has_value() && !MayFinish(data)) return;
  const nlohmann::ordered_json chunk =
      nlohmann::ordered_json::parse(data.begin(), data.end(), nullptr, /*allow_exceptions=*/false);
  if (!chunk.is_object()) return;
  if (!head_.has_value() && chunk.contains("id") && chunk.contains("object")) {
    head_ = nlohmann::ordered_json::object();
    for (const char* key : {"id", "object", "created", "model"}) {
      if (chunk.contains(key)) (*head_)[key] = chunk[key];
    }
  }
  const auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array()) return;
  for (const auto& choice : *choices) {
    if (!choice.is_object() || !choice.contains("finish_reason") || !choice["finish_reason"].is_string()) continue;
    finished_.insert(choice.value("index", int64_t{0}));
  }
}

std::string StreamUsage::ErrorChunk(int n) const {
  if (!head_.has_value()) return "";
  const bool chat = head_->value("object", "") == "chat.completion.chunk";
  nlohmann::ordered_json chunk = *head_;
  chunk["choices"] = nlohmann::ordered_json::array();
  for (int i = 0; i < n; ++i) {
    if (finished_.count(i) != 0) continue;
    nlohmann::ordered_json choice = {{"index", i}};
    if (chat) {
      choice["delta"] = nlohmann::ordered_json::object();
    } else {
      choice["text"] = "";
    }
    choice["finish_reason"] = "error";
    chunk["choices"].push_back(std::move(choice));
  }
  if (chunk["choices"].empty()) return "";
  return absl::StrCat("data: ", chunk.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace), "\n\n");
}

void StreamUsage::Line(absl::string_view line) {
  if (!absl::ConsumePrefix(&line, "data:")) return;
  Note(line);
  if (!MayHoldUsage(line)) return;
  const std::optional<UsageTokens> usage =
      ReadUsage(nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false));
  if (usage.has_value()) usage_ = usage;
}

std::string StreamUsage::Strip(absl::string_view piece) {
  std::string out;
  while (!piece.empty()) {
    const size_t newline = piece.find('\n');
    if (newline == absl::string_view::npos) {
      if (skipping_) {
        out.append(piece.data(), piece.size());
        return out;
      }
      partial_.append(piece.data(), piece.size());
      if (partial_.size() > kMaxLine) {  // not a usage chunk: passed on without waiting for its end
        out += partial_;
        partial_.clear();
        skipping_ = true;
      }
      return out;
    }
    const absl::string_view line = piece.substr(0, newline + 1);
    piece.remove_prefix(newline + 1);
    if (skipping_) {
      out.append(line.data(), line.size());
      skipping_ = false;
      drop_blank_ = false;
    } else if (partial_.empty()) {
      StripLine(line, out);
    } else {
      partial_.append(line.data(), line.size());
      StripLine(partial_, out);
    }
    partial_.clear();
  }
  return out;
}

std::string StreamUsage::Rest() {
  std::string rest;
  rest.swap(partial_);
  return rest;
}

void StreamUsage::StripLine(absl::string_view line, std::string& out) {
  absl::string_view text = line.substr(0, line.size() - 1);
  const bool cr = absl::ConsumeSuffix(&text, "\r");
  if (drop_blank_) {
    drop_blank_ = false;
    if (text.empty()) return;
  }
  absl::string_view data = text;
  const bool is_data = absl::ConsumePrefix(&data, "data:");
  if (is_data) Note(data);
  // A "usage" key holds a quote right after "usage"; inside a JSON string that quote is escaped.
  if (!is_data || data.find("\"usage\"") == absl::string_view::npos) {
    out.append(line.data(), line.size());
    return;
  }
  nlohmann::ordered_json chunk =
      nlohmann::ordered_json::parse(data.begin(), data.end(), nullptr, /*allow_exceptions=*/false);
  if (!chunk.is_object() || !chunk.contains("usage")) {
    out.append(line.data(), line.size());
    return;
  }
  if (std::optional<UsageTokens> usage = ReadUsageOf(chunk)) usage_ = usage;
  chunk.erase("usage");
  const auto choices = chunk.find("choices");
  if (choices == chunk.end() || (choices->is_array() && choices->empty())) {
    drop_blank_ = true;  // the usage chunk: the client did not ask for it
    return;
  }
  absl::StrAppend(&out, "data: ", chunk.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                  cr ? "\r\n" : "\n");
}

}  // namespace tpserve
