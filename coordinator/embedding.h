// Embeddings: a v1::EmbedRequest (inference.proto) checked, tokenized and
// run on the Scheduler, one prefill-only sequence per input
// (SequenceRequest::embed), each answered with its pooled hidden state
// after the output norm, L2-normalized unless asked not to. The gRPC
// Inference.Embed handler and HTTP /v1/embeddings (coordinator/http/) both
// call it, so both accept and refuse the same requests with the same
// message.
//
// The vector is what llama.cpp's embedding mode gives for the same ids
// (src/llama-graph.cpp build_pooling over result_norm; tools/server's
// /v1/embeddings normalizes with common_embd_normalize(.., 2)); the pooling
// is the GGUF's `{arch}.pooling_type` when that is mean or last, else last,
// as vLLM pools a decoder model.
//
// Errors name the field: INVALID_ARGUMENT ("inputs: 2049 inputs; at most
// 2048", "inputs[3].ids[0]: 60000 is out of range [0, 49152)",
// "inputs[1]: empty", "inputs: more than 300000 tokens in all (300120 by
// inputs[7]); ..."), NOT_FOUND for another model, OUT_OF_RANGE for an
// input longer than the context ("inputs[0]: 5000 tokens exceed the context
// of 4096"); then the Scheduler's (RESOURCE_EXHAUSTED, UNAVAILABLE,
// CANCELLED) and the workers'.
//
// Threads: any thread; run_embed blocks its caller until every input is
// done.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/cluster.h"
#include "coordinator/step_scheduler.h"
#include "strata/v1/inference.pb.h"

namespace strata::coordinator {

inline constexpr int kMaxEmbedInputs = 2048;  // OpenAI's bound on `input`
// The tokens of all inputs together: OpenAI's bound for one embeddings
// request (300,000). What one request may cost is bounded by it (~5
// minutes of prefill for SmolLM2 on 2 cores), not by 2048 x the context.
inline constexpr int64_t kMaxEmbedTokens = 300000;
// The text of all inputs together (each input: at most 4 MiB, as a prompt).
inline constexpr size_t kMaxEmbedTextBytes = 32u << 20;

// The pooling `requested` resolves to on `model`: MEAN or LAST as asked;
// DEFAULT: the GGUF's {arch}.pooling_type when it is 1 (mean) or 3 (last),
// llama.cpp's enum llama_pooling_type, else last. INVALID_ARGUMENT for a
// default on a model that asks for cls (2) or rank (4) pooling ("pooling:
// the model's bert.pooling_type is 2 (cls), which is not served; ask for
// mean or last").
absl::StatusOr<Pooling> resolve_pooling(const ServedModel& model, v1::Pooling requested);

// "mean" or "last".
const char* pooling_name(Pooling pooling);

// The request checked against inference.proto's bounds and its inputs as
// token ids, one prompt per input, each 1 .. n_ctx ids: a text is
// tokenized as llama.cpp's server tokenizes an embedding input (BOS and EOS
// as the vocabulary's add_bos / add_eos say, special-token text read as the
// special token); ids are used as given.
absl::StatusOr<std::vector<std::vector<int32_t>>> prepare_embed_inputs(
    const ServedModel& model, const v1::EmbedRequest& request);

// L2-normalizes `v` in place (a zero vector stays zero), as llama.cpp's
// common_embd_normalize with norm 2.
void l2_normalize(std::vector<float>& v);

// Runs `request` on the cluster: its inputs as sequences, in order, at
// most half the scheduler's sequence slots at a time (at least one), so
// requests beside a large one always find slots. `cancelled` is asked
// before each wait (at most 20 ms) for a result; when it says true every
// sequence of the request is cancelled and CANCELLED returned.
absl::StatusOr<v1::EmbedResponse> run_embed(Cluster& cluster, const v1::EmbedRequest& request,
                                            const std::function<bool()>& cancelled);

}  // namespace strata::coordinator
