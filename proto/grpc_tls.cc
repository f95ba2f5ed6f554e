#include "proto/grpc_tls.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "yaml-cpp/yaml.h"

namespace strata::grpc_tls {

namespace {

std::string expand_home(const std::string& path) {
  if (path == "~" || path.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    if (home != nullptr) return std::string(home) + path.substr(1);
  }
  return path;
}

absl::Status yaml_error(const std::string& source, const YAML::Node& node,
                        const std::string& key, absl::string_view what) {
  std::string where = source;
  const YAML::Mark mark = node.Mark();
  if (!mark.is_null()) where = absl::StrCat(where, ":", mark.line + 1);
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", key, ": ", what));
}

// A certificate name: what `strata certs` accepts (cluster_certs.h).
bool plausible_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
           c == '.' || c == '_';
  });
}

absl::StatusOr<std::string> read_pem(const std::string& key,
                                     const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": ", path, ": cannot be read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().size() > (1u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": ", path, ": over 1 MiB; not a PEM file"));
  }
  return text.str();
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioFree> memory_bio(const std::string& text) {
  return std::unique_ptr<BIO, BioFree>(
      BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// Checks the peer's certificate names against `peers` on every call, before
// the handler runs (gRPC's server auth filter calls it for each call of a
// connection made with these credentials).
class PeerCheck final : public grpc::AuthMetadataProcessor {
 public:
  explicit PeerCheck(std::vector<std::string> peers)
      : peers_(std::move(peers)) {}

  bool IsBlocking() const override { return false; }  // cheap: inline

  grpc::Status Process(const InputMetadata&, grpc::AuthContext* context,
                       OutputMetadata*, OutputMetadata*) override {
    const std::vector<std::string> names = peer_names(*context);
    for (const std::string& n : names) {
      if (std::find(peers_.begin(), peers_.end(), n) != peers_.end()) {
        return grpc::Status::OK;
      }
    }
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat("peer certificate names [", absl::StrJoin(names, ", "),
                     "] not in tls.peers"));
  }

 private:
  const std::vector<std::string> peers_;
};

}  // namespace

bool is_tls_key(absl::string_view key) {
  return key == "tls" || key == "insecure";
}

absl::Status parse_tls_key(const std::string& key, const YAML::Node& value,
                           const std::string& source, TlsConfig* out) {
  if (key == "insecure") {
    if (!value.IsScalar()) {
      return yaml_error(source, value, key, "expected true or false");
    }
    const std::string v = absl::AsciiStrToLower(value.Scalar());
    if (v == "true" || v == "yes") {
      out->insecure = true;
    } else if (v == "false" || v == "no") {
      out->insecure = false;
    } else {
      return yaml_error(
          source, value, key,
          absl::StrCat("\"", value.Scalar(), "\" is not true or false"));
    }
    return absl::OkStatus();
  }
  if (key != "tls") {
    return yaml_error(source, value, key, "not a TLS key");
  }
  if (!value.IsMap()) {
    return yaml_error(source, value, key,
                      "expected a map (ca: ..., cert: ..., key: ..., "
                      "peers: [...])");
  }
  out->tls_given = true;
  std::vector<std::string> seen;
  for (const auto& item : value) {
    const std::string sub = item.first.as<std::string>();
    const std::string name = absl::StrCat("tls.", sub);
    const YAML::Node& v = item.second;
    if (std::find(seen.begin(), seen.end(), sub) != seen.end()) {
      return yaml_error(source, item.first, name, "given twice");
    }
    seen.push_back(sub);
    if (sub == "ca" || sub == "cert" || sub == "key") {
      if (!v.IsScalar() || v.Scalar().empty()) {
        return yaml_error(source, v, name, "expected a file path");
      }
      std::string& field =
          sub == "ca" ? out->ca : (sub == "cert" ? out->cert : out->key);
      field = expand_home(v.Scalar());
    } else if (sub == "peers") {
      out->peers.clear();
      if (!v.IsSequence()) {
        return yaml_error(source, v, name,
                          "expected a list of certificate names");
      }
      for (const YAML::Node& p : v) {
        if (!p.IsScalar() || !plausible_name(p.Scalar())) {
          return yaml_error(source, p, name,
                            "expected a certificate name (letters, digits, "
                            "'-', '.', '_'; at most 64)");
        }
        out->peers.push_back(p.Scalar());
      }
    } else {
      return yaml_error(source, item.first, name,
                        "unknown key (known: ca, cert, key, peers)");
    }
  }
  return absl::OkStatus();
}

