#include "proto/cluster_certs.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace strata::certs {

namespace {

struct Free {
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
};
template <typename T>
using Owned = std::unique_ptr<T, Free>;

// OpenSSL's queued error as an Internal status ("what: error:...").
absl::Status openssl_error(absl::string_view what) {
  const unsigned long e = ERR_get_error();
  char text[256] = "unknown error";
  if (e != 0) ERR_error_string_n(e, text, sizeof(text));
  ERR_clear_error();
  return absl::InternalError(absl::StrCat(what, ": ", text));
}

absl::StatusOr<Owned<EVP_PKEY>> new_p256_key() {
  Owned<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (key == nullptr) return openssl_error("EC P-256 key generation");
  return key;
}

absl::Status add_ext(X509* cert, X509V3_CTX* ctx, int nid, const char* value) {
  Owned<X509_EXTENSION> ext(
      X509V3_EXT_conf_nid(nullptr, ctx, nid, const_cast<char*>(value)));
  if (ext == nullptr || X509_add_ext(cert, ext.get(), -1) != 1) {
    return openssl_error(
        absl::StrCat("extension ", OBJ_nid2sn(nid), " ", value));
  }
  return absl::OkStatus();
}

// A v3 certificate with a random positive 128-bit serial, CN `name`,
// valid from an hour ago for kValidityDays, holding `key`'s public half.
absl::StatusOr<Owned<X509>> new_cert(absl::string_view name, EVP_PKEY* key) {
  Owned<X509> cert(X509_new());
  if (cert == nullptr) return openssl_error("X509_new");
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) {
    return openssl_error("RAND_bytes");
  }
  serial[0] &= 0x7f;  // positive
  serial[0] |= 0x40;  // and 16 bytes long
  Owned<BIGNUM> bn(BN_bin2bn(serial, sizeof(serial), nullptr));
  if (bn == nullptr || X509_set_version(cert.get(), X509_VERSION_3) != 1 ||
      BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get())) ==
          nullptr ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) == nullptr ||
      X509_time_adj_ex(X509_getm_notAfter(cert.get()), kValidityDays, 0,
                       nullptr) == nullptr ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return openssl_error("certificate fields");
  }
  X509_NAME* subject = X509_get_subject_name(cert.get());
  const std::string cn(name);
  if (X509_NAME_add_entry_by_txt(
          subject, "CN", MBSTRING_UTF8,
          reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0) != 1) {
    return openssl_error("subject CN");
  }
  return cert;
}

