// The client certificate a backend object names (tls_cert_file, tls_key_file), read when the
// router starts for its https:// (upstream_endpoint.h) and grpcs:// (grpc_backend.h) backends,
// which present it to a backend that asks for one (mutual TLS). Tested by
// tests/router_tls_test.sh (both kinds of backend, and the start-up errors).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tpserve {

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
