#include "kernels/cpu/cpu_info.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define STRATA_X86 1
#endif

namespace strata::cpu {
namespace {

// Hardware threads in this process's affinity mask; 0 when unreadable.
int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
}

// The first line of a small text file, without its newline; "" if absent.
std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// Number of CPUs in a Linux cpu list such as "0-3,8,10-11"; 0 when empty or
// malformed.
int count_cpu_list(const std::string& list) {
  int count = 0;
  std::stringstream in(list);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (part.empty()) continue;
    int first = 0;
    int last = 0;
    if (std::sscanf(part.c_str(), "%d-%d", &first, &last) == 2) {
      if (last < first) return 0;
      count += last - first + 1;
    } else if (std::sscanf(part.c_str(), "%d", &first) == 1) {
      ++count;
    } else {
      return 0;
    }
  }
  return count;
}

// The CPU ids of a cpu list, in order.
std::vector<int> expand_cpu_list(const std::string& list) {
  std::vector<int> cpus;
  std::stringstream in(list);
  std::string part;
  while (std::getline(in, part, ',')) {
    int first = 0;
    int last = 0;
    if (std::sscanf(part.c_str(), "%d-%d", &first, &last) == 2) {
      for (int c = first; c <= last && last - first < (1 << 16); ++c) {
        cpus.push_back(c);
      }
    } else if (std::sscanf(part.c_str(), "%d", &first) == 1) {
      cpus.push_back(first);
    }
  }
  return cpus;
}

// sysfs cache sizes: "32K", "32768K", "2M".
int64_t parse_cache_size(const std::string& text) {
  long long value = 0;
  char unit = 0;
  const int got = std::sscanf(text.c_str(), "%lld%c", &value, &unit);
  if (got < 1 || value < 0) return 0;
  if (got == 1) return value;
  switch (unit) {
    case 'K':
      return value << 10;
    case 'M':
      return value << 20;
    case 'G':
      return value << 30;
    default:
      return value;
  }
}

std::string trim(std::string s) {
  const size_t begin = s.find_first_not_of(" \t");
  const size_t end = s.find_last_not_of(" \t\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, end - begin + 1);
}

std::string model_from_proc_cpuinfo() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return trim(line.substr(colon + 1));
    }
  }
  return "";
}

#ifdef STRATA_X86
struct Regs {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Regs cpuid(unsigned leaf, unsigned subleaf) {
  Regs r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

bool bit(unsigned reg, int b) { return ((reg >> b) & 1u) != 0; }

// XCR0: the register state the OS saves on context switch. An extension
// is usable only when the OS enabled its state.
uint64_t xgetbv0() {
  unsigned lo = 0;
  unsigned hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

void read_x86(CpuInfo& info) {
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf == 0) return;
  const Regs r0 = cpuid(0, 0);
  char vendor[13] = {};
  std::copy_n(reinterpret_cast<const char*>(&r0.ebx), 4, vendor);
  std::copy_n(reinterpret_cast<const char*>(&r0.edx), 4, vendor + 4);
  std::copy_n(reinterpret_cast<const char*>(&r0.ecx), 4, vendor + 8);
  info.vendor = vendor;

  const unsigned max_ext = __get_cpuid_max(0x80000000u, nullptr);
  if (max_ext >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002u + i, 0);
      const unsigned words[4] = {r.eax, r.ebx, r.ecx, r.edx};
      std::copy_n(reinterpret_cast<const char*>(words), 16, brand + 16 * i);
    }
    info.model = trim(brand);
  }

