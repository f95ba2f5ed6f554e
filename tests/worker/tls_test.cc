// Mutual TLS of the cluster's links (proto/grpc_tls.h) and the certificates
// `strata certs` makes (proto/cluster_certs.h):
//   - certificates verify against their CA with OpenSSL, carry the name as
//     CN and DNS SAN, and are refused by another CA; files are 0600 keys
//     and are not overwritten without force;
//   - a server made with grpc_tls::server_credentials (as strata-worker's)
//     refuses a plaintext client, a TLS client without a certificate and
//     one with another CA's certificate in the handshake: the RPC fails
//     UNAVAILABLE and the service sees no call; a good certificate whose
//     name is not in peers gets PERMISSION_DENIED, again with no call;
//   - a link whose peer's certificate carries another name fails;
//   - config errors name the key; plaintext is refused off loopback;
//   - a real strata-worker with a tls: block refuses plaintext and serves
//     the coordinator's certificate.
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "coordinator/cluster_config.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/cluster_certs.h"
#include "proto/grpc_tls.h"
#include "strata/v1/worker.grpc.pb.h"
#include "tests/worker/worker_process.h"
#include "worker/grpc_link.h"
#include "worker/worker_config.h"

namespace strata {
namespace {

::testing::AssertionResult contains(const std::string& text,
                                    const std::string& part) {
  if (text.find(part) != std::string::npos)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "\"" << text << "\" lacks \"" << part << "\"";
}

// ---- OpenSSL helpers for the checks -------------------------------------

struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
using X509Ptr = std::unique_ptr<X509, X509Deleter>;

X509Ptr parse_cert(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509Ptr x(PEM_read_bio_X509(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  return x;
}

// X509_verify_cert of `leaf` against `ca` as the only trust anchor, for
// `purpose` (X509_PURPOSE_SSL_SERVER / _CLIENT). 1 when it verifies.
int verify(const std::string& ca_pem, const std::string& leaf_pem, int purpose,
           int* error = nullptr) {
  X509Ptr ca = parse_cert(ca_pem);
  X509Ptr leaf = parse_cert(leaf_pem);
  if (ca == nullptr || leaf == nullptr) return -1;
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca.get());
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf.get(), nullptr);
  X509_STORE_CTX_set_purpose(ctx, purpose);
  const int ok = X509_verify_cert(ctx);
  if (error != nullptr) *error = X509_STORE_CTX_get_error(ctx);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return ok;
}

std::vector<std::string> dns_sans(X509* x) {
  std::vector<std::string> out;
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type != GEN_DNS) continue;
    const ASN1_STRING* s = n->d.dNSName;
    out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     static_cast<size_t>(ASN1_STRING_length(s)));
  }
  GENERAL_NAMES_free(names);
  return out;
}

