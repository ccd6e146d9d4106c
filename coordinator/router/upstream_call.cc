// UpstreamCall over Beast: resolve -> connect -> write -> read the head -> read body pieces
// into a fixed buffer (buffer_body), each forwarded as it is parsed. Tested through the router
// by tests/router_test.sh.
#include "coordinator/router/upstream_call.h"

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace tpserve {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::chrono::steady_clock::duration ToChrono(absl::Duration d) { return absl::ToChronoMilliseconds(d); }

class BeastUpstreamCall : public UpstreamCall, public std::enable_shared_from_this<BeastUpstreamCall> {
 public:
  BeastUpstreamCall(Strand strand, UpstreamRequest request, UpstreamCallbacks callbacks)
      : request_(std::move(request)), callbacks_(std::move(callbacks)), resolver_(strand), stream_(strand) {
    req_.method(http::verb::post);
    req_.target(request_.target);
    req_.version(11);
    req_.set(http::field::host, absl::StrCat(request_.host, ":", request_.port));
    req_.set(http::field::user_agent, "tpserve-router");
    req_.set(http::field::content_type, "application/json");
    req_.set(http::field::connection, "close");
    if (!request_.authorization.empty()) req_.set(http::field::authorization, request_.authorization);
    req_.body() = std::move(request_.body);
    req_.prepare_payload();
    // No limit. Not boost::none: Boost 1.74 compares a Content-Length with the optional, and
    // any length is "greater" than none.
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
    parser_.header_limit(64 << 10);
  }

  void Run() {
    auto self = shared_from_this();
    stream_.expires_after(ToChrono(request_.connect_timeout));
    resolver_.async_resolve(request_.host, std::to_string(request_.port),
                            [self](beast::error_code ec, tcp::resolver::results_type results) {
                              self->OnResolve(ec, std::move(results));
                            });
  }

  void Cancel() override {
    if (done_) return;
    done_ = true;
    resolver_.cancel();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

 private:
  void OnResolve(beast::error_code ec, tcp::resolver::results_type results) {
    if (done_) return;
    if (ec) return Fail("resolving the host", ec);
    stream_.expires_after(ToChrono(request_.connect_timeout));
    stream_.async_connect(results, [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
      self->OnConnect(ec);
    });
  }

  void OnConnect(beast::error_code ec) {
    if (done_) return;
    if (ec) return Fail("connecting", ec);
    if (callbacks_.connected) {
      callbacks_.connected();
      if (done_) return;
    }
    stream_.expires_after(ToChrono(request_.response_timeout));
    http::async_write(stream_, req_, [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
  }

  void OnWrite(beast::error_code ec) {
    if (done_) return;
    if (ec) return Fail("sending the request", ec);
    http::async_read_header(stream_, buffer_, parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHead(ec); });
  }

  void OnHead(beast::error_code ec) {
    if (done_) return;
    if (ec) return Fail("reading the response head", ec);
    const auto& head = parser_.get();
    callbacks_.head(static_cast<int>(head.result_int()), std::string(head[http::field::content_type]));
    ReadBody();
  }

  void ReadBody() {
    if (done_) return;
    if (parser_.is_done()) {
      done_ = true;
      return callbacks_.end(absl::OkStatus());
    }
    parser_.get().body().data = piece_;
    parser_.get().body().size = sizeof(piece_);
    stream_.expires_after(ToChrono(request_.response_timeout));
    http::async_read_some(stream_, buffer_, parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
  }

  void OnBody(beast::error_code ec) {
    if (done_) return;
    if (ec == http::error::need_buffer) ec = {};  // the piece buffer is full: forward it, read on
    const size_t got = sizeof(piece_) - parser_.get().body().size;
    if (got > 0) {
      callbacks_.data(std::string(piece_, got));
      if (done_) return;
    }
    if (ec) return Fail("reading the response body", ec);
    ReadBody();
  }

  void Fail(absl::string_view what, beast::error_code ec) {
    done_ = true;
    const std::string message =
        absl::StrCat(what, " (", request_.host, ":", request_.port, "): ", ec.message());
    beast::error_code ignored;
    stream_.socket().close(ignored);
    callbacks_.end(ec == beast::error::timeout ? absl::DeadlineExceededError(message)
                                               : absl::UnavailableError(message));
  }

  UpstreamRequest request_;
  UpstreamCallbacks callbacks_;
  tcp::resolver resolver_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> req_;
  http::response_parser<http::buffer_body> parser_;
  char piece_[16384];
  bool done_ = false;  // ended, failed or cancelled: no more callbacks
};

}  // namespace

std::shared_ptr<UpstreamCall> UpstreamCall::Start(Strand strand, UpstreamRequest request,
                                                  UpstreamCallbacks callbacks) {
  auto call = std::make_shared<BeastUpstreamCall>(std::move(strand), std::move(request), std::move(callbacks));
  call->Run();
  return call;
}

}  // namespace tpserve
