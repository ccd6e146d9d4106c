// UpstreamCall over Beast: take an idle connection (or resolve -> connect) -> write -> read the
// head -> read body pieces into a fixed buffer (buffer_body), each forwarded as it is parsed ->
// put the connection back. Tested by tests/upstream_call_test.cc and tests/router_test.sh.
#include "coordinator/router/upstream_call.h"

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio/bind_executor.hpp"
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
      : strand_(std::move(strand)),
        request_(std::move(request)),
        endpoint_(*request_.endpoint),
        callbacks_(std::move(callbacks)),
        resolver_(strand_) {
    req_.method(request_.method == "GET" ? http::verb::get : http::verb::post);
    req_.target(request_.target);
    req_.version(11);
    req_.keep_alive(true);
    req_.set(http::field::host, endpoint_.host_header());
    req_.set(http::field::user_agent, "tpserve-router");
    if (req_.method() == http::verb::post) req_.set(http::field::content_type, "application/json");
    if (!request_.authorization.empty()) req_.set(http::field::authorization, request_.authorization);
    req_.body() = std::move(request_.body);
    req_.prepare_payload();
  }

  void Run() {
    connection_ = endpoint_.TakeIdle(absl::Now());
    if (connection_ == nullptr) return Connect();
    reused_ = true;
    if (callbacks_.connected) {
      callbacks_.connected(/*reused=*/true);
      if (done_) return;
    }
    Send();
  }

  void Cancel() override {
    if (done_) return;
    done_ = true;
    resolver_.cancel();
    Close();
  }

 private:
  // The stream's own executor is the io_context's (a pooled connection serves calls on other
  // strands); every handler is bound to this call's strand.
  template <class Handler>
  auto OnStrand(Handler&& handler) {
    return asio::bind_executor(strand_, std::forward<Handler>(handler));
  }

  void Connect() {
    reused_ = false;
    connection_ = std::make_unique<UpstreamConnection>(strand_.get_inner_executor());
    connection_->stream.expires_after(ToChrono(request_.connect_timeout));
    resolver_.async_resolve(endpoint_.host(), std::to_string(endpoint_.port()),
                            OnStrand([self = shared_from_this()](beast::error_code ec,
                                                                 tcp::resolver::results_type results) {
                              self->OnResolve(ec, std::move(results));
                            }));
  }

  void OnResolve(beast::error_code ec, tcp::resolver::results_type results) {
    if (done_) return;
    if (ec) return Fail("resolving the host", ec);
    connection_->stream.expires_after(ToChrono(request_.connect_timeout));
    connection_->stream.async_connect(
        results, OnStrand([self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
          self->OnConnect(ec);
        }));
  }

  void OnConnect(beast::error_code ec) {
    if (done_) return;
    if (ec) return Fail("connecting", ec);
    if (callbacks_.connected) {
      callbacks_.connected(/*reused=*/false);
      if (done_) return;
    }
    Send();
  }

  void Send() {
    parser_.emplace();
    // No limit. Not boost::none: Boost 1.74 compares a Content-Length with the optional, and
    // any length is "greater" than none.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    parser_->header_limit(64 << 10);
    buffer_.clear();
    connection_->stream.expires_after(ToChrono(request_.response_timeout));
    http::async_write(connection_->stream, req_,
                      OnStrand([self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); }));
  }

  void OnWrite(beast::error_code ec) {
    if (done_) return;
    if (ec) return FailBeforeResponse("sending the request", ec);
    http::async_read_header(connection_->stream, buffer_, *parser_,
                            OnStrand([self = shared_from_this()](beast::error_code ec, size_t) { self->OnHead(ec); }));
  }

  void OnHead(beast::error_code ec) {
    if (done_) return;
    if (ec) return FailBeforeResponse("reading the response head", ec);
    const auto& head = parser_->get();
    callbacks_.head(static_cast<int>(head.result_int()), std::string(head[http::field::content_type]));
    ReadBody();
  }

  void ReadBody() {
    if (done_) return;
    if (parser_->is_done()) {
      done_ = true;
      // Read whole: the connection is free for the next call unless the server said close (or
      // sent more than this response, which nothing asked for).
      if (parser_->keep_alive() && buffer_.size() == 0) endpoint_.PutIdle(std::move(connection_), absl::Now());
      return callbacks_.end(absl::OkStatus());
    }
    parser_->get().body().data = piece_;
    parser_->get().body().size = sizeof(piece_);
    connection_->stream.expires_after(ToChrono(request_.response_timeout));
    http::async_read_some(connection_->stream, buffer_, *parser_,
                          OnStrand([self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); }));
  }

  void OnBody(beast::error_code ec) {
    if (done_) return;
    if (ec == http::error::need_buffer) ec = {};  // the piece buffer is full: forward it, read on
    const size_t got = sizeof(piece_) - parser_->get().body().size;
    if (got > 0) {
      callbacks_.data(std::string(piece_, got));
      if (done_) return;
    }
    if (ec) return Fail("reading the response body", ec);
    ReadBody();
  }

  // A pooled connection that breaks before any byte of the response was closed by the server
  // while idle (its keep-alive timer, a restart): the request goes once more on a new
  // connection. A timeout is the server's, not the connection's: it fails.
  void FailBeforeResponse(absl::string_view what, beast::error_code ec) {
    if (reused_ && ec != beast::error::timeout && !parser_->got_some() && buffer_.size() == 0) {
      Close();
      if (callbacks_.stale) {
        callbacks_.stale();
        if (done_) return;
      }
      return Connect();
    }
    Fail(what, ec);
  }

  void Fail(absl::string_view what, beast::error_code ec) {
    done_ = true;
    const std::string message = absl::StrCat(what, " (", endpoint_.host(), ":", endpoint_.port(),
                                             reused_ ? ", a reused connection" : "", "): ", ec.message());
    Close();
    callbacks_.end(ec == beast::error::timeout ? absl::DeadlineExceededError(message)
                                               : absl::UnavailableError(message));
  }

  void Close() {
    if (connection_ == nullptr) return;
    beast::error_code ignored;
    connection_->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    connection_->stream.close();
    connection_.reset();
  }

  const Strand strand_;
  UpstreamRequest request_;
  UpstreamEndpoint& endpoint_;
  UpstreamCallbacks callbacks_;
  tcp::resolver resolver_;
  std::unique_ptr<UpstreamConnection> connection_;  // null once closed or back in the pool
  bool reused_ = false;                             // connection_ came from the pool
  beast::flat_buffer buffer_;
  http::request<http::string_body> req_;
  std::optional<http::response_parser<http::buffer_body>> parser_;  // one per response
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
