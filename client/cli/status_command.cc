// `strata status --server HOST:PORT [--json]`: the cluster as its
// coordinator sees it (ClusterStatus): serving state, the model, and each
// worker in pipeline order with its block range, memory and health.
// --json prints one object with the proto's field names; the state is
// "serving", "degraded", "starting" or "unspecified".
//
// Exit status (so that it can be a probe; docs/client.md):
//   0  the cluster is serving and every worker it lists is serving or a
//      reachable spare;
//   3  it answered but is not serving: starting (shards loading), degraded
//      (a pipeline worker down), or serving without a worker it lists (a
//      worker unreachable, loading, or restarted; the pipeline may have
//      moved to the workers left); the status is printed all the same, and
//      one line on stderr says why ("strata status: not serving: ...");
//   1  the server could not be asked (one line naming the server and the
//      gRPC status: unreachable, refused, a deadline, a bad API key);
//   2  usage.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "client/cli/commands.h"
#include "client/cli/remote.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

struct StatusFlags {
  ServerFlags server;
  bool json = false;
};

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

nlohmann::json model_json(const ModelInfo& m) {
  return {{"name", m.name},
          {"path", m.path},
          {"architecture", m.architecture},
          {"n_layer", m.n_layer},
          {"n_vocab", m.n_vocab},
          {"context_length", m.context_length},
          {"chat_template_family", m.chat_template_family}};
}

std::string status_json(const ClusterStatus& s) {
  nlohmann::json workers = nlohmann::json::array();
  for (const WorkerStatus& w : s.workers) {
    workers.push_back({{"address", w.address},
                       {"name", w.name},
                       {"state", w.state},
                       {"first_block", w.first_block},
                       {"last_block", w.last_block},
                       {"embedding", w.embedding},
                       {"head", w.head},
                       {"weight_bytes", w.weight_bytes},
                       {"kv_bytes", w.kv_bytes},
                       {"memory_budget_bytes", w.memory_budget_bytes},
                       {"device", w.device},
                       {"last_error", w.last_error},
                       {"last_seen_ms_ago", w.last_seen_ms_ago},
                       {"link_to_next", w.link_to_next}});
  }
  nlohmann::json j = {{"state", serving_state_name(s.state)},
                      {"model", model_json(s.model)},
                      {"workers", std::move(workers)},
                      {"active_sequences", s.active_sequences},
                      {"max_sequences", s.max_sequences},
                      {"requests_served", s.requests_served},
                      {"queued_requests", s.queued_requests}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

void print_status(const ClusterStatus& s) {
  const ModelInfo& m = s.model;
  std::printf("state: %s\n", serving_state_name(s.state));
  std::printf("model: %s (%s, %d blocks, vocabulary %d, context %d%s%s) %s\n",
              m.name.c_str(), m.architecture.c_str(), m.n_layer, m.n_vocab,
              m.context_length, m.chat_template_family.empty() ? "" : ", chat ",
              m.chat_template_family.c_str(), m.path.c_str());
  std::printf(
      "sequences: %d active of %d, %d requests queued; %llu requests served\n",
      s.active_sequences, s.max_sequences, s.queued_requests,
      static_cast<unsigned long long>(s.requests_served));
  std::printf("workers (pipeline order): %zu\n", s.workers.size());
  for (size_t i = 0; i < s.workers.size(); ++i) {
    const WorkerStatus& w = s.workers[i];
    // 0: no budget (a worker in the server's own process).
    char budget[64] = "no budget";
    if (w.memory_budget_bytes != 0) {
      std::snprintf(budget, sizeof budget, "budget %.1f MiB",
                    mib(w.memory_budget_bytes));
    }
    std::printf(
        "  %zu  %s%s  %s  blocks [%d, %d)%s%s  weights %.1f MiB  KV %.1f MiB  "
        "%s  seen %.0f ms ago  %s%s%s\n",
        i, w.name.empty() || w.name == w.address ? "" : (w.name + " ").c_str(),
        w.address.c_str(), w.state.c_str(), w.first_block, w.last_block,
        w.embedding ? " +embedding" : "", w.head ? " +head" : "",
        mib(w.weight_bytes), mib(w.kv_bytes), budget, w.last_seen_ms_ago,
        w.device.c_str(), w.link_to_next.empty() ? "" : "  link to next: ",
        w.link_to_next.c_str());
    if (!w.last_error.empty()) {
      std::printf("     last error: %s\n", w.last_error.c_str());
    }
  }
}

constexpr int kServingExit = 0;
constexpr int kNotServingExit = 3;

// Why an answered ClusterStatus is not serving: "" when it serves and each
// worker is "serving" or "spare" (a reachable worker outside the pipeline);
// else the state, or the first worker in another state.
std::string not_serving_reason(const ClusterStatus& s) {
  if (s.state != ServingState::kServing) {
    return std::string("state ") + serving_state_name(s.state);
  }
  for (const WorkerStatus& w : s.workers) {
    if (w.state == "serving" || w.state == "spare") continue;
    std::string who = w.name.empty() || w.name == w.address
                          ? w.address
                          : w.name + " (" + w.address + ")";
    return "worker " + who + " is " + w.state;
  }
  return "";
}

int run_status(const StatusFlags& f) {
  std::unique_ptr<Client> client = connect_or_report(f.server);
  if (client == nullptr) return 1;
  auto status = client->cluster_status();
  if (!status.ok()) return report_error(f.server.server, status.status());
  if (f.json) {
    std::cout << status_json(*status) << std::flush;
  } else {
    print_status(*status);
  }
  const std::string why = not_serving_reason(*status);
  if (why.empty()) return kServingExit;
  std::fprintf(stderr, "strata status: not serving: %s\n", why.c_str());
  return kNotServingExit;
}

}  // namespace

void add_status_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<StatusFlags>();
  CLI::App* cmd = app.add_subcommand(
      "status",
      "Show a strata cluster: state, model, workers and their shards.\n"
      "Exit status: 0 serving, every worker up; 3 answered but not serving "
      "(starting, degraded, a worker down); 1 the server cannot be reached or "
      "the call "
      "failed; 2 usage");
  add_server_flags(cmd, f->server);
  cmd->add_flag("--json", f->json, "print one JSON object");
  cmd->callback([f, &exit_code] { exit_code = run_status(*f); });
}

}  // namespace strata::cli
