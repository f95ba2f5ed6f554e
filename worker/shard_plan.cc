#include "worker/shard_plan.h"

#include <limits>
#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "worker/kv_cache.h"
#include "worker/nccl_frame.h"

namespace strata::worker {

namespace {

// absl::string_view: Debian's abseil does not alias std::string_view.
absl::Status bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// a * b, saturating at the largest uint64 (sizes then fail the budget).
uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    return std::numeric_limits<uint64_t>::max();
  }
  return r;
}

// "host:port" with a port in 1..65535 and a non-empty host ("[::1]:5" too).
bool is_host_port(absl::string_view s) {
  const size_t colon = s.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return false;
  uint32_t port = 0;
  if (!absl::SimpleAtoi(s.substr(colon + 1), &port)) return false;
  if (port < 1 || port > 65535) return false;
  for (char c : s) {
    if (c <= ' ' || c == '/' || c > '~') return false;
  }
  return true;
}

// Which tensors belong to the shard: its blocks' "blk.N." tensors, the
// embedding on the first stage, the output norm and head (or the tied
// embedding) on the last, the RoPE factors everywhere.
template <typename Shard>  // v1::ShardInfo or v1::LoadShardRequest
bool in_shard(absl::string_view name, const Shard& s, bool has_output) {
  if (absl::StartsWith(name, "blk.")) {
    const int64_t block = arch::block_index(std::string_view(name.data(), name.size()));
    return block >= 0 && block >= s.first_block() && block < s.last_block();
  }
  if (name == "token_embd.weight") {
    return s.embedding() || (s.head() && !has_output);
  }
  if (name == "output_norm.weight" || name == "output.weight") return s.head();
  return name == "rope_freqs.weight";
}

}  // namespace

absl::Status check_load_request(const v1::LoadShardRequest& r) {
  if (r.shard_id() == 0) return bad("shard_id", "must be nonzero");
  if (r.model_path().empty()) return bad("model_path", "empty");
  if (r.model_path().size() > kMaxPathBytes) {
    return bad("model_path", absl::StrCat(r.model_path().size(),
                                          " bytes exceed ", kMaxPathBytes));
  }
  if (r.model_path().find('\0') != std::string::npos) {
    return bad("model_path", "contains a NUL byte");
  }
  if (r.first_block() < 0) {
    return bad("first_block", absl::StrCat(r.first_block(), " is negative"));
  }
  if (r.last_block() <= r.first_block()) {
    return bad("last_block",
               absl::StrCat(r.last_block(), " must exceed first_block ",
                            r.first_block()));
  }
  if (r.embedding() != (r.first_block() == 0)) {
    return bad(
        "embedding",
        absl::StrCat(r.embedding() ? "true" : "false", ", but first_block is ",
                     r.first_block(), " (the first stage holds it)"));
  }
  if (r.n_ctx() < 1 || r.n_ctx() > kMaxContext) {
    return bad("n_ctx", absl::StrCat(r.n_ctx(), " is out of range [1, ",
                                     kMaxContext, "]"));
  }
  if (r.max_sequences() < 1 || r.max_sequences() > kMaxSequences) {
    return bad("max_sequences",
               absl::StrCat(r.max_sequences(), " is out of range [1, ",
                            kMaxSequences, "]"));
  }
  if (r.max_batch_rows() < 1 || r.max_batch_rows() > kMaxBatchRows) {
    return bad("max_batch_rows",
               absl::StrCat(r.max_batch_rows(), " is out of range [1, ",
                            kMaxBatchRows, "]"));
  }
  if (!r.kv_type().empty() && !parse_kv_type(r.kv_type())) {
    return bad("kv_type", absl::StrCat("\"", r.kv_type().substr(0, 32),
                                       "\" is not \"f16\" or \"f32\""));
  }
  if (r.prefix_cache_blocks() < 0 || r.prefix_cache_blocks() > kMaxPrefixBlocks) {
    return bad("prefix_cache_blocks",
               absl::StrCat(r.prefix_cache_blocks(), " is out of range [0, ",
                            kMaxPrefixBlocks, "]"));
  }
  if (r.prefix_cache_blocks() > 0 &&
      (r.prefix_block_tokens() < 1 || r.prefix_block_tokens() > kMaxBatchRows)) {
    return bad("prefix_block_tokens",
               absl::StrCat(r.prefix_block_tokens(), " is out of range [1, ",
                            kMaxBatchRows, "] (prefix_cache_blocks is ",
                            r.prefix_cache_blocks(), ")"));
  }
  if (r.next_stage().size() > kMaxAddressBytes) {
    return bad("next_stage", absl::StrCat(r.next_stage().size(),
                                          " bytes exceed ", kMaxAddressBytes));
  }
  if (!r.head() && r.next_stage().empty()) {
    return bad("next_stage", "required on a stage without the head");
  }
  if (r.head() && !r.next_stage().empty()) {
    return bad("next_stage", "must be empty on the last stage (head)");
  }
  if (r.next_stage_name().size() > 128) {
    return bad("next_stage_name", absl::StrCat(r.next_stage_name().size(), " bytes exceed 128"));
  }
  if (!r.next_stage().empty() && !is_host_port(r.next_stage())) {
    return bad("next_stage",
               absl::StrCat("\"", r.next_stage(), "\" is not host:port"));
  }
  return absl::OkStatus();
}

