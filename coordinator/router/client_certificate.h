// How the router speaks TLS to an https:// (upstream_endpoint.h) or grpcs:// (grpc_backend.h)
// backend, as its backend object says (tls_* keys), and the client certificate it names
// (tls_cert_file, tls_key_file), read when the router starts and presented to a backend that
// asks for one (mutual TLS). Tested by tests/router_tls_test.sh (both kinds of backend, and the
// start-up errors).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tpserve {

struct BackendTls {
  // The backend's certificate is verified against ca_file (PEM) where set, else the system's CA
  // store (OpenSSL's default file), and its name against server_name where set, else the host.
  std::string ca_file;
  bool insecure_skip_verify = false;  // https:// only: no certificate or name check
  // Set: the router's client certificate chain and its key (PEM), presented when the backend
  // asks for one; both or neither.
  std::string cert_file;
  std::string key_file;
  std::string server_name;

  // What makes two connections to one server differ (a map key's part).
  std::string Key() const {
    return ca_file + " " + cert_file + " " + key_file + " " + server_name + (insecure_skip_verify ? " insecure" : "");
  }
};

struct ClientCertificate {
  std::string chain_pem;  // the certificate chain, the router's own certificate first
  std::string key_pem;    // its private key, not encrypted
};

// Reads both files and checks that the key is the certificate's. INVALID_ARGUMENT starting with
// the config key ("tls_cert_file: ", "tls_key_file: ") and naming the file when it cannot be
// read, holds no PEM certificate (no unencrypted PEM private key), or when the key does not
// belong to the certificate; a backend would refuse the handshake much later otherwise.
absl::StatusOr<ClientCertificate> ReadClientCertificate(const std::string& cert_file, const std::string& key_file);

}  // namespace tpserve
