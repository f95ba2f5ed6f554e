// The certificates of a strata cluster's mutual TLS (proto/grpc_tls.h):
// one CA and, per name (coordinator, w0, w1, ...), a certificate and key it
// signed. `strata certs DIR --names coordinator,w0,w1` writes them.
//
// Everything is OpenSSL's libcrypto (EVP_PKEY, X509, PEM_write_bio_*):
//   keys          EC P-256 (prime256v1)
//   CA            X509 v3, CN "strata cluster CA", basicConstraints
//                 critical CA:TRUE, keyUsage critical keyCertSign + cRLSign,
//                 subjectKeyIdentifier
//   leaf          X509 v3, CN NAME, subjectAltName DNS:NAME, basicConstraints
//                 CA:FALSE, keyUsage digitalSignature, extendedKeyUsage
//                 serverAuth + clientAuth (a worker is both), authority and
//                 subject key identifiers
//   validity      825 days from now (1 hour back-dated for clock skew)
//   serial        128 random bits (RAND_bytes), positive
//   signature     ECDSA with SHA-256
//
// Files (write_cluster_certs): DIR/ca.pem, DIR/ca.key, DIR/NAME.pem,
// DIR/NAME.key; keys mode 0600, certificates 0644. Keep ca.key off the
// cluster's machines: it makes new members.
//
// Threads: plain functions.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata::certs {

inline constexpr int kValidityDays = 825;

struct CertAndKey {
  std::string cert_pem;  // "-----BEGIN CERTIFICATE-----..."
  std::string key_pem;   // "-----BEGIN PRIVATE KEY-----..." (PKCS#8)
};

// Letters, digits, '-', '.', '_'; 1 .. 64 bytes (a CN's limit); not "ca".
// InvalidArgument naming the name otherwise.
absl::Status check_name(absl::string_view name);

// A self-signed CA. `common_name` is its subject CN.
absl::StatusOr<CertAndKey> make_ca(
    absl::string_view common_name = "strata cluster CA");

// A certificate for `name` signed by `ca` (make_ca's). Errors: Internal
// when OpenSSL fails (its message), InvalidArgument for a bad name or CA.
absl::StatusOr<CertAndKey> make_leaf(const CertAndKey& ca,
                                     absl::string_view name);

// Writes a CA and one certificate per name into `dir` (created if absent).
// Refuses (AlreadyExists naming the file, before writing anything) when a
// file exists, unless `force`. Names must be distinct.
absl::Status write_cluster_certs(const std::string& dir,
                                 const std::vector<std::string>& names,
                                 bool force);

}  // namespace strata::certs
