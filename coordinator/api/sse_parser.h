// A Server-Sent Events reader (text/event-stream), header-only: it needs no more than
// abseil's strings, so that tpbench's HTTP client and the router can both include it.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// Incremental Server-Sent Events parser (WHATWG HTML, "server-sent events"): bytes go in
// as they arrive, in pieces of any size; each event's data lines come out joined by '\n'.
// Lines end in "\n" or "\r\n"; "data:" may or may not be followed by a space; comments
// (":...") and the fields its users have no use for (event, id, retry) are skipped. Used by
// tpbench's OpenAI client and by the router's reading of an OpenAI stream for its gRPC port
// (coordinator/router/grpc_to_openai.h); tested through tests/tpbench_http_test.cc and
// tests/router_grpc_to_openai_test.cc.
class SseParser {
 public:
  // Returns false to stop: no further events are delivered.
  using EventFn = std::function<bool(const std::string& data)>;
  explicit SseParser(EventFn on_event) : on_event_(std::move(on_event)) {}

  // Returns false once on_event asked to stop.
  bool Feed(absl::string_view bytes) {
    pending_.append(bytes.data(), bytes.size());
    size_t start = 0;
    bool keep_going = true;
    for (size_t nl; keep_going && (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
      absl::string_view line(pending_.data() + start, nl - start);
      if (absl::EndsWith(line, "\r")) line.remove_suffix(1);
      keep_going = OnLine(line);
    }
    pending_.erase(0, start);
    return keep_going;
  }

  // End of stream. The spec drops an event that lacks its closing blank line; delivering
  // one whose data lines arrived whole is kinder to servers that end on a single "\n".
  // A partial last line is dropped.
  bool Finish() { return Dispatch(); }

 private:
  bool OnLine(absl::string_view line) {
    if (line.empty()) return Dispatch();
    if (line.front() == ':') return true;
    const size_t colon = line.find(':');
    const absl::string_view field = line.substr(0, colon);
    absl::string_view value = colon == absl::string_view::npos ? absl::string_view() : line.substr(colon + 1);
    if (absl::StartsWith(value, " ")) value.remove_prefix(1);
    if (field == "data") {
      if (has_data_) data_ += '\n';
      data_.append(value.data(), value.size());
      has_data_ = true;
    }
    return true;
  }

  bool Dispatch() {
    if (!has_data_) return true;
    has_data_ = false;
    const std::string data = std::move(data_);
    data_.clear();
    return on_event_(data);
  }

  EventFn on_event_;
  std::string pending_;  // bytes after the last complete line
  std::string data_;     // the current event's data so far
  bool has_data_ = false;
};

}  // namespace tpserve