absl::StatusOr<std::string> pem_of(X509* cert) {
  Owned<BIO> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_X509(bio.get(), cert) != 1) {
    return openssl_error("PEM_write_bio_X509");
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::StatusOr<std::string> pem_of(EVP_PKEY* key) {
  Owned<BIO> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr,
                               nullptr) != 1) {
    return openssl_error("PEM_write_bio_PrivateKey");
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::StatusOr<CertAndKey> to_pem(X509* cert, EVP_PKEY* key) {
  absl::StatusOr<std::string> c = pem_of(cert);
  if (!c.ok()) return c.status();
  absl::StatusOr<std::string> k = pem_of(key);
  if (!k.ok()) return k.status();
  return CertAndKey{*std::move(c), *std::move(k)};
}

// Writes `text` to `path` with `mode`; O_EXCL unless `force`. Never follows
// a link at `path`.
absl::Status write_file(const std::string& path, const std::string& text,
                        mode_t mode, bool force) {
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW |
                    (force ? 0 : O_EXCL);
  const int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot be written: ", std::strerror(errno)));
  }
  // An existing file (with --force) keeps its mode unless told.
  bool ok = ::fchmod(fd, mode) == 0;
  size_t done = 0;
  while (ok && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    done += static_cast<size_t>(n);
  }
  const int saved = errno;
  if (::close(fd) != 0) ok = false;
  if (!ok) {
    return absl::InternalError(
        absl::StrCat(path, ": write failed: ", std::strerror(saved)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status check_name(absl::string_view name) {
  const bool chars_ok = std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
           c == '.' || c == '_';
  });
  if (name.empty() || name.size() > 64 || !chars_ok || name.front() == '.' ||
      name.front() == '-') {
    return absl::InvalidArgumentError(absl::StrCat(
        "name \"", name,
        "\": expected 1 .. 64 letters, digits, '-', '.' or '_', not "
        "starting with '.' or '-'"));
  }
  if (name == "ca") {
    return absl::InvalidArgumentError(
        "name \"ca\": reserved for the CA's files (ca.pem, ca.key)");
  }
  return absl::OkStatus();
}

absl::StatusOr<CertAndKey> make_ca(absl::string_view common_name) {
  absl::StatusOr<Owned<EVP_PKEY>> key = new_p256_key();
  if (!key.ok()) return key.status();
  absl::StatusOr<Owned<X509>> cert = new_cert(common_name, key->get());
  if (!cert.ok()) return cert.status();
  X509* x = cert->get();
  if (X509_set_issuer_name(x, X509_get_subject_name(x)) != 1) {
    return openssl_error("issuer");
  }
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
  for (auto [nid, value] :
       {std::pair<int, const char*>{NID_basic_constraints, "critical,CA:TRUE"},
        {NID_key_usage, "critical,keyCertSign,cRLSign"},
        {NID_subject_key_identifier, "hash"},
        {NID_authority_key_identifier, "keyid:always"}}) {
    if (absl::Status st = add_ext(x, &ctx, nid, value); !st.ok()) return st;
  }
  if (X509_sign(x, key->get(), EVP_sha256()) == 0) {
    return openssl_error("signing the CA");
  }
  return to_pem(x, key->get());
}

absl::StatusOr<CertAndKey> make_leaf(const CertAndKey& ca,
                                     absl::string_view name) {
  if (absl::Status st = check_name(name); !st.ok()) return st;
  Owned<BIO> ca_bio(BIO_new_mem_buf(ca.cert_pem.data(),
                                    static_cast<int>(ca.cert_pem.size())));
  Owned<X509> ca_cert(
      PEM_read_bio_X509(ca_bio.get(), nullptr, nullptr, nullptr));
  Owned<BIO> key_bio(
      BIO_new_mem_buf(ca.key_pem.data(), static_cast<int>(ca.key_pem.size())));
  Owned<EVP_PKEY> ca_key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (ca_cert == nullptr || ca_key == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError("CA: not a PEM certificate and key");
  }
  absl::StatusOr<Owned<EVP_PKEY>> key = new_p256_key();
  if (!key.ok()) return key.status();
  absl::StatusOr<Owned<X509>> cert = new_cert(name, key->get());
  if (!cert.ok()) return cert.status();
  X509* x = cert->get();
  if (X509_set_issuer_name(x, X509_get_subject_name(ca_cert.get())) != 1) {
    return openssl_error("issuer");
  }
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, ca_cert.get(), x, nullptr, nullptr, 0);
  const std::string san = absl::StrCat("DNS:", name);
  for (auto [nid, value] :
       {std::pair<int, const char*>{NID_basic_constraints, "critical,CA:FALSE"},
        {NID_key_usage, "critical,digitalSignature"},
        {NID_ext_key_usage, "serverAuth,clientAuth"},
        {NID_subject_alt_name, san.c_str()},
        {NID_subject_key_identifier, "hash"},
        {NID_authority_key_identifier, "keyid:always"}}) {
    if (absl::Status st = add_ext(x, &ctx, nid, value); !st.ok()) return st;
  }
  if (X509_sign(x, ca_key.get(), EVP_sha256()) == 0) {
    return openssl_error(absl::StrCat("signing ", name));
  }
  return to_pem(x, key->get());
}

absl::Status write_cluster_certs(const std::string& dir,
                                 const std::vector<std::string>& names,
                                 bool force) {
  if (names.empty()) {
    return absl::InvalidArgumentError("--names: none given");
  }
  std::set<std::string> distinct;
  for (const std::string& n : names) {
    if (absl::Status st = check_name(n); !st.ok()) return st;
    if (!distinct.insert(n).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("name \"", n, "\": given twice"));
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": cannot be created: ", ec.message()));
  }
  const std::filesystem::path d(dir);
  std::vector<std::string> files = {(d / "ca.pem").string(),
                                    (d / "ca.key").string()};
  for (const std::string& n : names) {
    files.push_back((d / (n + ".pem")).string());
    files.push_back((d / (n + ".key")).string());
  }
  if (!force) {
    for (const std::string& f : files) {
      if (std::filesystem::symlink_status(f, ec).type() !=
          std::filesystem::file_type::not_found) {
        return absl::AlreadyExistsError(
            absl::StrCat(f, ": exists (--force replaces it)"));
      }
    }
  }
  absl::StatusOr<CertAndKey> ca = make_ca();
  if (!ca.ok()) return ca.status();
  std::vector<CertAndKey> leaves;
  for (const std::string& n : names) {
    absl::StatusOr<CertAndKey> leaf = make_leaf(*ca, n);
    if (!leaf.ok()) return leaf.status();
    leaves.push_back(*std::move(leaf));
  }
  // Keys first with 0600, so no key is ever readable by others.
  if (absl::Status st = write_file(files[1], ca->key_pem, 0600, force);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = write_file(files[0], ca->cert_pem, 0644, force);
      !st.ok()) {
    return st;
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (absl::Status st =
            write_file(files[2 * i + 3], leaves[i].key_pem, 0600, force);
        !st.ok()) {
      return st;
    }
    if (absl::Status st =
            write_file(files[2 * i + 2], leaves[i].cert_pem, 0644, force);
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

}  // namespace strata::certs
