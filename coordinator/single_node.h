// Single-node mode (`strata serve MODEL.gguf`): the coordinator and N
// pipeline stages in one process, chained with in-process links (no
// sockets, no copies), behind the same Cluster, Scheduler and
// strata.v1.Inference service as a real cluster.
//
// Usage:
//   SingleNodeOptions o;  o.model = path;  o.workers = 2;
//   ASSIGN_OR_RETURN(std::unique_ptr<Cluster> cluster, make_single_node(o));
//   RETURN_IF_ERROR(cluster->wait_serving(absl::Minutes(5)));
//   InferenceService service(*cluster);  ... start_grpc_server(service, ...)
//
// Ownership: the Cluster owns the in-process workers (and their Stages).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/cluster.h"
#include "model/ggml_type.h"

namespace strata {
class Progress;  // model/progress.h
}  // namespace strata

namespace strata::coordinator {

struct SingleNodeOptions {
  std::string model;         // GGUF path
  int workers = 1;           // pipeline stages (1 .. the model's blocks)
  int threads = 0;           // total compute threads; 0: cpu::usable_threads()
  int context_length = 0;    // 0: the model's
  int max_sequences = 8;
  int prefill_chunk = 512;   // rows of one prompt chunk (ClusterConfig)
  // Prompt rows of a micro-batch while a sequence decodes (ClusterConfig;
  // kAutoPrefillChunkBesideDecode: by the stages' backend).
  int prefill_chunk_beside_decode = kAutoPrefillChunkBesideDecode;
  GgmlType kv_type = GgmlType::kF16;
  // Where every stage runs: "cpu", "cuda" or "cuda:N" (worker::
  // parse_backend_choice; a cuda stage: worker/cuda/cuda_backend.h).
  std::string backend = "cpu";
  std::string trace;         // JSON-lines file of block hashes; "": off
  std::string chat_template; // Jinja file overriding the GGUF's template; "": none
  std::string served_model_name;  // the name clients give as `model`; "": general.name
  int prefix_cache_blocks = -1;  // ClusterConfig's; 0: --prefix-cache off
  // Explicit ranges (one per worker), or empty for auto placement.
  std::vector<placement::Range> ranges;
  // Where each stage's weight repack reports progress (model/progress.h);
  // null: silent. Not owned; must outlive the Cluster.
  Progress* progress = nullptr;
  // Tests: fake detokenizers (the model's tokenizer is then optional).
  Scheduler::DetokenizerFactory detokenizers;
};

// Opens the model, makes the stages' controls and the link chain; the
// Cluster loads the shards on its own thread (wait_serving()).
// Errors: the model's (open, tokenizer, context_length), InvalidArgument
// for a bad worker count or backend name (a backend that cannot run here
// fails the stages' loads, which wait_serving() reports).
absl::StatusOr<std::unique_ptr<Cluster>> make_single_node(
    const SingleNodeOptions& options);

}  // namespace strata::coordinator