absl::Status check_link_nccl(const v1::LinkNcclRequest& r, const v1::ShardInfo& shard) {
  if (r.shard_id() != shard.shard_id()) {
    return bad("shard_id", absl::StrCat(r.shard_id(), ", but the loaded shard is ",
                                        shard.shard_id()));
  }
  if (!r.has_next() && !r.has_previous()) return bad("next", "neither next nor previous given");
  // Each id exactly an ncclUniqueId's bytes, and a stage on that side.
  auto check = [&](const char* field, const v1::NcclLinkSetup& setup, bool has_peer,
                   const char* no_peer) -> absl::Status {
    if (!has_peer) return bad(field, no_peer);
    if (setup.forward_id().size() != kNcclIdBytes) {
      return bad(absl::StrCat(field, ".forward_id"),
                 absl::StrCat(setup.forward_id().size(), " bytes, expected ", kNcclIdBytes));
    }
    if (setup.results_id().size() != kNcclIdBytes) {
      return bad(absl::StrCat(field, ".results_id"),
                 absl::StrCat(setup.results_id().size(), " bytes, expected ", kNcclIdBytes));
    }
    return absl::OkStatus();
  };
  if (r.has_next()) {
    absl::Status st = check("next", r.next(), !shard.head(),
                            "given to the last stage (head): there is no next stage");
    if (!st.ok()) return st;
  }
  if (r.has_previous()) {
    absl::Status st = check("previous", r.previous(), !shard.embedding(),
                            "given to the first stage: there is no previous stage");
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

uint64_t kv_bytes_per_position(const arch::Hyperparameters& hp, int n_blocks,
                               GgmlType kv_type) {
  const uint64_t elem = kv_type == GgmlType::kF32 ? 4 : 2;
  const uint64_t per_block =
      mul_sat(static_cast<uint64_t>(hp.n_head_kv),
              static_cast<uint64_t>(hp.head_dim_k) + hp.head_dim_v);
  return mul_sat(mul_sat(per_block, elem), static_cast<uint64_t>(n_blocks));
}

absl::StatusOr<ShardPlan> plan_shard(const v1::LoadShardRequest& r) {
  if (absl::Status st = check_load_request(r); !st.ok()) return st;
  // Only the parts that hold the shard's tensors (and the first, the
  // metadata) are mapped; the others may be absent from this disk. The head
  // keeps the embedding's part too, in case the output head is tied to it.
  auto opened = gguf::GgufModel::open_shard(
      r.model_path(), [&r](std::string_view name) {
        return in_shard(absl::string_view(name.data(), name.size()), r,
                        /*has_output=*/false);
      });
  if (!opened.ok()) return opened.status();
  ShardPlan plan;
  plan.model = std::shared_ptr<const gguf::GgufModel>(std::move(*opened));
  auto hp = arch::read_hyperparameters(plan.model->first());
  if (!hp.ok()) return hp.status();
  plan.hp = *hp;
  if (r.last_block() > plan.hp.n_layer) {
    return bad("last_block",
               absl::StrCat(r.last_block(), " exceeds the ", plan.hp.n_layer,
                            " blocks of the model"));
  }
  if (r.head() != (r.last_block() == plan.hp.n_layer)) {
    return bad("head",
               absl::StrCat(r.head() ? "true" : "false", ", but last_block is ",
                            r.last_block(), " of ", plan.hp.n_layer,
                            " (the last stage holds it)"));
  }
  if (plan.hp.n_ctx_train > 0 && r.n_ctx() > plan.hp.n_ctx_train) {
    return bad("n_ctx", absl::StrCat(r.n_ctx(),
                                     " exceeds the model's context "
                                     "length ",
                                     plan.hp.n_ctx_train));
  }
  plan.kv_type = parse_kv_type(r.kv_type()).value_or(GgmlType::kF16);  // "" is f16
  plan.trace = r.trace();

  v1::ShardInfo& s = plan.info;
  s.set_shard_id(r.shard_id());
  s.set_model_path(r.model_path());
  s.set_first_block(r.first_block());
  s.set_last_block(r.last_block());
  s.set_embedding(r.embedding());
  s.set_head(r.head());
  s.set_n_layer(plan.hp.n_layer);
  s.set_n_embd(plan.hp.n_embd);
  s.set_n_ctx(r.n_ctx());
  s.set_max_sequences(r.max_sequences());
  s.set_max_batch_rows(r.max_batch_rows());
  s.set_next_stage(r.next_stage());
  s.set_prefix_cache_blocks(r.prefix_cache_blocks());
  s.set_prefix_block_tokens(r.prefix_cache_blocks() > 0 ? r.prefix_block_tokens() : 0);
  // n_vocab as the embedding (or head) tensor has it; the backend checks it.
  const gguf::TensorInfo* emb = plan.model->find_tensor("token_embd.weight");
  if (emb != nullptr && emb->shape.size() == 2) {
    s.set_n_vocab(static_cast<int32_t>(emb->shape[1]));
  } else {
    s.set_n_vocab(plan.hp.n_vocab);
  }

  const bool has_output = plan.model->find_tensor("output.weight") != nullptr;
  uint64_t weights = 0;
  for (const gguf::TensorInfo& t : plan.model->tensors()) {
    if (in_shard(t.name, s, has_output)) weights += t.n_bytes;
  }
  s.set_weight_bytes(weights);
  const uint64_t per_pos = kv_bytes_per_position(
      plan.hp, r.last_block() - r.first_block(), plan.kv_type);
  // The sequences' caches and the prefix cache's block store.
  const uint64_t positions =
      mul_sat(static_cast<uint64_t>(r.n_ctx()), static_cast<uint64_t>(r.max_sequences())) +
      static_cast<uint64_t>(s.prefix_cache_blocks()) *
          static_cast<uint64_t>(s.prefix_block_tokens());
  s.set_kv_bytes(mul_sat(per_pos, positions));
  return plan;
}

}  // namespace strata::worker
