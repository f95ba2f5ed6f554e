// `strata certs DIR --names coordinator,w0,w1 [--force]`: the certificates
// of a cluster's mutual TLS (docs/security.md): DIR/ca.pem and DIR/ca.key
// (the CA), and per name DIR/NAME.pem and DIR/NAME.key, made with OpenSSL
// (proto/cluster_certs.h: EC P-256, X509 v3, CN and DNS SAN = NAME, 825
// days). Keys are written mode 0600. Existing files are refused unless
// --force. Prints the files written; exit 1 when refused, 2 for usage.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "client/cli/commands.h"
#include "proto/cluster_certs.h"

namespace strata::cli {
namespace {

struct CertsOptions {
  std::string dir;
  std::vector<std::string> names;
  bool force = false;
};

int run(const CertsOptions& o) {
  if (absl::Status st = certs::write_cluster_certs(o.dir, o.names, o.force);
      !st.ok()) {
    return report_failure("certs", "", st);
  }
  std::printf("%s/ca.pem\n%s/ca.key (keep it off the cluster's machines)\n",
              o.dir.c_str(), o.dir.c_str());
  for (const std::string& n : o.names) {
    std::printf("%s/%s.pem\n%s/%s.key\n", o.dir.c_str(), n.c_str(),
                o.dir.c_str(), n.c_str());
  }
  return 0;
}

}  // namespace

void add_certs_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<CertsOptions>();
  CLI::App* cmd = app.add_subcommand(
      "certs",
      "Make a cluster CA and a certificate + key per name for mutual TLS "
      "between coordinator and workers (DIR/ca.pem, DIR/NAME.pem, "
      "DIR/NAME.key)");
  cmd->add_option("dir", o->dir, "directory to write into (created)")
      ->required();
  cmd->add_option("--names", o->names,
                  "certificate names: the coordinator's and each worker's "
                  "`name:` (comma-separated)")
      ->delimiter(',')
      ->required();
  cmd->add_flag("--force", o->force, "replace existing files");
  cmd->callback([o, &exit_code] { exit_code = run(*o); });
}

}  // namespace strata::cli
