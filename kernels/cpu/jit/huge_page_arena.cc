#include "kernels/cpu/jit/huge_page_arena.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#if defined(__SANITIZE_ADDRESS__)
#define STRATA_ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STRATA_ARENA_ASAN 1
#endif
#endif
#ifdef STRATA_ARENA_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace strata::kernels::jit {
namespace {

// Under AddressSanitizer, chunks start poisoned, each block is unpoisoned
// for exactly its bytes while it is live, and blocks are kept 64 bytes
// apart, so a kernel reading past its plane or a released plane is still
// reported as with malloc.
#ifdef STRATA_ARENA_ASAN
constexpr size_t kRedzone = 64;
void poison(void* p, size_t n) { ASAN_POISON_MEMORY_REGION(p, n); }
void unpoison(void* p, size_t n) { ASAN_UNPOISON_MEMORY_REGION(p, n); }
#else
constexpr size_t kRedzone = 0;
void poison(void*, size_t) {}
void unpoison(void*, size_t) {}
#endif

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kMinChunk = size_t{32} << 20;
constexpr size_t kAlign = 64;

struct Chunk {
  size_t size = 0;   // bytes, a multiple of kHugePage
  size_t used = 0;   // bump offset
  size_t live = 0;   // blocks handed out and not released
};

struct State {
  std::mutex mu;
  std::map<uintptr_t, Chunk> chunks;  // by base address
  std::map<uintptr_t, size_t> blocks;  // live blocks: address -> bytes
  uintptr_t current = 0;              // the chunk being filled, 0 if none
  size_t reserved = 0;
};

State& state() {
  static State* s = new State;  // never destroyed: blocks may outlive statics
  return *s;
}

}  // namespace

HugePageArena& HugePageArena::global() {
  static HugePageArena arena;
  return arena;
}

void* HugePageArena::allocate(size_t bytes) {
  if (bytes > SIZE_MAX - kHugePage) return nullptr;
  const size_t need =
      (bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign) + kRedzone;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  // A block of half a chunk or more gets a chunk of its own, so that it
  // does not end the filling of the shared one.
  const bool own = need >= kMinChunk / 2;
  uintptr_t base = own ? 0 : s.current;
  if (base != 0 && s.chunks[base].size - s.chunks[base].used < need) base = 0;
  if (base == 0) {
    size_t size = (need + kHugePage - 1) / kHugePage * kHugePage;
    if (!own) size = kMinChunk;
    void* p = std::aligned_alloc(kHugePage, size);
    if (p == nullptr) return nullptr;
    madvise(p, size, MADV_HUGEPAGE);  // advice only: failure is harmless
    poison(p, size);
    base = reinterpret_cast<uintptr_t>(p);
    s.chunks[base].size = size;
    s.reserved += size;
    if (!own) {
      // The full chunk left behind is freed now if nothing in it is live.
      auto old = s.chunks.find(s.current);
      if (old != s.chunks.end() && old->second.live == 0) {
        s.reserved -= old->second.size;
        unpoison(reinterpret_cast<void*>(old->first), old->second.size);
        std::free(reinterpret_cast<void*>(old->first));
        s.chunks.erase(old);
      }
      s.current = base;
    }
  }
  Chunk& chunk = s.chunks[base];
  uint8_t* block = reinterpret_cast<uint8_t*>(base) + chunk.used;
  chunk.used += need;
  ++chunk.live;
  const size_t usable = kRedzone > 0 && bytes > 0 ? bytes : need - kRedzone;
  s.blocks[reinterpret_cast<uintptr_t>(block)] = usable;
  unpoison(block, usable);
  std::memset(block, 0, usable);
  return block;
}

void HugePageArena::release(void* p) {
  if (p == nullptr) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto block = s.blocks.find(a);
  if (block == s.blocks.end()) std::abort();  // not a live arena block
  poison(p, block->second);
  s.blocks.erase(block);
  auto it = std::prev(s.chunks.upper_bound(a));  // the chunk holding it
  Chunk& c = it->second;
  if (--c.live > 0) return;
  if (it->first == s.current) {
    c.used = 0;  // refill the open chunk from its start
    return;
  }
  s.reserved -= c.size;
  unpoison(reinterpret_cast<void*>(it->first), c.size);
  std::free(reinterpret_cast<void*>(it->first));
  s.chunks.erase(it);
}

size_t HugePageArena::reserved_bytes() const {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.reserved;
}

}  // namespace strata::kernels::jit
