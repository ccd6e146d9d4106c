// UpstreamEndpoint: the TLS context and the idle-connection pool. Tested by
// tests/upstream_call_test.cc and tests/router_test.sh.
#include "coordinator/router/upstream_endpoint.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/router/client_certificate.h"

namespace tpserve {

UpstreamConnection::UpstreamConnection(const boost::asio::any_io_executor& executor,
                                       boost::asio::ssl::context* tls_context) {
  if (tls_context != nullptr) {
    tls.emplace(executor, *tls_context);
  } else {
    plain.emplace(executor);
  }
}

UpstreamEndpoint::UpstreamEndpoint(std::string host, int port, ConnectionPoolOptions pool)
    : host_(std::move(host)), port_(port), pool_(pool) {}

absl::StatusOr<std::unique_ptr<UpstreamEndpoint>> UpstreamEndpoint::Tls(std::string host, int port,
                                                                        BackendTls tls,
                                                                        ConnectionPoolOptions pool) {
  namespace ssl = boost::asio::ssl;
  auto context = std::make_unique<ssl::context>(ssl::context::tls_client);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  boost::system::error_code ec;
  if (tls.insecure_skip_verify) {
    context->set_verify_mode(ssl::verify_none);
  } else {
    context->set_verify_mode(ssl::verify_peer);
    if (!tls.ca_file.empty()) {
      context->load_verify_file(tls.ca_file, ec);
      if (ec) {
        return absl::InvalidArgumentError(absl::StrCat("tls_ca_file: cannot load CA certificates from ", tls.ca_file,
                                                       " (", ec.message(), "); it must be a readable PEM file"));
      }
    } else {
      context->set_default_verify_paths(ec);
      if (ec) {
        return absl::InvalidArgumentError(absl::StrCat("tls_ca_file (not set): cannot load the system's CA ",
                                                       "certificates (", ec.message(),
                                                       "); install ca-certificates or set tls_ca_file"));
      }
    }
  }
  if (!tls.cert_file.empty()) {
    // Sent only when the backend asks for a certificate (OpenSSL's client side).
    absl::StatusOr<ClientCertificate> client = ReadClientCertificate(tls.cert_file, tls.key_file);
    if (!client.ok()) return client.status();
    context->use_certificate_chain(boost::asio::buffer(client->chain_pem), ec);
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat("tls_cert_file: cannot use the certificate chain in ",
                                                     tls.cert_file, " (", ec.message(), ")"));
    }
    context->use_private_key(boost::asio::buffer(client->key_pem), ssl::context::pem, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("tls_key_file: cannot use the private key in ", tls.key_file, " (", ec.message(), ")"));
    }
  }
  std::unique_ptr<UpstreamEndpoint> e(new UpstreamEndpoint(std::move(host), port, pool));
  e->tls_ = std::move(tls);
  e->tls_context_ = std::move(context);
  return e;
}

std::string UpstreamEndpoint::host_header() const {
  return port_ == (tls_context_ != nullptr ? 443 : 80) ? host_ : absl::StrCat(host_, ":", port_);
}

std::unique_ptr<UpstreamConnection> UpstreamEndpoint::TakeIdle(absl::Time now) {
  absl::MutexLock lock(&mu_);
  DropExpired(now);
  if (idle_.empty()) return nullptr;
  // The newest: the least likely to have been closed by the server's own idle timer.
  std::unique_ptr<UpstreamConnection> c = std::move(idle_.back());
  idle_.pop_back();
  return c;
}

void UpstreamEndpoint::PutIdle(std::unique_ptr<UpstreamConnection> connection, absl::Time now) {
  connection->tcp().expires_never();
  connection->idle_since = now;
  absl::MutexLock lock(&mu_);
  DropExpired(now);
  if (idle_.size() >= pool_.max_idle) return;  // closed as `connection` goes
  idle_.push_back(std::move(connection));
}

size_t UpstreamEndpoint::idle_count() const {
  absl::MutexLock lock(&mu_);
  return idle_.size();
}

void UpstreamEndpoint::DropExpired(absl::Time now) {
  size_t expired = 0;
  while (expired < idle_.size() && now - idle_[expired]->idle_since > pool_.idle_timeout) ++expired;
  idle_.erase(idle_.begin(), idle_.begin() + static_cast<std::ptrdiff_t>(expired));
}

}  // namespace tpserve
