// HugePageArena: memory for data that lives as long as a loaded model and is
// streamed on every token (the packed weight planes).
//
// A decode step reads every weight once, so with 4 KiB pages it pays a TLB
// miss (a page walk) every 4 KiB. Transparent huge pages fix that, but only
// for 2 MiB-aligned 2 MiB ranges of one mapping asked for with
// madvise(MADV_HUGEPAGE) (THP in "madvise" mode, the Debian default); a small
// matrix's planes (a few hundred KiB) can never get one on their own. The
// arena carves every allocation out of shared chunks of at least 32 MiB that
// are 2 MiB-aligned and advised, so small planes share huge pages.
//
// Chunks are counted: a chunk whose allocations are all released is freed
// (or, for the chunk still being filled, reused from its start).
//
// Threads: allocate and release may be called from any thread.
#pragma once

#include <cstddef>

namespace strata::kernels::jit {

class HugePageArena {
 public:
  // The process's arena (allocations outlive any one model).
  static HugePageArena& global();

  // `bytes` zeroed bytes aligned to 64 bytes; bytes == 0 gives a valid
  // 64-byte block. nullptr when memory is exhausted. Release with release().
  void* allocate(size_t bytes);

  // Gives back a block from allocate(); nullptr is ignored.
  void release(void* p);

  // Bytes of chunks held now (for tests and `strata hardware`-style reports).
  size_t reserved_bytes() const;
};

// A deleter for std::unique_ptr over arena blocks.
struct HugePageArenaFree {
  void operator()(void* p) const { HugePageArena::global().release(p); }
};

}  // namespace strata::kernels::jit
