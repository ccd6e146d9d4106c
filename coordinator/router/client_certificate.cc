// ReadClientCertificate: the PEM files read, parsed with OpenSSL and the key matched to the
// certificate. Tested by tests/router_tls_test.sh.
#include "coordinator/router/client_certificate.h"

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/api/grpc_server_start.h"
#include "openssl/bio.h"
#include "openssl/err.h"
#include "openssl/pem.h"
#include "openssl/x509.h"

namespace tpserve {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioFree> MemoryBio(const std::string& text) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// OpenSSL's reason for the last failure on this thread (its queue emptied: later TLS calls on
// the thread must not find it).
std::string OpenSslReason() {
  char reason[256] = "unknown error";
  if (const unsigned long e = ERR_peek_last_error(); e != 0) ERR_error_string_n(e, reason, sizeof(reason));
  ERR_clear_error();
  return reason;
}

// An encrypted key would otherwise make OpenSSL prompt for its passphrase on the terminal.
int NoPassphrase(char*, int, int, void*) { return -1; }

}  // namespace

absl::StatusOr<ClientCertificate> ReadClientCertificate(const std::string& cert_file, const std::string& key_file) {
  absl::StatusOr<std::string> chain = ReadPemFile("tls_cert_file", cert_file, "CERTIFICATE");
  if (!chain.ok()) return chain.status();
  // "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY".
  absl::StatusOr<std::string> key = ReadPemFile("tls_key_file", key_file, "");
  if (!key.ok()) return key.status();
  if (key->find("PRIVATE KEY-----") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_key_file: ", key_file, " holds no PEM private key (-----BEGIN PRIVATE KEY-----)"));
  }
  ERR_clear_error();
  std::unique_ptr<X509, X509Free> certificate(
      PEM_read_bio_X509(MemoryBio(*chain).get(), nullptr, NoPassphrase, nullptr));
  if (certificate == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("tls_cert_file: ", cert_file, ": its first certificate cannot be ",
                                                   "parsed (", OpenSslReason(), ")"));
  }
  std::unique_ptr<EVP_PKEY, PkeyFree> private_key(
      PEM_read_bio_PrivateKey(MemoryBio(*key).get(), nullptr, NoPassphrase, nullptr));
  if (private_key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("tls_key_file: ", key_file, " cannot be read as a private key (",
                                                   OpenSslReason(), "); it must be PEM and not encrypted"));
  }
  if (X509_check_private_key(certificate.get(), private_key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("tls_key_file: ", key_file,
                                                   " is not the private key of the certificate in tls_cert_file ",
                                                   cert_file, "; give the key that certificate was issued for"));
  }
  return ClientCertificate{*std::move(chain), *std::move(key)};
}

}  // namespace tpserve