std::string common_name(X509* x) {
  char buf[256] = {0};
  X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, buf,
                            sizeof(buf));
  return buf;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string fresh_dir(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "/" + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

// ---- certificates ---------------------------------------------------------

TEST(ClusterCerts, LeafVerifiesAgainstItsCaWithNameAsCnAndSan) {
  auto ca = certs::make_ca();
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto leaf = certs::make_leaf(*ca, "w0");
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  int error = 0;
  EXPECT_EQ(
      verify(ca->cert_pem, leaf->cert_pem, X509_PURPOSE_SSL_SERVER, &error), 1)
      << X509_verify_cert_error_string(error);
  EXPECT_EQ(
      verify(ca->cert_pem, leaf->cert_pem, X509_PURPOSE_SSL_CLIENT, &error), 1)
      << X509_verify_cert_error_string(error);

  X509Ptr x = parse_cert(leaf->cert_pem);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(common_name(x.get()), "w0");
  EXPECT_EQ(dns_sans(x.get()), std::vector<std::string>{"w0"});
  EXPECT_EQ(X509_get_version(x.get()), X509_VERSION_3);
  EXPECT_EQ(X509_check_ca(x.get()), 0);  // a leaf cannot sign
  // 825 days of validity.
  int days = 0, secs = 0;
  ASSERT_EQ(ASN1_TIME_diff(&days, &secs, X509_get0_notBefore(x.get()),
                           X509_get0_notAfter(x.get())),
            1);
  EXPECT_EQ(days * 86400 + secs, 825 * 86400 + 3600);
  // EC P-256.
  EVP_PKEY* pub = X509_get0_pubkey(x.get());
  ASSERT_NE(pub, nullptr);
  EXPECT_EQ(EVP_PKEY_get_base_id(pub), EVP_PKEY_EC);
  char group[64] = {0};
  size_t group_len = 0;
  ASSERT_EQ(EVP_PKEY_get_group_name(pub, group, sizeof(group), &group_len), 1);
  EXPECT_STREQ(group, "prime256v1");

  X509Ptr root = parse_cert(ca->cert_pem);
  ASSERT_NE(root, nullptr);
  EXPECT_GE(X509_check_ca(root.get()), 1);
  EXPECT_TRUE(X509_get_key_usage(root.get()) & KU_KEY_CERT_SIGN);

  // Serials are random: two leaves differ.
  auto other = certs::make_leaf(*ca, "w0");
  ASSERT_TRUE(other.ok());
  X509Ptr y = parse_cert(other->cert_pem);
  EXPECT_NE(ASN1_INTEGER_cmp(X509_get0_serialNumber(x.get()),
                             X509_get0_serialNumber(y.get())),
            0);
}

TEST(ClusterCerts, AnotherCaDoesNotVerify) {
  auto ca = certs::make_ca();
  auto stranger = certs::make_ca();
  ASSERT_TRUE(ca.ok() && stranger.ok());
  auto leaf = certs::make_leaf(*stranger, "coordinator");
  ASSERT_TRUE(leaf.ok());
  int error = 0;
  EXPECT_NE(
      verify(ca->cert_pem, leaf->cert_pem, X509_PURPOSE_SSL_CLIENT, &error), 1);
  EXPECT_NE(error, X509_V_OK);
}

TEST(ClusterCerts, WritesFilesKeys0600AndRefusesToOverwrite) {
  const std::string dir = fresh_dir("certs");
  ASSERT_TRUE(
      certs::write_cluster_certs(dir, {"coordinator", "w0", "w1"}, false).ok());
  for (const char* name : {"ca", "coordinator", "w0", "w1"}) {
    struct stat key {
    }, cert{};
    ASSERT_EQ(::stat((dir + "/" + name + ".key").c_str(), &key), 0) << name;
    ASSERT_EQ(::stat((dir + "/" + name + ".pem").c_str(), &cert), 0) << name;
    EXPECT_EQ(key.st_mode & 0777, 0600u) << name;
    EXPECT_EQ(cert.st_mode & 0777, 0644u) << name;
  }
  const std::string ca = read_file(dir + "/ca.pem");
  const std::string w1 = read_file(dir + "/w1.pem");
  EXPECT_EQ(verify(ca, w1, X509_PURPOSE_SSL_SERVER), 1);
  X509Ptr x = parse_cert(w1);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(dns_sans(x.get()), std::vector<std::string>{"w1"});

  // Again: refused, nothing replaced; with force: replaced.
  absl::Status again = certs::write_cluster_certs(dir, {"w1"}, false);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(contains(std::string(again.message()), "ca.pem: exists"));
  EXPECT_EQ(read_file(dir + "/ca.pem"), ca);
  ASSERT_TRUE(certs::write_cluster_certs(dir, {"w1"}, true).ok());
  EXPECT_NE(read_file(dir + "/ca.pem"), ca);
  EXPECT_EQ(verify(read_file(dir + "/ca.pem"), read_file(dir + "/w1.pem"),
                   X509_PURPOSE_SSL_SERVER),
            1);
  std::filesystem::remove_all(dir);
}

TEST(ClusterCerts, RefusesBadNames) {
  const std::string dir = fresh_dir("badnames");
  for (const std::vector<std::string>& names :
       std::vector<std::vector<std::string>>{
           {}, {"ca"}, {"w0", "w0"}, {"a/b"}, {".."}, {std::string(65, 'x')}}) {
    EXPECT_EQ(certs::write_cluster_certs(dir, names, false).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/ca.pem"));
}

// ---- config ----------------------------------------------------------------

TEST(LinkSecurityConfig, ParseErrorsNameTheKey) {
  struct Case {
    const char* yaml;
    const char* error;
  };
  for (const Case& c : {
           Case{"tls:\n  cert: [a]\n",
                "w.yaml:2: tls.cert: expected a file path"},
           Case{"tls:\n  crt: a\n",
                "tls.crt: unknown key (known: ca, cert, key, peers)"},
           Case{"tls:\n  peers: w0\n", "tls.peers: expected a list"},
           Case{"tls:\n  peers: [\"a b\"]\n",
                "tls.peers: expected a certificate name"},
           Case{"tls: yes\n", "w.yaml:1: tls: expected a map"},
           Case{"insecure: maybe\n",
                "insecure: \"maybe\" is not true or false"},
       }) {
    auto parsed = worker::parse_worker_config(c.yaml, "w.yaml");
    ASSERT_FALSE(parsed.ok()) << c.yaml;
    EXPECT_TRUE(contains(std::string(parsed.status().message()), c.error))
        << c.yaml;
  }
  auto ok = worker::parse_worker_config(
      "tls:\n  ca: /c/ca.pem\n  cert: ~/w0.pem\n  key: /c/w0.key\n"
      "  peers: [coordinator, w1]\n",
      "w.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->tls.tls_given);
  EXPECT_EQ(ok->tls.ca, "/c/ca.pem");
  EXPECT_EQ(ok->tls.cert, std::string(std::getenv("HOME")) + "/w0.pem");
  EXPECT_EQ(ok->tls.peers, (std::vector<std::string>{"coordinator", "w1"}));
}

TEST(LinkSecurityConfig, FilesAreReadAndCheckedNamingTheKey) {
  const std::string dir = fresh_dir("files");
  ASSERT_TRUE(certs::write_cluster_certs(dir, {"w0", "w1"}, false).ok());
  grpc_tls::TlsConfig c;
  c.tls_given = true;
  c.ca = dir + "/ca.pem";
  c.cert = dir + "/nope.pem";
  c.key = dir + "/w0.key";
  c.peers = {"w1"};
  absl::Status st = grpc_tls::resolve_link_security(&c, {"10.0.0.1:1"}, true);
  EXPECT_EQ(std::string(st.message()),
            "tls.cert: " + dir + "/nope.pem: cannot be read");
  c.cert = dir + "/w1.pem";  // not w0.key's
  st = grpc_tls::resolve_link_security(&c, {"10.0.0.1:1"}, true);
  EXPECT_TRUE(contains(std::string(st.message()),
                       "tls.key: " + dir + "/w0.key: does not match tls.cert"));
  c.cert = dir + "/w0.pem";
  c.ca = dir + "/w0.key";
  st = grpc_tls::resolve_link_security(&c, {"10.0.0.1:1"}, true);
  EXPECT_TRUE(contains(std::string(st.message()), "tls.ca: "));
  c.ca = dir + "/ca.pem";
  c.peers.clear();
  st = grpc_tls::resolve_link_security(&c, {"10.0.0.1:1"}, true);
  EXPECT_TRUE(contains(std::string(st.message()), "tls.peers: missing"));
  c.peers = {"w1"};
  EXPECT_TRUE(grpc_tls::resolve_link_security(&c, {"10.0.0.1:1"}, true).ok());
  EXPECT_FALSE(c.plaintext());
  EXPECT_TRUE(contains(c.cert_pem, "BEGIN CERTIFICATE"));
  std::filesystem::remove_all(dir);
}

TEST(LinkSecurityConfig, PlaintextOnlyOnLoopbackAndOnlyWhenAsked) {
  grpc_tls::TlsConfig none;
  absl::Status st =
      grpc_tls::resolve_link_security(&none, {"127.0.0.1:1"}, true);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(std::string(st.message()), "tls: missing"));

  grpc_tls::TlsConfig plain;
  plain.insecure = true;
  EXPECT_TRUE(grpc_tls::resolve_link_security(
                  &plain,
                  {"127.0.0.1:1", "127.3.4.5:2", "[::1]:3", "localhost:4"},
                  true)
                  .ok());
  EXPECT_TRUE(plain.plaintext());
  for (const char* address :
       {"0.0.0.0:1", "10.1.2.3:4", "[::]:5", "w1:6", "128.0.0.1:7"}) {
    st =
        grpc_tls::resolve_link_security(&plain, {"127.0.0.1:1", address}, true);
    EXPECT_TRUE(contains(std::string(st.message()),
                         std::string("insecure: refused: ") + address))
        << address;
  }
  // A channel too: plaintext to a non-loopback address is never made.
  auto channel = grpc_tls::make_channel(plain, "10.0.0.1:1", "w1",
                                        grpc::ChannelArguments());
  EXPECT_EQ(channel.status().code(), absl::StatusCode::kFailedPrecondition);

  grpc_tls::TlsConfig both;
  both.insecure = true;
  both.tls_given = true;
  EXPECT_TRUE(contains(
      std::string(grpc_tls::resolve_link_security(&both, {}, true).message()),
      "both given"));
}

TEST(LinkSecurityConfig, CoordinatorNeedsWorkerNamesWithTls) {
  const std::string dir = fresh_dir("coord");
  ASSERT_TRUE(certs::write_cluster_certs(dir, {"coordinator"}, false).ok());
  const std::string tls = "tls:\n  ca: " + dir + "/ca.pem\n  cert: " + dir +
                          "/coordinator.pem\n  key: " + dir +
                          "/coordinator.key\n";
  auto c = coordinator::parse_cluster_config(
      "model: m\n" + tls + "workers:\n  - address: 10.0.0.1:1\n", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  absl::Status st = coordinator::resolve_link_security(*c);
  EXPECT_TRUE(contains(std::string(st.message()),
                       "workers[0].name: required with tls"));

  c = coordinator::parse_cluster_config(
      "model: m\n" + tls +
          "  peers: [w0]\nworkers:\n  - {address: 10.0.0.1:1, name: w0}\n"
          "  - {address: 10.0.0.2:1, name: w7}\n",
      "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  st = coordinator::resolve_link_security(*c);
  EXPECT_TRUE(contains(std::string(st.message()),
                       "workers[1].name: 'w7' is not in tls.peers"));

  c = coordinator::parse_cluster_config(
      "model: m\ninsecure: true\nworkers:\n  - {address: 127.0.0.1:1}\n"
      "  - {address: 10.0.0.2:1}\n",
      "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  st = coordinator::resolve_link_security(*c);
  EXPECT_TRUE(
      contains(std::string(st.message()), "insecure: refused: 10.0.0.2:1"));

  auto bad = coordinator::parse_cluster_config(
      "model: m\ntls:\n  key: [x]\nworkers:\n  - {address: 127.0.0.1:1}\n",
      "c.yaml");
  EXPECT_TRUE(contains(std::string(bad.status().message()),
                       "c.yaml:3: tls.key: expected a file path"));
  std::filesystem::remove_all(dir);
}

// ---- a TLS server: who gets in ---------------------------------------------

// Counts every call that reaches the service, and the peer names it saw.
class CountingWorker final : public v1::Worker::Service {
 public:
  grpc::Status Describe(grpc::ServerContext* context,
                        const v1::DescribeRequest*,
                        v1::DescribeResponse*) override {
    calls++;
    std::lock_guard<std::mutex> lock(mu);
    peers = grpc_tls::peer_names(*context->auth_context());
    return grpc::Status::OK;
  }
  grpc::Status Activations(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::MicroBatchResult, v1::MicroBatch>* stream)
      override {
    calls++;
    v1::MicroBatch b;
    while (stream->Read(&b)) {
      v1::MicroBatchResult r;
      r.set_batch_id(b.batch_id());
      stream->Write(r);
    }
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
  std::mutex mu;
  std::vector<std::string> peers;
};

grpc_tls::TlsConfig tls_of(const certs::CertAndKey& ca,
                           const certs::CertAndKey& own,
                           std::vector<std::string> peers = {}) {
  grpc_tls::TlsConfig c;
  c.tls_given = true;
  c.ca_pem = ca.cert_pem;
  c.cert_pem = own.cert_pem;
  c.key_pem = own.key_pem;
  c.peers = std::move(peers);
  return c;
}

class TlsServer : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = certs::make_ca();
    auto stranger = certs::make_ca("another CA");
    ASSERT_TRUE(ca.ok() && stranger.ok());
    ca_ = *ca;
    stranger_ = *stranger;
    start("w1");
  }
  void TearDown() override { stop(); }

  void start(const std::string& server_name) {
    stop();
    service_ = std::make_unique<CountingWorker>();
    auto own = certs::make_leaf(ca_, server_name);
    ASSERT_TRUE(own.ok());
    grpc::ServerBuilder b;
    b.AddListeningPort(
        "127.0.0.1:0",
        grpc_tls::server_credentials(tls_of(ca_, *own, {"coordinator", "w0"})),
        &port_);
    grpc_tls::add_server_limits(b, grpc_tls::ServerLimits());
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void stop() {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(100));
    }
    server_.reset();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // A client certificate `name` signed by `signer`; the client trusts ca_.
  std::shared_ptr<grpc::ChannelCredentials> client(
      const certs::CertAndKey& signer, const std::string& name) {
    auto own = certs::make_leaf(signer, name);
    EXPECT_TRUE(own.ok());
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = ca_.cert_pem;
    o.pem_cert_chain = own->cert_pem;
    o.pem_private_key = own->key_pem;
    return grpc::SslCredentials(o);
  }

  grpc::Status describe(std::shared_ptr<grpc::ChannelCredentials> creds) {
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("w1");
    auto stub =
        v1::Worker::NewStub(grpc::CreateCustomChannel(address(), creds, args));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    v1::DescribeResponse out;
    return stub->Describe(&ctx, v1::DescribeRequest(), &out);
  }

  certs::CertAndKey ca_, stranger_;
  std::unique_ptr<CountingWorker> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(TlsServer, RefusesAPlaintextClientBeforeAnyCall) {
  grpc::Status st = describe(grpc::InsecureChannelCredentials());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE)
      << st.error_message();
  EXPECT_EQ(service_->calls.load(), 0);
}

TEST_F(TlsServer, RefusesATlsClientWithoutACertificate) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ca_.cert_pem;  // it trusts the server; shows no cert
  grpc::Status st = describe(grpc::SslCredentials(o));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE)
      << st.error_message();
  EXPECT_EQ(service_->calls.load(), 0);
}

TEST_F(TlsServer, RefusesACertificateFromAnotherCa) {
  // Named as an allowed peer, but signed by another CA.
  grpc::Status st = describe(client(stranger_, "coordinator"));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE)
      << st.error_message();
  EXPECT_EQ(service_->calls.load(), 0);
}

TEST_F(TlsServer, AcceptsAPeerAndDeniesAStrangerName) {
  grpc::Status st = describe(client(ca_, "coordinator"));
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(service_->calls.load(), 1);
  {
    std::lock_guard<std::mutex> lock(service_->mu);
    EXPECT_EQ(service_->peers, std::vector<std::string>{"coordinator"});
  }
  // The cluster CA signed it, but "w5" may not call this worker.
  st = describe(client(ca_, "w5"));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(contains(st.error_message(), "[w5] not in tls.peers"));
  EXPECT_EQ(service_->calls.load(), 1);
}

struct Collect {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<v1::MicroBatchResult> got;
  worker::ActivationLink::ResultCallback cb() {
    return [this](v1::MicroBatchResult r) {
      std::lock_guard<std::mutex> l(mu);
      got.push_back(std::move(r));
      cv.notify_all();
    };
  }
  bool wait(size_t n, std::chrono::seconds t) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, t, [&] { return got.size() >= n; });
  }
};

