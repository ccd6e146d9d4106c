// A grpc:// or grpcs:// backend server as the router reaches it: one gRPC channel (HTTP/2: every
// call to the server multiplexed on one connection, which gRPC reopens when it breaks; for
// grpcs:// over TLS, the server's certificate verified against the configured CAs) and its
// tpserve.v1 stub, shared by the models that list the server; and the calls in flight on it,
// so that the router can cancel them and wait for their last callbacks before it stops.
// Thread-safe. Tested through the router by tests/router_grpc_test.cc and tests/router_grpc_test.sh.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/router/client_certificate.h"
#include "grpcpp/grpcpp.h"
#include "proto/tpserve.grpc.pb.h"

namespace tpserve {

class GrpcBackend {
 public:
  // `host` as the URL names it (an IPv6 address in brackets); nothing connects until a call.
  // `tls`: none for grpc:// (plaintext); grpcs:// takes no insecure_skip_verify (the router
  // config refuses it). INVALID_ARGUMENT starting with the config key ("tls_ca_file", "tls_cert_file",
  // "tls_key_file") when TLS's CA file (or the system's) cannot be read as PEM certificates, or
  // the client certificate and its key cannot (client_certificate.h).
  static absl::StatusOr<std::unique_ptr<GrpcBackend>> Create(std::string host, int port, const std::optional<BackendTls>& tls);
  GrpcBackend(const GrpcBackend&) = delete;
  GrpcBackend& operator=(const GrpcBackend&) = delete;

  // "host:port", as the URL names the server.
  const std::string& target() const { return target_; }
  // `status` (a call's, from gRPC) with what to change added where the call failed in setting up
  // TLS (grpcs://): the CAs the router trusts for a failed handshake, the name checked for a
  // certificate that does not hold it, the client certificate for a connection the backend
  // closed while none is configured; else unchanged.
  absl::Status Described(absl::Status status) const;
  v1::TpServe::Stub& stub() const { return *stub_; }
  // The channel's connection is up now: a call started now goes out on it at once.
  bool connected() const;

  // A call in flight on the channel. TryCancel must be safe at any time until it is untracked.
  class Call {
   public:
    virtual ~Call() = default;
    virtual void TryCancel() = 0;
  };
  // A call whose callbacks gRPC may still run: Track before starting it, Untrack in its last
  // callback (after which nothing of it may run on the router's threads). Track is false once
  // Shutdown began: the call must not start.
  bool Track(const std::shared_ptr<Call>& call);
  void Untrack(const Call* call);
  // Cancels every tracked call and waits until each was untracked. No call starts afterwards.
  void Shutdown();

 private:
  // `tls`: for the server name and whether a client certificate is presented (the credentials
  // carry the files' contents).
  GrpcBackend(std::string host, int port, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
              std::string trust, const BackendTls& tls);

  const std::string target_;
  // grpcs://: where the CAs came from ("tls_ca_file F", "the system's CAs (F)"); empty: plaintext.
  const std::string trust_;
  const std::string checked_name_;  // for errors: "NAME (tls_server_name)" or "HOST (the URL's host)"
  const bool client_certificate_;  // grpcs://: a client certificate is presented
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TpServe::Stub> stub_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<const Call*, std::weak_ptr<Call>> calls_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tpserve
