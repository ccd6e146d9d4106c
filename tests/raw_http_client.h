// A raw-socket HTTP/1.1 client for transport tests: sends exactly the bytes given, reads with
// poll() under deadlines, and parses responses (Content-Length, chunked, or delimited by the close).
// Used by tests/http_transport_test.cc.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tpserve {

// Bounds for things that must happen eventually: generous, so a loaded machine still passes;
// no test asserts how fast anything is.
constexpr absl::Duration kEventually = absl::Seconds(10);

struct RawHttpResponse {
  std::string status_line;
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  bool chunked = false;
  std::vector<std::string> chunks;  // the pieces of a chunked body, in order

  bool Has(const std::string& name) const { return headers.count(name) > 0; }
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// One client connection on a raw socket: sends exactly the bytes given, reads with poll() under
// a deadline, and parses responses (Content-Length, chunked, or delimited by the close).
class RawHttpClient {
 public:
  explicit RawHttpClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawHttpClient() { Close(); }
  RawHttpClient(const RawHttpClient&) = delete;
  RawHttpClient& operator=(const RawHttpClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  bool closed_by_server() const { return eof_; }
  // Bytes received and not yet consumed by ReadResponse.
  const std::string& unread() const { return buffer_; }

  bool Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Reads until the server closes the connection (EOF or reset); what arrives meanwhile stays
  // in unread(). False if it is still open at the deadline.
  bool WaitClosed(absl::Duration limit = kEventually) {
    const absl::Time deadline = absl::Now() + limit;
    while (!eof_) {
      if (!Fill(deadline)) return eof_;
    }
    return true;
  }

  // The next response; 1xx responses are returned on their own (no body).
  absl::StatusOr<RawHttpResponse> ReadResponse(absl::Duration limit = kEventually) {
    const absl::Time deadline = absl::Now() + limit;
    size_t head_end;
    while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill(deadline)) return Incomplete("the status line and headers");
    }
    RawHttpResponse r;
    const std::string head = buffer_.substr(0, head_end);
    size_t pos = head.find("\r\n");
    r.status_line = head.substr(0, pos);
    if (r.status_line.size() < 12 || !absl::StartsWith(r.status_line, "HTTP/1.") ||
        !absl::SimpleAtoi(r.status_line.substr(9, 3), &r.status)) {
      return absl::InternalError(absl::StrCat("bad status line: ", r.status_line));
    }
    while (pos != std::string::npos && pos < head.size()) {
      const size_t start = pos + 2;
      const size_t end = std::min(head.find("\r\n", start), head.size());
      const std::string line = head.substr(start, end - start);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) return absl::InternalError(absl::StrCat("bad header line: ", line));
      r.headers[absl::AsciiStrToLower(line.substr(0, colon))] =
          std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      pos = end;
    }
    size_t at = head_end + 4;
    if (r.status / 100 == 1 || r.status == 204 || r.status == 304) {
      buffer_.erase(0, at);
      return r;
    }
    if (absl::EqualsIgnoreCase(r.Header("transfer-encoding"), "chunked")) {
      r.chunked = true;
      while (true) {
        size_t line_end;
        while ((line_end = buffer_.find("\r\n", at)) == std::string::npos) {
          if (!Fill(deadline)) return Incomplete("a chunk size line");
        }
        uint64_t size;
        if (!absl::SimpleHexAtoi(buffer_.substr(at, line_end - at), &size)) {
          return absl::InternalError(absl::StrCat("bad chunk size line: ", buffer_.substr(at, line_end - at)));
        }
        at = line_end + 2;
        while (buffer_.size() < at + size + 2) {
          if (!Fill(deadline)) return Incomplete("a chunk");
        }
        if (buffer_.compare(at + size, 2, "\r\n") != 0) return absl::InternalError("a chunk without its CRLF");
        if (size == 0) {
          at += 2;
          break;
        }
        r.chunks.push_back(buffer_.substr(at, size));
        r.body += r.chunks.back();
        at += size + 2;
      }
    } else if (r.Has("content-length")) {
      size_t length;
      if (!absl::SimpleAtoi(r.Header("content-length"), &length)) return absl::InternalError("bad Content-Length");
      while (buffer_.size() < at + length) {
        if (!Fill(deadline)) return Incomplete("the body");
      }
      r.body = buffer_.substr(at, length);
      at += length;
    } else {  // delimited by the end of the connection
      while (!eof_) {
        if (!Fill(deadline) && !eof_) return Incomplete("the close that ends the body");
      }
      r.body = buffer_.substr(at);
      at = buffer_.size();
    }
    buffer_.erase(0, at);
    return r;
  }

  // Reads until `n` bytes are unread (or the deadline, or the end of the connection).
  bool ReadAtLeast(size_t n, absl::Duration limit = kEventually) {
    const absl::Time deadline = absl::Now() + limit;
    while (buffer_.size() < n) {
      if (!Fill(deadline)) return false;
    }
    return true;
  }

 private:
  absl::Status Incomplete(absl::string_view what) const {
    return absl::DeadlineExceededError(absl::StrCat("no complete response (", what,
                                                    "): ", eof_ ? "the server closed the connection" : "timed out",
                                                    "; received so far: \"", buffer_, "\""));
  }

  // Waits for bytes until `deadline`; appends them. False on timeout or at the end of the
  // connection (then eof_ is set).
  bool Fill(absl::Time deadline) {
    if (eof_ || fd_ < 0) return false;
    while (true) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return false;
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) continue;  // re-checks the deadline
      char data[16384];
      const ssize_t n = ::recv(fd_, data, sizeof(data), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // 0: closed; ECONNRESET: closed with unread input
        eof_ = true;
        return false;
      }
      buffer_.append(data, static_cast<size_t>(n));
      return true;
    }
  }

  int fd_ = -1;
  std::string buffer_;
  bool eof_ = false;
};

}  // namespace tpserve
