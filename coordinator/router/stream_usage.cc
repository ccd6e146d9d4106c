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

// What one scan of a data line's JSON finds of the keys StreamUsage reads: a cheap test that says
// which lines are worth parsing. (Inside a JSON string a key's quotes are escaped.)
struct LineKeys {
  bool usage = false;         // a "usage" key (Strip takes it out, whatever its value)
  bool usage_object = false;  // one followed by an object (not null): the only usage worth reading
  bool finish = false;        // "finish_reason" with a string (not null): a chunk that finishes a choice
};

// Whether the JSON value after the key that ends at `i` in `data` starts with `first`.
bool ValueStartsWith(absl::string_view data, size_t i, char first) {
  while (i < data.size() && std::isspace(static_cast<unsigned char>(data[i]))) ++i;
  if (i >= data.size() || data[i] != ':') return false;
  ++i;
  while (i < data.size() && std::isspace(static_cast<unsigned char>(data[i]))) ++i;
  return i < data.size() && data[i] == first;
}

// Every key starts at a quote: one pass over the quotes finds both.
LineKeys ScanKeys(absl::string_view data) {
  constexpr absl::string_view kUsage = "\"usage\"", kFinish = "\"finish_reason\"";
  LineKeys keys;
  for (size_t at = data.find('"'); at != absl::string_view::npos; at = data.find('"', at + 1)) {
    const absl::string_view rest = data.substr(at);
    if (absl::StartsWith(rest, kUsage)) {
      keys.usage = true;
      keys.usage_object = keys.usage_object || ValueStartsWith(data, at + kUsage.size(), '{');
    } else if (absl::StartsWith(rest, kFinish)) {
      keys.finish = keys.finish || ValueStartsWith(data, at + kFinish.size(), '"');
    }
  }
  return keys;
}

nlohmann::ordered_json ParseChunk(absl::string_view data) {
  return nlohmann::ordered_json::parse(data.begin(), data.end(), nullptr, /*allow_exceptions=*/false);
}

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

template <class OnLine, class OnPass>
void StreamUsage::Split(absl::string_view piece, OnLine on_line, OnPass pass) {
  while (!piece.empty()) {
    const size_t newline = piece.find('\n');
    if (newline == absl::string_view::npos) {
      if (skipping_) return pass(piece);
      partial_.append(piece.data(), piece.size());
      if (partial_.size() > kMaxLine) {  // not a usage chunk: not held until its end
        pass(partial_);
        partial_.clear();
        skipping_ = true;
      }
      return;
    }
    const absl::string_view line = piece.substr(0, newline + 1);
    piece.remove_prefix(newline + 1);
    if (skipping_) {
      pass(line);
      skipping_ = false;
      drop_blank_ = false;
    } else if (partial_.empty()) {
      on_line(line);
    } else {
      partial_.append(line.data(), line.size());
      on_line(partial_);
    }
    partial_.clear();
  }
}

void StreamUsage::Feed(absl::string_view piece) {
  Split(
      piece, [this](absl::string_view line) { Line(line.substr(0, line.size() - 1)); }, [](absl::string_view) {});
}

bool StreamUsage::ToNote(bool finishes) const { return !head_.has_value() || finishes; }

void StreamUsage::Note(const nlohmann::ordered_json& chunk) {
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
  const LineKeys keys = ScanKeys(line);
  const bool note = ToNote(keys.finish);
  if (!note && !keys.usage_object) return;
  const nlohmann::ordered_json chunk = ParseChunk(line);
  if (note) Note(chunk);
  if (!keys.usage_object) return;
  if (std::optional<UsageTokens> usage = ReadUsageOf(chunk)) usage_ = usage;
}

std::string StreamUsage::Strip(absl::string_view piece) {
  std::string out;
  Split(
      piece, [this, &out](absl::string_view line) { StripLine(line, out); },
      [&out](absl::string_view bytes) { out.append(bytes.data(), bytes.size()); });
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
  const LineKeys keys = is_data ? ScanKeys(data) : LineKeys{};
  const bool note = is_data && ToNote(keys.finish);
  if (!note && !keys.usage) {
    out.append(line.data(), line.size());
    return;
  }
  nlohmann::ordered_json chunk = ParseChunk(data);
  if (note) Note(chunk);
  if (!keys.usage || !chunk.is_object() || !chunk.contains("usage")) {
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