TEST_F(TlsServer, LinkChecksTheNextStagesCertificateName) {
  auto own = certs::make_leaf(ca_, "w0");
  ASSERT_TRUE(own.ok());
  worker::GrpcLinkOptions options;
  options.tls = tls_of(ca_, *own);
  v1::MicroBatch b;
  b.set_batch_id(7);
  {
    // The plan says the next stage is w2; the server there is w1.
    options.tls_name = "w2";
    Collect c;
    auto link = worker::make_grpc_link(address(), c.cb(), options);
    ASSERT_TRUE(link.ok()) << link.status();
    const absl::Status sent = (*link)->send(b);
    if (sent.ok()) {
      ASSERT_TRUE(c.wait(1, std::chrono::seconds(10)));
      EXPECT_EQ(c.got[0].error_code(),
                static_cast<int>(absl::StatusCode::kUnavailable))
          << c.got[0].error_message();
    } else {
      EXPECT_EQ(sent.code(), absl::StatusCode::kUnavailable);
    }
    EXPECT_EQ(service_->calls.load(), 0);
  }
  {
    options.tls_name = "w1";
    Collect c;
    auto link = worker::make_grpc_link(address(), c.cb(), options);
    ASSERT_TRUE(link.ok()) << link.status();
    ASSERT_TRUE((*link)->send(b).ok());
    ASSERT_TRUE(c.wait(1, std::chrono::seconds(10)));
    EXPECT_EQ(c.got[0].error_code(), 0) << c.got[0].error_message();
    EXPECT_EQ(c.got[0].batch_id(), 7u);
    EXPECT_EQ(service_->calls.load(), 1);
  }
  // With TLS a link needs the peer's name; without a config, no link.
  options.tls_name = "";
  EXPECT_EQ(worker::make_grpc_link(address(), Collect().cb(), options)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      worker::make_grpc_link(address(), Collect().cb(), {}).status().code(),
      absl::StatusCode::kFailedPrecondition);
}

