// libFuzzer target: the worker's control calls from a hostile peer —
// LoadShard (the request's checks, the path's confinement to model_dirs, the
// plan against the model, the memory budget, then the load), FreeSequence,
// Results' checks, Describe and Health — on a WorkerService called directly
// (worker/worker_service.h; no server, no network).
//
// Input: one byte, then a serialized request (inputs that do not parse are
// skipped). (Byte & 7) % 5: 0 LoadShardRequest, 1 FreeSequenceRequest,
// 2 ResultsRequest, 3 Describe, 4 Health. Byte bit 3 keeps the input's
// model_path (else "stories.gguf", the copy of stories260K in model_dirs)
// and shard_id (else the loaded one); bit 4 keeps a next_stage the checks
// passed (else it becomes 127.0.0.1:1, nobody, so a load links nowhere
// real). Between inputs the default shard (the whole of stories260K, id 7)
// is loaded again when a LoadShard replaced or dropped it. After each input
// Describe and Health must agree with what is loaded.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"
#include "spdlog/spdlog.h"
#include "strata/v1/worker.pb.h"
#include "tests/fuzz/fuzz_proto.h"
#include "tests/fuzz/worker_service_fuzz_util.h"
#include "worker/shard_plan.h"

namespace {

using namespace strata;  // NOLINT: a test harness
using fuzz::check;
using fuzz::require;

constexpr uint64_t kDefaultShard = 7;

v1::LoadShardRequest default_request() {
  v1::LoadShardRequest r;
  r.set_shard_id(kDefaultShard);
  r.set_model_path("stories.gguf");
  r.set_first_block(0);
  r.set_last_block(5);
  r.set_embedding(true);
  r.set_head(true);
  r.set_n_ctx(64);
  r.set_max_sequences(4);
  r.set_max_batch_rows(32);
  return r;
}

worker::WorkerService& service() {
  static worker::WorkerService* s = [] {
    // A line per LoadShard would be most of the time (STRATA_FUZZ_VERBOSE
    // keeps them).
    if (std::getenv("STRATA_FUZZ_VERBOSE") == nullptr) spdlog::set_level(spdlog::level::off);
    return new worker::WorkerService(fuzz::service_config());
  }();
  return *s;
}

v1::WorkerHealthResponse health() {
  grpc::ServerContext context;
  v1::WorkerHealthRequest request;
  v1::WorkerHealthResponse response;
  check(service().Health(&context, &request, &response).ok(), "Health answers");
  return response;
}

void ensure_default_shard() {
  if (health().shard_id() == kDefaultShard) return;
  grpc::ServerContext context;
  const v1::LoadShardRequest request = default_request();
  v1::LoadShardResponse response;
  const grpc::Status st = service().LoadShard(&context, &request, &response);
  require(st.ok(), "default shard: " + st.error_message());
}

// Describe and Health agree with each other and with a loaded shard.
void check_consistent() {
  grpc::ServerContext context;
  v1::DescribeRequest request;
  v1::DescribeResponse d;
  check(service().Describe(&context, &request, &d).ok(), "Describe answers");
  const v1::WorkerHealthResponse h = health();
  check(d.worker_id() == "fuzz", "worker_id from the config");
  check(d.protocol_version() == 1, "protocol_version");
  if (d.has_shard()) {
    check(h.state() == "serving", "a loaded shard serves");
    check(h.shard_id() == d.shard().shard_id(), "Health and Describe name one shard");
    const v1::ShardInfo& s = d.shard();
    check(s.first_block() >= 0 && s.first_block() < s.last_block() &&
              s.last_block() <= s.n_layer(),
          "the loaded range lies in the model");
    check(s.weight_bytes() + s.kv_bytes() <= (uint64_t{64} << 20),
          "the loaded shard fits the memory budget");
    check(h.live_sequences() == 0, "no sequence is live (none was started)");
  } else {
    check(h.state() == "idle", "no shard: idle");
    check(h.shard_id() == 0, "no shard: no shard_id");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::quiet_protobuf();
  if (size < 1) return 0;
  ensure_default_shard();
  const uint8_t op = (data[0] & 7) % 5;
  const bool keep_raw = (data[0] & 8) != 0;
  const bool keep_next = (data[0] & 16) != 0;
  const int n = static_cast<int>(size - 1);
  const uint8_t* bytes = data + 1;
  grpc::ServerContext context;
  worker::WorkerService& s = service();

  switch (op) {
    case 0: {
      v1::LoadShardRequest request;
      if (!request.ParseFromArray(bytes, n)) return 0;
      if (!keep_raw) request.set_model_path("stories.gguf");
      const absl::Status checked = worker::check_load_request(request);
      if (checked.ok() && !request.next_stage().empty() && !keep_next) {
        request.set_next_stage("127.0.0.1:1");
      }
      v1::LoadShardResponse response;
      const grpc::Status st = s.LoadShard(&context, &request, &response);
      fuzz::note(st.ok() ? "loaded" : st.error_message());
      if (!checked.ok()) {
        check(!st.ok(), "a request the checks refuse is not loaded");
        check(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT,
              "a refused request is INVALID_ARGUMENT");
      }
      if (st.ok()) {
        const v1::ShardInfo& info = response.shard();
        check(info.shard_id() == request.shard_id(), "shard_id echoed");
        check(info.first_block() == request.first_block() &&
                  info.last_block() == request.last_block(),
              "the range loaded is the one asked for");
        check(health().shard_id() == request.shard_id(), "Health names the new shard");
      } else {
        check(!st.error_message().empty(), "a refusal says why");
      }
      break;
    }
    case 1: {
      v1::FreeSequenceRequest request;
      if (!request.ParseFromArray(bytes, n)) return 0;
      if (!keep_raw) request.set_shard_id(kDefaultShard);
      v1::FreeSequenceResponse response;
      const grpc::Status st = s.FreeSequence(&context, &request, &response);
      fuzz::note(st.ok() ? "freed " + std::to_string(response.freed()) : st.error_message());
      if (st.ok()) {
        check(request.shard_id() == kDefaultShard, "FreeSequence checks shard_id");
        check(response.freed() == 0, "nothing live to free");
      } else {
        check(!st.error_message().empty(), "a refusal says why");
      }
      break;
    }
    case 2: {
      v1::ResultsRequest request;
      if (!request.ParseFromArray(bytes, n)) return 0;
      // A request the checks let through opens the stream (a writer this
      // harness does not have): only refused ones are driven.
      if (request.shard_id() == kDefaultShard) return 0;
      const grpc::Status st = s.Results(&context, &request, nullptr);
      check(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT,
            "Results for another shard is INVALID_ARGUMENT");
      break;
    }
    case 3: {
      v1::DescribeRequest request;
      if (!request.ParseFromArray(bytes, n)) return 0;
      v1::DescribeResponse response;
      check(s.Describe(&context, &request, &response).ok(), "Describe answers");
      break;
    }
    default: {
      v1::WorkerHealthRequest request;
      if (!request.ParseFromArray(bytes, n)) return 0;
      v1::WorkerHealthResponse response;
      check(s.Health(&context, &request, &response).ok(), "Health answers");
      break;
    }
  }
  check_consistent();
  return 0;
}
