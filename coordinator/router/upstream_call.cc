// UpstreamCall over Beast: take an idle connection (or resolve -> connect -> TLS handshake for
// https://) -> write -> read the head -> read the socket and parse what each read brought into a
// fixed buffer (buffer_body), forwarded as one piece -> put the connection back. Tested by
// tests/upstream_call_test.cc and tests/router_test.sh.
#include "coordinator/router/upstream_call.h"

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "openssl/err.h"
#include "openssl/ssl.h"
#include "openssl/x509_vfy.h"
#include "boost/asio/bind_executor.hpp"
#include "boost/asio/ip/address.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace tpserve {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::chrono::steady_clock::duration ToChrono(absl::Duration d) { return absl::ToChronoMilliseconds(d); }

// What to change where an https:// backend ended the connection with a TLS alert about the
// router's client certificate (over TLS 1.3 the client's handshake is through before the
// server checks it, so the alert comes at the first read); empty for any other error.
std::string ClientCertificateHint(const beast::error_code& ec, const BackendTls& tls) {
  if (ec.category() != asio::error::get_ssl_category()) return "";
  switch (ERR_GET_REASON(static_cast<unsigned long>(ec.value()))) {
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
      if (!tls.cert_file.empty()) return "";
      return " (the backend requires a client certificate: set tls_cert_file and tls_key_file)";
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
      if (tls.cert_file.empty()) return "";
      return absl::StrCat(" (the backend refused the client certificate in tls_cert_file ", tls.cert_file,
                          ": is it signed by a CA the backend trusts?)");
    default:
      return "";
  }
}

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

  // Calls f with the connection's HTTP stream: the TLS stream, or the TCP one.
  template <class F>
  void WithStream(F&& f) {
    if (connection_->tls) {
      f(*connection_->tls);
    } else {
      f(*connection_->plain);
    }
  }

  void Connect() {
    reused_ = false;
    connection_ = std::make_unique<UpstreamConnection>(strand_.get_inner_executor(), endpoint_.tls_context());
    connection_->tcp().expires_after(ToChrono(request_.connect_timeout));
    resolver_.async_resolve(endpoint_.host(), std::to_string(endpoint_.port()),
                            OnStrand([self = shared_from_this()](beast::error_code ec,
                                                                 tcp::resolver::results_type results) {
                              self->OnResolve(ec, std::move(results));
                            }));
  }

  void OnResolve(beast::error_code ec, tcp::resolver::results_type results) {
    if (done_) return;
    if (ec) return Fail("resolving the host", ec);
    connection_->tcp().expires_after(ToChrono(request_.connect_timeout));
    connection_->tcp().async_connect(
        results, OnStrand([self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
          self->OnConnect(ec);
        }));
  }

  void OnConnect(beast::error_code ec) {
    if (done_) return;
    if (ec) return Fail("connecting", ec);
    // A request goes in one write and waits for its answer: Nagle's algorithm could only hold
    // its last segment back until the server acknowledged the others.
    beast::error_code ignored;
    connection_->tcp().socket().set_option(tcp::no_delay(true), ignored);
    if (connection_->tls) return Handshake();
    Connected();
  }

  // TLS: SNI, and the certificate's name checked against the host (or tls_server_name) by
  // OpenSSL itself during verification (SSL_set1_host; an IP address against the certificate's
  // IP entries), which names a mismatch in the verify result where asio's
  // host_name_verification callback would only say "certificate verify failed".
  void Handshake() {
    SSL* ssl = connection_->tls->native_handle();
    const std::string& name = endpoint_.tls_server_name();
    beast::error_code not_ip;
    asio::ip::make_address(name, not_ip);
    if (not_ip) SSL_set_tlsext_host_name(ssl, name.c_str());  // no SNI for an IP (RFC 6066)
    if (!endpoint_.tls_options().insecure_skip_verify) {
      if (not_ip) {
        SSL_set1_host(ssl, name.c_str());
      } else {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
      }
    }
    connection_->tcp().expires_after(ToChrono(request_.connect_timeout));
    connection_->tls->async_handshake(asio::ssl::stream_base::client,
                                      OnStrand([self = shared_from_this()](beast::error_code ec) {
                                        self->OnHandshake(ec);
                                      }));
  }

  void OnHandshake(beast::error_code ec) {
    if (done_) return;
    if (!ec) return Connected();
    const long verify = SSL_get_verify_result(connection_->tls->native_handle());
    if (verify == X509_V_OK) return Fail("the TLS handshake", ec);
    const BackendTls& tls = endpoint_.tls_options();
    if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH) {
      return Fail("the TLS handshake", ec,
                  absl::StrCat("the backend's certificate failed verification: ",
                               X509_verify_cert_error_string(verify), " (the name checked: ",
                               endpoint_.tls_server_name(),
                               tls.server_name.empty() ? ", the URL's host" : ", tls_server_name",
                               "; set tls_server_name to a name the certificate holds)"));
    }
    Fail("the TLS handshake", ec,
         absl::StrCat("the backend's certificate failed verification: ", X509_verify_cert_error_string(verify),
                      " (trusted CAs: ", tls.ca_file.empty() ? "the system's store" : "tls_ca_file " + tls.ca_file,
                      "; set tls_ca_file to the CA that signed the backend's certificate)"));
  }

  void Connected() {
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
    connection_->tcp().expires_after(ToChrono(request_.response_timeout));
    WithStream([&](auto& stream) {
      http::async_write(stream, req_,
                        OnStrand([self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); }));
    });
  }

  void OnWrite(beast::error_code ec) {
    if (done_) return;
    if (ec) return FailBeforeResponse("sending the request", ec);
    WithStream([&](auto& stream) {
      http::async_read_header(
          stream, buffer_, *parser_,
          OnStrand([self = shared_from_this()](beast::error_code ec, size_t) { self->OnHead(ec); }));
    });
  }

  void OnHead(beast::error_code ec) {
    if (done_) return;
    if (ec) return FailBeforeResponse("reading the response head", ec);
    const auto& head = parser_->get();
    callbacks_.head(static_cast<int>(head.result_int()), std::string(head[http::field::content_type]));
    ReadBody();
  }

  // Parses every body byte the buffer holds into piece_ (eager: all the chunks that came with
  // the last read, not one chunk header or body per turn as Beast's read_some gives them),
  // forwards them as one piece, and reads the socket only when the buffer holds no more. A
  // chunk is forwarded with the read that completed it, never held for the next one.
  void ReadBody() {
    for (;;) {
      if (done_) return;
      if (parser_->is_done()) {
        done_ = true;
        // Read whole: the connection is free for the next call unless the server said close (or
        // sent more than this response, which nothing asked for).
        if (parser_->keep_alive() && buffer_.size() == 0) endpoint_.PutIdle(std::move(connection_), absl::Now());
        return callbacks_.end(absl::OkStatus());
      }
      parser_->eager(true);
      parser_->get().body().data = piece_;
      parser_->get().body().size = sizeof(piece_);
      beast::error_code ec;
      while (buffer_.size() > 0 && !parser_->is_done() && !ec) {
        const size_t used = parser_->put(buffer_.data(), ec);
        buffer_.consume(used);
        if (used == 0 && !ec) break;  // nothing it could take yet: read more
        if (ec == http::error::need_more) {
          ec = {};  // the rest of it comes with the next read
          break;
        }
        if (ec == http::error::need_buffer) ec = {};  // piece_ is full: forward it, then parse on
        if (parser_->get().body().size == 0) break;
      }
      const size_t got = sizeof(piece_) - parser_->get().body().size;
      if (got > 0) {
        callbacks_.data(std::string(piece_, got));
        if (done_) return;
      }
      if (ec) return Fail("reading the response body", ec);
      if (parser_->is_done() || (got == sizeof(piece_) && buffer_.size() > 0)) continue;
      break;
    }
    const size_t size = beast::read_size(buffer_, 65536);
    if (size == 0) return Fail("reading the response body", http::error::buffer_overflow);
    connection_->tcp().expires_after(ToChrono(request_.response_timeout));
    WithStream([&](auto& stream) {
      stream.async_read_some(buffer_.prepare(size), OnStrand([self = shared_from_this()](beast::error_code ec,
                                                                                       size_t n) {
        self->OnBody(ec, n);
      }));
    });
  }

  void OnBody(beast::error_code ec, size_t n) {
    if (done_) return;
    buffer_.commit(n);
    if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) {
      // The connection's end: the end of a body that runs to it (TLS closed without
      // close_notify, common, included); anything else is cut short.
      beast::error_code eof;
      parser_->put_eof(eof);
      if (!eof) {
        ec = {};
      } else if (ec == asio::error::eof) {
        ec = eof;  // "partial message", as Beast's own read says it
      }
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

  // `detail`: what failed, where it says more than ec.message().
  void Fail(absl::string_view what, beast::error_code ec, const std::string& detail = "") {
    done_ = true;
    const std::string message = absl::StrCat(what, " (", endpoint_.host(), ":", endpoint_.port(),
                                             reused_ ? ", a reused connection" : "", "): ",
                                             detail.empty() ? ec.message() : detail,
                                             ClientCertificateHint(ec, endpoint_.tls_options()));
    Close();
    callbacks_.end(ec == beast::error::timeout ? absl::DeadlineExceededError(message)
                                               : absl::UnavailableError(message));
  }

  // TLS connections too are just closed: a TLS shutdown would wait on the server's reply, and
  // the request needs nothing more from it.
  void Close() {
    if (connection_ == nullptr) return;
    beast::error_code ignored;
    connection_->tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
    connection_->tcp().close();
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
