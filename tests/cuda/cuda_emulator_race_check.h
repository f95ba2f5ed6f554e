// The CPU emulation's race check (tests/cuda/cuda_emulator.h runs the
// kernels; this watches their shared memory): two threads of a block
// writing one byte of shared memory with no barrier between, and reads of
// shared memory the block never wrote. The emulator calls it at each
// block's start and each thread's stop; tests open a RaceCheckScope and
// read its reports. Linux, with a linker that bounds a named section with
// __start_ and __stop_ symbols (GNU ld, gold, lld).
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace strata::cuda_emulation {

// The race check (RaceCheckScope, for tests): a block's shared memory as a
// device gives it, and the writes two of its threads make to one byte with
// nothing ordering them. `__shared__` variables live in the section
// "strata_shared" (cuda_emulator.h's __shared__), which the linker
// bounds with __start_strata_shared and __stop_strata_shared, so the check
// sees them all:
// - at each block's start it fills the section with 0xFF bytes (shared
//   memory starts undefined on a device; 0xFFFF is a NaN in f16,
//   0xFFFFFFFF a NaN in f32 and -1 in an int), so a kernel that reads what
//   the block never wrote gets NaNs here, not a block before's values;
// - each time a thread stops (at a barrier, before and after an atomic, at
//   its end) it compares the section with what it was when the thread
//   before stopped: the bytes that changed are this thread's writes since
//   (one thread runs between two stops). A write to a byte another thread
//   of the block wrote since the last barrier they both passed (the
//   block's, or their warp's when both are lanes of one warp) is a race
//   unless both were atomics: on a device one of them may be lost, or the
//   byte ends as either. This is what the schedules cannot show: a thread
//   here runs to its next barrier, so a read, add and write is never
//   interleaved.
// Only the pages written since the last stop are compared: the pages the
// section spans stay read-only from a block's start to the scope's end,
// and the first write to one faults (SIGSEGV) into race_check_on_fault,
// which notes the page and lets the write through. The first of them may
// hold the end of .data too (the last holds none: .bss starts a page of
// its own, bss_after_shared_section below): a write to
// that is let through the same way, at the cost of a fault, and a system
// call writing there would fail (EFAULT) instead; nothing the emulated
// kernels or the tests call does.
// What it does not see: a write of the value the byte already holds, reads
// (a read racing a write shows as results that change with the schedule),
// and global memory.
extern "C" {
extern char __start_strata_shared[] __attribute__((weak));
extern char __stop_strata_shared[] __attribute__((weak));
}
// The thread a stop is of: its block and thread indices and where its
// block's and warp's barriers stand (their generations: barriers passed).
struct RaceCheckThread {
  unsigned block_index = 0;  // blockIdx.x
  unsigned thread = 0;       // in the block, x-major
  uint64_t block_generation = 0;
  uint64_t warp_generation = 0;
};
struct RaceCheck {
  static constexpr size_t kMaxReports = 8;
  // A byte's last write in the block.
  struct Write {
    uint64_t block = 0;             // the block's serial number (0: not in any)
    uint64_t block_generation = 0;  // its block barrier's generation then
    uint64_t warp_generation = 0;   // its warp barrier's
    unsigned thread = 0;
    bool atomic = false;
    const char* file = nullptr;  // where the writer stopped after it
    int line = 0;
  };
  bool on = false;
  uint64_t block = 0;               // the running block's serial number
  std::vector<unsigned char> seen;  // the section at the last stop
  std::vector<Write> last;          // [byte of the section]
  // The last report's race: bytes [begin, end) written by `first`, then
  // by `second`, in block `block`; `how`: its text after the bytes.
  struct Report {
    uint64_t block = 0;
    unsigned first = 0, second = 0;
    size_t begin = 0, end = 0;
    std::string how;
  };
  std::vector<std::string> reports;  // the first kMaxReports races, described
  Report last_report;
  size_t races = 0;  // bytes written racing, in all
  // The pages the section spans, read-only from a block's start to the
  // scope's end, and those written since the last stop. On the heap: the fault handler writes
  // there only (a write to a read-only page in a handler would kill the
  // process, and this struct may share a page with the section).
  struct Pages {
    size_t page = 0;  // bytes
    unsigned char* begin = nullptr;
    unsigned char* end = nullptr;
    std::vector<unsigned char> written;  // [page]: written since the last stop
    std::vector<size_t> list;            // those pages (room for all, made up front)
    size_t n_written = 0;
  };
  Pages* pages = nullptr;  // the scope's
  struct sigaction previous = {};  // the SIGSEGV handler before the scope's
};
inline RaceCheck race_check;

inline unsigned char* shared_section() {
  return reinterpret_cast<unsigned char*>(__start_strata_shared);
}
inline size_t shared_section_bytes() {
  return static_cast<size_t>(__stop_strata_shared - __start_strata_shared);
}

// The SIGSEGV handler while a scope is on: a write to one of the section's
// read-only pages marks it written and makes it writable (the write is
// then done again); any other fault goes to the handler before, as if this
// one were not there.
inline void race_check_on_fault(int, siginfo_t* info, void*) {
  RaceCheck::Pages* pages = race_check.pages;
  auto* at = static_cast<unsigned char*>(info->si_addr);
  if (pages != nullptr && at >= pages->begin && at < pages->end) {
    const size_t p = static_cast<size_t>(at - pages->begin) / pages->page;
    mprotect(pages->begin + p * pages->page, pages->page, PROT_READ | PROT_WRITE);
    if (pages->written[p] == 0) {
      pages->written[p] = 1;
      pages->list[pages->n_written++] = p;
    }
    return;
  }
  sigaction(SIGSEGV, &race_check.previous, nullptr);  // the fault happens again, there
}

inline void race_check_protect(int protection) {
  const RaceCheck::Pages* pages = race_check.pages;
  if (pages != nullptr && pages->end > pages->begin) {
    mprotect(pages->begin, static_cast<size_t>(pages->end - pages->begin), protection);
  }
}

// A block starts: its shared memory undefined, no writes yet.
inline void race_check_block_begins() {
  RaceCheck& rc = race_check;
  const size_t n = shared_section_bytes();
  ++rc.block;
  race_check_protect(PROT_READ | PROT_WRITE);
  if (n > 0) std::memset(shared_section(), 0xFF, n);
  rc.seen.assign(shared_section(), shared_section() + n);
  if (rc.last.size() < n) rc.last.resize(n);
  RaceCheck::Pages& pages = *rc.pages;
  for (size_t k = 0; k < pages.n_written; ++k) pages.written[pages.list[k]] = 0;
  pages.n_written = 0;
  race_check_protect(PROT_READ);
}

inline const char* base_name(const char* file) {
  const char* slash = std::strrchr(file, '/');
  return slash != nullptr ? slash + 1 : file;
}

// Byte i written by thread t (stopping next at file:line) after `before`
// with nothing between: described in a report, or added to the one before
// when that is the same two writes one byte back.
inline void race_check_report(size_t i, const RaceCheck::Write& before,
                              const RaceCheckThread& now, bool atomic, const char* file, int line) {
  const unsigned t = now.thread;
  RaceCheck& rc = race_check;
  ++rc.races;
  RaceCheck::Report& r = rc.last_report;
  if (!rc.reports.empty() && r.block == rc.block && r.first == before.thread && r.second == t &&
      r.end == i) {
    ++r.end;
  } else if (rc.reports.size() < RaceCheck::kMaxReports) {
    char how[400];
    std::snprintf(how, sizeof how,
                  "with no barrier between (thread %u stopping next at %s:%d%s, thread %u at "
                  "%s:%d%s)",
                  before.thread, base_name(before.file), before.line,
                  before.atomic ? " after an atomic" : "", t, base_name(file), line,
                  atomic ? " after an atomic" : "");
    r = {rc.block, before.thread, t, i, i + 1, how};
    rc.reports.emplace_back();
  } else {
    return;
  }
  char which[200];
  std::snprintf(which, sizeof which,
                "block %u: threads %u and %u both wrote shared memory bytes [%zu, %zu) ",
                now.block_index, r.first, r.second, r.begin, r.end);
  rc.reports.back() = which + r.how;
}

// Byte i of the section written by thread `now`, which stopped at
// file:line after it.
inline void race_check_write(size_t i, const RaceCheckThread& now, bool atomic, const char* file,
                             int line) {
  RaceCheck& rc = race_check;
  const unsigned t = now.thread;
  const uint64_t block_generation = now.block_generation;
  const uint64_t warp_generation = now.warp_generation;
  RaceCheck::Write& w = rc.last[i];
  const bool ordered = w.block != rc.block || w.thread == t ||
                       w.block_generation != block_generation ||
                       (w.thread / 32 == t / 32 && w.warp_generation != warp_generation) ||
                       (w.atomic && atomic);
  if (!ordered) race_check_report(i, w, now, atomic, file, line);
  w = {rc.block, block_generation, warp_generation, t, atomic, file, line};
}

// The bytes [from, to) of the section that changed since the last stop:
// thread `now`'s writes.
inline void race_check_compare(size_t from, size_t to, const RaceCheckThread& now,
                               const char* file, int line) {
  const unsigned char* section = shared_section();
  unsigned char* seen = race_check.seen.data();
  for (size_t at = from; at < to; at += 64) {
    const size_t end = std::min(to, at + 64);
    if (end - at == 64) {  // 64 bytes as 8 words: equal, the usual case, at memory speed
      uint64_t differ = 0;
      for (size_t k = 0; k < 64; k += 8) {
        uint64_t a, c;
        std::memcpy(&a, section + at + k, 8);
        std::memcpy(&c, seen + at + k, 8);
        differ |= a ^ c;
      }
      if (differ == 0) continue;
    }
    for (size_t i = at; i < end; ++i) {
      if (section[i] == seen[i]) continue;
      race_check_write(i, now, false, file, line);
      seen[i] = section[i];
    }
  }
}

// Thread `now` (of the running block) stops at file:line: the section's
// bytes changed since the last stop (on the pages written since) are its
// writes. Only while a scope is on (race_check.on).
inline void race_check_stop(const RaceCheckThread& now, const char* file, int line) {
  RaceCheck& rc = race_check;
  RaceCheck::Pages& pages = *rc.pages;
  const auto n = static_cast<ptrdiff_t>(rc.seen.size());
  for (size_t k = 0; k < pages.n_written; ++k) {
    const size_t p = pages.list[k];
    unsigned char* page = pages.begin + p * pages.page;
    const ptrdiff_t from = page - shared_section(), to = from + static_cast<ptrdiff_t>(pages.page);
    race_check_compare(static_cast<size_t>(std::max<ptrdiff_t>(from, 0)),
                       static_cast<size_t>(std::min(to, n)), now, file, line);
    pages.written[p] = 0;
    mprotect(page, pages.page, PROT_READ);
  }
  pages.n_written = 0;
}

// Thread `now`'s read, add and write of `bytes` at p (an atomic where
// `atomic`), done since its last stop. Only while a scope is on.
inline void race_check_written(const RaceCheckThread& now, const void* p, size_t bytes,
                               bool atomic, const char* file, int line) {
  RaceCheck& rc = race_check;
  const auto* at = static_cast<const unsigned char*>(p);
  if (at < shared_section() || at + bytes > shared_section() + rc.seen.size()) return;  // global
  for (size_t i = static_cast<size_t>(at - shared_section()), end = i + bytes; i < end; ++i) {
    race_check_write(i, now, atomic, file, line);
    rc.seen[i] = shared_section()[i];
  }
}

// The race check for a scope (one at a time, on the thread that launches):
// races found in the launches run in it are reports(), none at its start.
class RaceCheckScope {
 public:
  RaceCheckScope() {
    RaceCheck& rc = race_check;
    rc.reports.clear();
    rc.last_report = {};
    rc.races = 0;
    RaceCheck::Pages& pages = *pages_;
    pages.page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<uintptr_t>(shared_section());
    const uintptr_t end = begin + shared_section_bytes();
    pages.begin = reinterpret_cast<unsigned char*>(begin / pages.page * pages.page);
    pages.end = reinterpret_cast<unsigned char*>((end + pages.page - 1) / pages.page * pages.page);
    if (begin == end) pages.begin = pages.end;  // no section
    const size_t n = static_cast<size_t>(pages.end - pages.begin) / pages.page;
    pages.written.assign(n, 0);
    pages.list.assign(n, 0);
    rc.pages = pages_.get();
    struct sigaction on_fault = {};
    on_fault.sa_sigaction = race_check_on_fault;
    on_fault.sa_flags = SA_SIGINFO;
    sigemptyset(&on_fault.sa_mask);
    sigaction(SIGSEGV, &on_fault, &race_check.previous);
    rc.on = true;
  }
  ~RaceCheckScope() {
    race_check.on = false;
    race_check_protect(PROT_READ | PROT_WRITE);
    sigaction(SIGSEGV, &race_check.previous, nullptr);
    race_check.pages = nullptr;
  }
  RaceCheckScope(const RaceCheckScope&) = delete;
  RaceCheckScope& operator=(const RaceCheckScope&) = delete;
  // The first RaceCheck::kMaxReports races, each a line.
  const std::vector<std::string>& reports() const { return race_check.reports; }
  // They, a line each, after a line saying how many bytes raced ("" when
  // none did): for a failed expectation's message.
  std::string described() const {
    if (race_check.races == 0) return "";
    std::string text = std::to_string(race_check.races) +
                       " bytes of shared memory written racing; the first:\n";
    for (const std::string& r : race_check.reports) text += r + "\n";
    return text;
  }
  // Bytes written racing, in all.
  size_t races() const { return race_check.races; }

 private:
  std::unique_ptr<RaceCheck::Pages> pages_ = std::make_unique<RaceCheck::Pages>();
};

// Page-aligned, so that (with GNU ld's layout: the section after .data,
// then .bss) .bss starts on the page after the section's last: only the
// first of the pages the race check keeps read-only holds other data (a
// write to which costs a fault). (A like guard in the section, for its
// first page, would be a section type conflict: kernels' statics are
// COMDAT, a test's own kernels' not.)
alignas(4096) inline unsigned char bss_after_shared_section[1] __attribute__((used));

}  // namespace strata::cuda_emulation
