// Embeddings from a last stage's hidden rows (Logits::kEmbedLast and
// kEmbedSum, worker/backend.h): every backend normalizes the rows with the
// model's output norm as its head does, then pools them here, so that a
// sequence's embedding is the same function of its normed rows on every
// backend. The pooling is llama.cpp's (src/llama-graph.cpp build_pooling:
// LLAMA_POOLING_TYPE_LAST takes the last row of result_norm, MEAN their
// mean); mean pooling over several chunks sums each chunk here and divides
// once at the end (the coordinator).
#pragma once

#include <cstdint>
#include <vector>

#include "worker/backend.h"

namespace strata::worker {

// The rows of a slice of `rows` rows that `how` reads: the last one
// (kEmbedLast), or all of them (kEmbedSum). `first` receives the index of
// the first, counted from the slice's start.
int embedding_rows(Logits how, int rows, int* first);

// Pools `rows` normed rows, [rows][n_embd] (what embedding_rows() named),
// into out[n_embd]: the one row as it is (kEmbedLast), or their sum in row
// order with double accumulators (kEmbedSum).
void pool_normed_rows(const float* normed, int rows, int64_t n_embd, Logits how, float* out);

// For a backend whose norm runs elsewhere (the cuda backend downloads the
// rows): RMSNorm of each of `rows` rows of x (y = x / sqrt(mean(x^2) + eps)
// * weight, the sum of squares in double as ggml's rms_norm), then
// pool_normed_rows into out[n_embd]. `scratch` is resized to rows x n_embd.
void norm_and_pool_rows(const float* x, int rows, int64_t n_embd, const float* weight, float eps,
                        Logits how, std::vector<float>* scratch, float* out);

}  // namespace strata::worker
