// Environment variables in config files: `${VAR}` and `${VAR:-default}` in
// any value of a YAML config (the coordinator's cluster config, a worker's
// config), expanded once, after the YAML is parsed and before any value is
// read, so that one file serves every pod of a Kubernetes group or every
// machine of a cluster (`name: w${LWS_WORKER_INDEX}`, `api_key:
// ${STRATA_API_KEY}`, `memory_budget: ${BUDGET:-28Gi}`).
//
// The form is the shell's (POSIX parameter expansion, the two forms above
// only): `${VAR}` is VAR's value; `${VAR:-default}` is the default when
// VAR is unset or empty; `$$` is one `$`; a `$` followed by anything else
// stays as it is. Names are [A-Za-z_][A-Za-z0-9_]*. Only values are
// expanded, never keys, and an expanded value is one scalar: a variable
// cannot add keys or list items, and its value is not expanded again.
//
// Errors (InvalidArgument) name the value's path:
//   "workers[1].address: ${W1} is not set"
//   "tls.cert: \"${X\" has an unclosed ${"
//
// Thread-safety: plain functions; the process lookup reads the environment
// with getenv (do not call it while another thread changes the
// environment).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace YAML {
class Node;
}

namespace strata::config {

// VAR -> its value, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;

// The process's environment (getenv).
EnvLookup process_env();

// Expands `text`. `where` names the value in errors ("tls.cert").
absl::StatusOr<std::string> expand_env(std::string_view text,
                                       const EnvLookup& env,
                                       std::string_view where);

// Expands every scalar value of `root` in place (keys untouched); values
// without a `$` keep their node (and its line number for messages). An
// alias is its anchor's node (yaml-cpp shares it), so each node is
// expanded once however many places hold it, itself included. Errors
// (InvalidArgument): a variable's (expand_env), or values nested deeper
// than 64 levels.
absl::Status expand_env_in_yaml(YAML::Node& root, const EnvLookup& env);

}  // namespace strata::config
