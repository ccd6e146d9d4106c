// GrpcBackend: the channel's settings and the calls in flight. Tested through the router by
// tests/router_grpc_test.cc and tests/router_grpc_test.sh.
#include "coordinator/router/grpc_backend.h"

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/api/grpc_server_start.h"
#include "coordinator/router/client_certificate.h"
#include "openssl/x509.h"

namespace tpserve {

absl::StatusOr<std::unique_ptr<GrpcBackend>> GrpcBackend::Create(std::string host, int port,
                                                                 const std::optional<BackendTls>& given) {
  if (!given.has_value()) {
    return std::unique_ptr<GrpcBackend>(
        new GrpcBackend(std::move(host), port, grpc::InsecureChannelCredentials(), "", BackendTls{}));
  }
  const BackendTls& tls = *given;
  // gRPC's own default roots are a bundle of its install (roots.pem), not the system's store the
  // https:// backends trust: read OpenSSL's default CA file, as they do.
  const bool system = tls.ca_file.empty();
  const std::string file = system ? X509_get_default_cert_file() : tls.ca_file;
  absl::StatusOr<std::string> cas = ReadPemFile("tls_ca_file", file, "CERTIFICATE");
  if (!cas.ok()) {
    if (!system) return cas.status();
    return absl::InvalidArgumentError(absl::StrCat("tls_ca_file (not set): cannot load the system's CA certificates (",
                                                   cas.status().message(), "); install ca-certificates or set ",
                                                   "tls_ca_file"));
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = *std::move(cas);
  if (!tls.cert_file.empty()) {
    absl::StatusOr<ClientCertificate> client = ReadClientCertificate(tls.cert_file, tls.key_file);
    if (!client.ok()) return client.status();
    ssl.pem_cert_chain = std::move(client->chain_pem);
    ssl.pem_private_key = std::move(client->key_pem);
  }
  return std::unique_ptr<GrpcBackend>(new GrpcBackend(
      std::move(host), port, grpc::SslCredentials(ssl),
      system ? absl::StrCat("the system's CAs (", file, ")") : absl::StrCat("tls_ca_file ", file), tls));
}

absl::Status GrpcBackend::Described(absl::Status status) const {
  if (trust_.empty() || status.code() != absl::StatusCode::kUnavailable) return status;
  const std::string message = absl::AsciiStrToLower(status.message());
  std::string why;
  if (absl::StrContains(message, "is not in peer certificate")) {
    why = absl::StrCat("the backend's certificate does not hold the name checked, ", checked_name_,
                       "; set tls_server_name to a name it holds");
  } else if (absl::StrContains(message, "handshake")) {
    why = absl::StrCat("the backend's certificate is verified against ", trust_,
                       ": is it signed by one of them, and does it name ", checked_name_, "?");
  } else if (!client_certificate_ && absl::StrContains(message, "failed to connect") &&
             absl::StrContains(message, "socket closed")) {
    // A server that demands a client certificate ends the connection once the handshake is
    // through (TLS 1.3), before HTTP/2 starts; gRPC reports only the closed socket.
    why = "the backend closed the connection as it was set up: does it require a client certificate (serve "
          "--grpc-tls-client-ca-file)? Set tls_cert_file and tls_key_file";
  }
  if (why.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(status.message(), " (grpcs://: ", why, ")"));
}

GrpcBackend::GrpcBackend(std::string host, int port, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                         std::string trust, const BackendTls& tls)
    : target_(absl::StrCat(host, ":", port)),
      trust_(std::move(trust)),
      checked_name_(tls.server_name.empty() ? absl::StrCat(host, " (the URL's host)")
                                            : absl::StrCat(tls.server_name, " (tls_server_name)")),
      client_certificate_(!tls.cert_file.empty()) {
  grpc::ChannelArguments args;
  // After the connection fails (the server stopped or restarted), gRPC waits before it tries
  // again and fails calls at once meanwhile; its default wait grows to 120 s. A backend that
  // is back should take requests as soon as the router's ejection (5 s) ends, so retry at
  // least every second.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Responses are a few tokens each; requests carry whole chats (serve takes up to its own
  // --max-receive-message-bytes).
  args.SetMaxSendMessageSize(-1);
  args.SetMaxReceiveMessageSize(-1);
  // A channel of its own per backend server, not one shared through gRPC's global pool of
  // connections with another channel to the same server.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // tls_server_name: the name the certificate must hold, and the SNI, in place of the host.
  if (!tls.server_name.empty()) args.SetString(GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, tls.server_name);
  channel_ = grpc::CreateCustomChannel(target_, credentials, args);
  stub_ = v1::TpServe::NewStub(channel_);
}

bool GrpcBackend::connected() const { return channel_->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY; }

bool GrpcBackend::Track(const std::shared_ptr<Call>& call) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  calls_.emplace(call.get(), call);
  return true;
}

void GrpcBackend::Untrack(const Call* call) {
  absl::MutexLock lock(&mu_);
  calls_.erase(call);
}

void GrpcBackend::Shutdown() {
  std::vector<std::shared_ptr<Call>> running;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (const auto& [key, weak] : calls_) {
      if (std::shared_ptr<Call> call = weak.lock()) running.push_back(std::move(call));
    }
  }
  // Outside the lock: gRPC may run a call's last callback (which untracks it) inside TryCancel.
  for (const std::shared_ptr<Call>& call : running) call->TryCancel();
  running.clear();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](absl::flat_hash_map<const Call*, std::weak_ptr<Call>>* calls) { return calls->empty(); }, &calls_));
}

}  // namespace tpserve
