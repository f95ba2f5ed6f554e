// Link security of the cluster's own gRPC links (coordinator -> worker
// control, the activation streams stage -> stage, the last stage's Results
// stream): mutual TLS from one cluster CA, HTTP/2 keepalive on both ends,
// and the server limits every strata gRPC server sets. docs/security.md has
// the threat model this serves.
//
// Config (the same keys in the coordinator's cluster.yaml and a worker's
// yaml; parse_tls_key reads them for both):
//
//   insecure: true       # plaintext; refused unless every address is
//                        # loopback (127.0.0.0/8, ::1, localhost), with a
//                        # warning. Without it a `tls:` block is required.
//   tls:
//     ca: /etc/strata/certs/ca.pem      # the cluster CA (PEM)
//     cert: /etc/strata/certs/w0.pem    # this process's certificate (PEM)
//     key: /etc/strata/certs/w0.key     # its private key (PEM)
//     peers: [coordinator, w0, w1]      # certificate names (DNS SAN, else
//                                       # CN) allowed to call this process
//
// What each side checks:
//   server (a worker): the TLS handshake requires a client certificate the
//     CA signed (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY),
//     so a peer without one is refused before HTTP/2 starts; then every
//     call's peer identity must be in `peers` (PERMISSION_DENIED otherwise,
//     before the handler runs).
//   client (the coordinator, a worker to the next stage): the server's
//     certificate must be signed by the CA and carry the name the client
//     expects (the worker's `name:`, GRPC_SSL_TARGET_NAME_OVERRIDE_ARG), so
//     certificates carry names, not addresses.
//
// Threads: plain values and functions; the credentials made here may be
// used from any thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace YAML {
class Node;
}  // namespace YAML

namespace strata::grpc_tls {

struct TlsConfig {
  // File paths from the config ("~/" expanded), empty when not given.
  std::string ca;
  std::string cert;
  std::string key;
  std::vector<std::string> peers;
  bool tls_given = false;  // a `tls:` block (or a --tls-* flag) was given
  bool insecure = false;   // `insecure: true`
  // PEM text, filled by load_tls_files() (resolve_link_security calls it).
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;

  // True when links are plaintext (after resolve_link_security said so).
  bool plaintext() const { return insecure && !tls_given; }
};

// True for the keys this module owns ("tls", "insecure").
bool is_tls_key(absl::string_view key);

// Reads `key: value` of a config map into `out`: "insecure" (a boolean) or
// "tls" (a map of ca, cert, key, peers; unknown keys refused). Errors:
// InvalidArgument "SOURCE:LINE: tls.cert: expected a single value". Files
// are not read here (load_tls_files; flags may still replace the paths).
absl::Status parse_tls_key(const std::string& key, const YAML::Node& value,
                           const std::string& source, TlsConfig* out);

// Reads the three PEM files into ca_pem, cert_pem, key_pem and checks them
// with OpenSSL: the CA and the certificate parse, the key parses and
// matches the certificate. Errors name the key and the path:
// "tls.cert: /x: cannot be read", "tls.key: /k: does not match tls.cert
// /c".
absl::Status load_tls_files(TlsConfig* config);

// The startup rule, for a process whose links use `addresses` (a worker:
// its listen address; the coordinator: every worker's address):
//   - `tls:` and `insecure: true` both given: refused;
//   - `insecure: true`: every address must be loopback (else refused naming
//     it); logs a warning that links are plaintext;
//   - `tls:`: ca, cert and key required; the files are loaded
//     (load_tls_files); `require_peers`: peers must be non-empty (a worker);
//   - neither: refused ("links are mutual TLS by default: give a tls:
//     block ... or insecure: true for loopback only").
// Errors: InvalidArgument naming the key.
absl::Status resolve_link_security(TlsConfig* config,
                                   const std::vector<std::string>& addresses,
                                   bool require_peers,
                                   absl::string_view who = "");

// Whether host:port's host is loopback: 127.0.0.0/8, ::1 ("[::1]:p"), or
// "localhost".
bool is_loopback_address(absl::string_view address);

// Keepalive of every cluster channel (docs/security.md, plans: a stopped
// peer is noticed within 2 s): pings every 1000 ms, 1000 ms to answer,
// also without calls, no limit on pings without data.
inline constexpr int kKeepaliveTimeMs = 1000;
inline constexpr int kKeepaliveTimeoutMs = 1000;
void set_keepalive(grpc::ChannelArguments* args, int time_ms = kKeepaliveTimeMs,
                   int timeout_ms = kKeepaliveTimeoutMs);

// A channel to the cluster peer at `address` whose certificate must carry
// `peer_name` (the worker's `name:`). `args` gets keepalive (set_keepalive
// with the times given) and, with TLS, the target name override. Errors:
// InvalidArgument for an empty peer_name under TLS; FailedPrecondition for
// plaintext to a non-loopback address or a config that was not resolved (no PEM
// loaded).
absl::StatusOr<std::shared_ptr<grpc::Channel>> make_channel(
    const TlsConfig& config, const std::string& address,
    const std::string& peer_name, grpc::ChannelArguments args,
    int keepalive_time_ms = kKeepaliveTimeMs,
    int keepalive_timeout_ms = kKeepaliveTimeoutMs);

// The server credentials of a cluster server: mutual TLS with the CA as the
// only root, client certificates required and verified, and a per-call
// check of the peer's certificate name against `peers` (PERMISSION_DENIED
// "peer certificate names [x] not in tls.peers"). Plaintext (insecure) when
// config.plaintext(). Call after resolve_link_security.
std::shared_ptr<grpc::ServerCredentials> server_credentials(
    const TlsConfig& config);

// The names (DNS SAN, else CN) a call's peer certificate carries; empty
// without one. For logs and tests.
std::vector<std::string> peer_names(const grpc::AuthContext& context);

// Limits of a strata gRPC server (each mitigates a denial of service;
// docs/security.md says which).
struct ServerLimits {
  int max_concurrent_streams = 16;      // per HTTP/2 connection
  int handshake_timeout_ms = 5000;      // TLS + HTTP/2 settings exchange
  int max_connection_idle_ms = 300000;  // no call this long: GOAWAY
  int max_metadata_bytes = 16 << 10;    // request headers of one call
};

// Sets `limits`, and lets clients ping every >= 500 ms without calls and
// without strikes (gRPC's default GOAWAYs a client that pings more often
// than every 5 minutes without data); the server pings its clients too.
void add_server_limits(grpc::ServerBuilder& builder,
                       const ServerLimits& limits);

}  // namespace strata::grpc_tls
