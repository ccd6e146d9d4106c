// The HTTP transport's listening socket: binds, accepts every waiting connection in one
// turn of the I/O loop, and tells each new connection whether it is over the connection
// limit. Internal to http_transport.cc; tested through it by tests/http_transport_test.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "absl/status/status.h"

namespace tpserve {

class HttpAcceptor : public std::enable_shared_from_this<HttpAcceptor> {
 public:
  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;
  // Called on the acceptor's strand with each accepted socket and the strand it runs on;
  // `over_limit`: max_connections were already open when it came, so it is to be refused.
  using OnAccept = std::function<void(boost::asio::ip::tcp::socket socket, Strand strand, bool over_limit)>;

  // `open_connections` counts the connections open now (OnAccept's included once it returns).
  HttpAcceptor(boost::asio::io_context& ioc, int max_connections, std::function<int64_t()> open_connections,
               OnAccept on_accept);

  // Listens on host:port (0: a free port, written to *bound_port). UNAVAILABLE when it cannot.
  absl::Status Bind(const std::string& host, int port, int* bound_port);
  // Starts accepting; runs until Close().
  void Accept();
  // Stops accepting (on the acceptor's strand); connections already accepted are not touched.
  void Close();

 private:
  // Connections taken per turn of the I/O loop at most (about 20 us each).
  static constexpr int kAcceptBatch = 256;

  // `strand`: the next connection's.
  void Accept(Strand strand);
  void Serve(boost::asio::ip::tcp::socket socket, Strand strand);

  boost::asio::io_context& ioc_;
  const int max_connections_;
  const std::function<int64_t()> open_connections_;
  const OnAccept on_accept_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_;
};

}  // namespace tpserve