  std::vector<std::pair<bool, const char*>> flags;
  const Regs l1 = cpuid(1, 0);
  const bool osxsave = bit(l1.ecx, 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;              // XMM, YMM
  const bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;      // XTILECFG, XTILEDATA
  flags.emplace_back(bit(l1.edx, 26), "sse2");
  flags.emplace_back(bit(l1.ecx, 9), "ssse3");
  flags.emplace_back(bit(l1.ecx, 19), "sse4_1");
  flags.emplace_back(bit(l1.ecx, 20), "sse4_2");
  flags.emplace_back(bit(l1.ecx, 23), "popcnt");
  flags.emplace_back(os_avx && bit(l1.ecx, 28), "avx");
  flags.emplace_back(os_avx && bit(l1.ecx, 12), "fma");
  flags.emplace_back(os_avx && bit(l1.ecx, 29), "f16c");
  if (max_leaf >= 7) {
    const Regs l7 = cpuid(7, 0);
    flags.emplace_back(bit(l7.ebx, 3), "bmi1");
    flags.emplace_back(os_avx && bit(l7.ebx, 5), "avx2");
    flags.emplace_back(bit(l7.ebx, 8), "bmi2");
    flags.emplace_back(os_avx512 && bit(l7.ebx, 16), "avx512f");
    flags.emplace_back(os_avx512 && bit(l7.ebx, 17), "avx512dq");
    flags.emplace_back(os_avx512 && bit(l7.ebx, 21), "avx512ifma");
    flags.emplace_back(os_avx512 && bit(l7.ebx, 28), "avx512cd");
    flags.emplace_back(os_avx512 && bit(l7.ebx, 30), "avx512bw");
    flags.emplace_back(os_avx512 && bit(l7.ebx, 31), "avx512vl");
    flags.emplace_back(os_avx512 && bit(l7.ecx, 1), "avx512vbmi");
    flags.emplace_back(os_avx512 && bit(l7.ecx, 6), "avx512_vbmi2");
    flags.emplace_back(os_avx512 && bit(l7.ecx, 11), "avx512_vnni");
    flags.emplace_back(os_avx512 && bit(l7.ecx, 12), "avx512_bitalg");
    flags.emplace_back(os_avx512 && bit(l7.ecx, 14), "avx512_vpopcntdq");
    flags.emplace_back(os_avx512 && bit(l7.edx, 23), "avx512_fp16");
    flags.emplace_back(os_amx && bit(l7.edx, 22), "amx_bf16");
    flags.emplace_back(os_amx && bit(l7.edx, 24), "amx_tile");
    flags.emplace_back(os_amx && bit(l7.edx, 25), "amx_int8");
    if (l7.eax >= 1) {
      const Regs l71 = cpuid(7, 1);
      flags.emplace_back(os_avx && bit(l71.eax, 4), "avx_vnni");
      flags.emplace_back(os_avx512 && bit(l71.eax, 5), "avx512_bf16");
    }
  }
  for (const auto& [present, name] : flags) {
    if (present) info.isa_flags.emplace_back(name);
  }
}
#endif  // STRATA_X86

void read_topology(CpuInfo& info) {
  std::vector<int> online =
      expand_cpu_list(read_line("/sys/devices/system/cpu/online"));
  info.logical_cpus = static_cast<int>(online.size());
  if (info.logical_cpus == 0) {
    info.logical_cpus = static_cast<int>(std::max(0L, sysconf(_SC_NPROCESSORS_ONLN)));
  }
  std::set<std::pair<std::string, std::string>> cores;
  std::set<std::string> packages;
  for (int c : online) {
    const std::string dir =
        "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    const std::string package = read_line(dir + "physical_package_id");
    const std::string core = read_line(dir + "core_id");
    if (package.empty() || core.empty()) {
      cores.clear();
      packages.clear();
      break;
    }
    cores.emplace(package, core);
    packages.insert(package);
  }
  info.physical_cores = static_cast<int>(cores.size());
  info.packages = static_cast<int>(packages.size());

  info.allowed_cpus = affinity_cpus();
}

void read_caches(CpuInfo& info) {
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" +
                            std::to_string(index) + "/";
    const std::string level = read_line(dir + "level");
    if (level.empty()) break;
    CacheInfo cache;
    cache.level = std::atoi(level.c_str());
    cache.type = read_line(dir + "type");
    cache.size_bytes = parse_cache_size(read_line(dir + "size"));
    cache.shared_by = count_cpu_list(read_line(dir + "shared_cpu_list"));
    info.caches.push_back(cache);
  }
  std::stable_sort(info.caches.begin(), info.caches.end(),
                   [](const CacheInfo& a, const CacheInfo& b) {
                     return a.level < b.level;
                   });
}

}  // namespace

bool CpuInfo::has(const std::string& flag) const {
  return std::find(isa_flags.begin(), isa_flags.end(), flag) !=
         isa_flags.end();
}

int64_t CpuInfo::last_level_cache_bytes() const {
  int64_t bytes = 0;
  int level = 0;
  for (const CacheInfo& c : caches) {
    if (c.type == "Instruction") continue;
    if (c.level > level || (c.level == level && c.size_bytes > bytes)) {
      level = c.level;
      bytes = c.size_bytes;
    }
  }
  return bytes;
}

CpuInfo read_cpu_info() {
  CpuInfo info;
#ifdef STRATA_X86
  read_x86(info);
#endif
  if (info.model.empty()) info.model = model_from_proc_cpuinfo();
  read_topology(info);
  read_caches(info);
  return info;
}

std::string format_cache_size(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0) {
    return std::to_string(bytes >> 20) + " MiB";
  }
  if (bytes >= 1024 && bytes % 1024 == 0) {
    return std::to_string(bytes >> 10) + " KiB";
  }
  return std::to_string(bytes) + " B";
}

int usable_threads() {
  const int allowed = affinity_cpus();
  if (allowed > 0) return allowed;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace strata::cpu