// ---- a real strata-worker ---------------------------------------------------

TEST(TlsWorkerProcess, RefusesPlaintextAndServesTheCoordinator) {
  const std::string dir = fresh_dir("worker-certs");
  ASSERT_TRUE(
      certs::write_cluster_certs(dir, {"coordinator", "w0", "w9"}, false).ok());
  const std::string tls = "tls:\n  ca: " + dir + "/ca.pem\n  cert: " + dir +
                          "/w0.pem\n  key: " + dir +
                          "/w0.key\n  peers: [coordinator]\n";
  worker_test::WorkerProcess w("w0", ::testing::TempDir(), 0, 1, tls);
  ASSERT_TRUE(w.ok()) << w.error();

  auto call = [&](std::shared_ptr<grpc::ChannelCredentials> creds) {
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("w0");
    auto stub = v1::Worker::NewStub(
        grpc::CreateCustomChannel(w.address(), creds, args));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    v1::WorkerHealthResponse out;
    return stub->Health(&ctx, v1::WorkerHealthRequest(), &out);
  };
  auto creds_of = [&](const std::string& name) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = read_file(dir + "/ca.pem");
    o.pem_cert_chain = read_file(dir + "/" + name + ".pem");
    o.pem_private_key = read_file(dir + "/" + name + ".key");
    return grpc::SslCredentials(o);
  };
  EXPECT_EQ(call(grpc::InsecureChannelCredentials()).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(call(creds_of("w9")).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  grpc::Status ok = call(creds_of("coordinator"));
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
