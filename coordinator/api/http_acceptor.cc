// HttpAcceptor: the listening socket and its accept loop. Tested through the transport by
// tests/http_transport_test.cc.
#include "coordinator/api/http_acceptor.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using ErrorCode = boost::system::error_code;

HttpAcceptor::HttpAcceptor(asio::io_context& ioc, int max_connections, std::function<int64_t()> open_connections,
                           OnAccept on_accept)
    : ioc_(ioc),
      max_connections_(max_connections),
      open_connections_(std::move(open_connections)),
      on_accept_(std::move(on_accept)),
      acceptor_(asio::make_strand(ioc)),
      retry_(acceptor_.get_executor()) {}

absl::Status HttpAcceptor::Bind(const std::string& host, int port, int* bound_port) {
  ErrorCode ec;
  tcp::resolver resolver(ioc_);
  auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return absl::UnavailableError(absl::StrCat("HTTP: cannot resolve host \"", host, "\": ", ec.message()));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) acceptor_.non_blocking(true, ec);  // Accept's loop must not wait for connections
  if (ec) {
    return absl::UnavailableError(absl::StrCat("HTTP: cannot listen on ", host, ":", port, ": ", ec.message(),
                                               " (in use, or not an address of this machine)"));
  }
  *bound_port = acceptor_.local_endpoint().port();
  return absl::OkStatus();
}

void HttpAcceptor::Accept() { Accept(asio::make_strand(ioc_)); }

void HttpAcceptor::Close() {
  asio::post(acceptor_.get_executor(), [self = shared_from_this()] {
    ErrorCode ignored;
    self->acceptor_.close(ignored);
    self->retry_.cancel();
  });
}

void HttpAcceptor::Accept(Strand strand) {
  acceptor_.async_accept(strand, [self = shared_from_this(), strand](ErrorCode ec, tcp::socket s) {
    if (!self->acceptor_.is_open() || ec == asio::error::operation_aborted) return;
    if (ec) {  // e.g. out of file descriptors: try again shortly instead of spinning
      self->retry_.expires_after(std::chrono::milliseconds(50));
      self->retry_.async_wait([self](ErrorCode e) {
        if (!e) self->Accept();
      });
      return;
    }
    self->Serve(std::move(s), strand);
    // This handler runs again only after everything queued on the I/O threads meanwhile
    // (under load, a pump per stream): take the connections already waiting now instead
    // of one per round (a burst of 1000 arriving while others stream took seconds).
    Strand next = asio::make_strand(self->ioc_);
    for (int i = 1; i < kAcceptBatch; ++i) {
      tcp::socket more(next);
      self->acceptor_.accept(more, ec);  // non-blocking: would_block once none wait; errors go to async_accept
      if (ec) break;
      self->Serve(std::move(more), next);
      next = asio::make_strand(self->ioc_);
    }
    self->Accept(std::move(next));
  });
}

void HttpAcceptor::Serve(tcp::socket socket, Strand strand) {
  ErrorCode ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  // The connections open before this one; the callback (which makes the connection, and so
  // counts it) runs before the next is taken.
  const bool over_limit = open_connections_() >= max_connections_;
  on_accept_(std::move(socket), std::move(strand), over_limit);
}

}  // namespace tpserve
