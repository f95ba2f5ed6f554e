// Split-invariance tracing (debug): a short hash of each block's output row,
// so two runs of the same prompt (different splits, or a split against one
// process) can be diffed to the first block and worker where they part.
//
// The hash is FNV-1a 64 (Fowler, Noll, Vo) over the row's f32 values as
// little-endian bytes: bit-identical rows give identical hashes, and any
// difference, even one ulp, changes the hash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::worker {

// FNV-1a 64 of `n` bytes.
uint64_t fnv1a64(const void* bytes, size_t n);

// Appends to `out` the hash of each of the n_rows rows of x ([n_rows][width]
// f32). Allocates only when `out` grows past its capacity.
void append_row_hashes(const float* x, int n_rows, int64_t width,
                       std::vector<uint64_t>* out);

}  // namespace strata::worker