absl::Status load_tls_files(TlsConfig* c) {
  absl::StatusOr<std::string> ca = read_pem("tls.ca", c->ca);
  if (!ca.ok()) return ca.status();
  absl::StatusOr<std::string> cert = read_pem("tls.cert", c->cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = read_pem("tls.key", c->key);
  if (!key.ok()) return key.status();

  auto ca_bio = memory_bio(*ca);
  std::unique_ptr<X509, X509Free> ca_x509(
      PEM_read_bio_X509(ca_bio.get(), nullptr, nullptr, nullptr));
  if (ca_x509 == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls.ca: ", c->ca, ": not a PEM certificate"));
  }
  auto cert_bio = memory_bio(*cert);
  std::unique_ptr<X509, X509Free> cert_x509(
      PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (cert_x509 == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls.cert: ", c->cert, ": not a PEM certificate"));
  }
  auto key_bio = memory_bio(*key);
  std::unique_ptr<EVP_PKEY, PkeyFree> pkey(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (pkey == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls.key: ", c->key, ": not a PEM private key (or encrypted)"));
  }
  if (X509_check_private_key(cert_x509.get(), pkey.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls.key: ", c->key, ": does not match tls.cert ", c->cert));
  }
  c->ca_pem = std::move(*ca);
  c->cert_pem = std::move(*cert);
  c->key_pem = std::move(*key);
  return absl::OkStatus();
}

bool is_loopback_address(absl::string_view address) {
  std::string host(address.substr(0, address.rfind(':')));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (absl::AsciiStrToLower(host) == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6);
  }
  return false;
}

absl::Status resolve_link_security(TlsConfig* c,
                                   const std::vector<std::string>& addresses,
                                   bool require_peers, absl::string_view who) {
  if (c->tls_given && c->insecure) {
    return absl::InvalidArgumentError(
        "insecure: true and a tls: block both given; choose one");
  }
  if (c->insecure) {
    for (const std::string& a : addresses) {
      if (!is_loopback_address(a)) {
        return absl::InvalidArgumentError(
            absl::StrCat("insecure: refused: ", a,
                         " is not a loopback address (plaintext links only on "
                         "127.0.0.0/8, ::1 or localhost; give a tls: block)"));
      }
    }
    spdlog::warn(
        "{}{}insecure: true: cluster links are plaintext and unauthenticated "
        "(loopback only); use a tls: block (strata certs) beyond one machine",
        std::string(who), who.empty() ? "" : ": ");
    return absl::OkStatus();
  }
  if (!c->tls_given) {
    return absl::InvalidArgumentError(
        "tls: missing: cluster links are mutual TLS by default; give a tls: "
        "block (ca, cert, key, peers; `strata certs DIR --names ...` makes "
        "them) or, on loopback only, insecure: true");
  }
  if (c->ca.empty()) return absl::InvalidArgumentError("tls.ca: missing");
  if (c->cert.empty()) return absl::InvalidArgumentError("tls.cert: missing");
  if (c->key.empty()) return absl::InvalidArgumentError("tls.key: missing");
  if (require_peers && c->peers.empty()) {
    return absl::InvalidArgumentError(
        "tls.peers: missing: the certificate names allowed to call this "
        "worker (the coordinator's and the previous stage's)");
  }
  return load_tls_files(c);
}

void set_keepalive(grpc::ChannelArguments* args, int time_ms, int timeout_ms) {
  args->SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, time_ms);
  args->SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, timeout_ms);
  args->SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args->SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> make_channel(
    const TlsConfig& c, const std::string& address,
    const std::string& peer_name, grpc::ChannelArguments args,
    int keepalive_time_ms, int keepalive_timeout_ms) {
  set_keepalive(&args, keepalive_time_ms, keepalive_timeout_ms);
  if (c.plaintext()) {
    if (!is_loopback_address(address)) {
      return absl::FailedPreconditionError(
          absl::StrCat("insecure: plaintext link to ", address,
                       " refused: not a loopback address"));
    }
    return grpc::CreateCustomChannel(address,
                                     grpc::InsecureChannelCredentials(), args);
  }
  if (c.ca_pem.empty() || c.cert_pem.empty() || c.key_pem.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "link to ", address,
        ": no TLS credentials (a tls: block, or insecure: true on loopback)"));
  }
  if (peer_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "link to ", address,
        ": the peer's name is required with TLS (its certificate must "
        "carry it)"));
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = c.ca_pem;
  ssl.pem_private_key = c.key_pem;
  ssl.pem_cert_chain = c.cert_pem;
  args.SetSslTargetNameOverride(peer_name);
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(ssl), args);
}

std::shared_ptr<grpc::ServerCredentials> server_credentials(
    const TlsConfig& c) {
  if (c.plaintext()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = c.ca_pem;
  ssl.pem_key_cert_pairs.push_back({c.key_pem, c.cert_pem});
  std::shared_ptr<grpc::ServerCredentials> creds =
      grpc::SslServerCredentials(ssl);
  creds->SetAuthMetadataProcessor(std::make_shared<PeerCheck>(c.peers));
  return creds;
}

std::vector<std::string> peer_names(const grpc::AuthContext& context) {
  std::vector<std::string> names;
  for (const grpc::string_ref& n : context.GetPeerIdentity()) {
    names.emplace_back(n.data(), n.size());
  }
  return names;
}

void add_server_limits(grpc::ServerBuilder& builder,
                       const ServerLimits& limits) {
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             limits.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             limits.handshake_timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             limits.max_connection_idle_ms);
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE,
                             limits.max_metadata_bytes);
  // Keepalive: accept the clients' pings (set_keepalive) and ping them.
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
}

}  // namespace strata::grpc_tls
