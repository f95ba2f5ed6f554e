#include "kernels/cpu/cpu_info.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
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
  int n = affinity_cpus();
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  if (const std::optional<double> limit = cgroup_cpu_limit()) {
    n = std::min(n, static_cast<int>(*limit));
  }
  return std::max(1, n);
}

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string_view trim(std::string_view t) {
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  return t;
}

std::optional<long long> to_int(std::string_view t) {
  t = trim(t);
  if (t.empty() || t.size() > 18) return std::nullopt;
  long long v = 0;
  bool negative = false;
  size_t i = 0;
  if (t[0] == '-') {
    negative = true;
    i = 1;
  }
  if (i == t.size()) return std::nullopt;
  for (; i < t.size(); ++i) {
    if (t[i] < '0' || t[i] > '9') return std::nullopt;
    v = v * 10 + (t[i] - '0');
  }
  return negative ? -v : v;
}

std::optional<double> smaller(std::optional<double> a, std::optional<double> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

}  // namespace

std::optional<double> parse_cgroup2_cpu_max(std::string_view text) {
  text = trim(text);
  const size_t space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::string_view quota = text.substr(0, space);
  const std::optional<long long> period = to_int(text.substr(space + 1));
  if (!period || *period <= 0) return std::nullopt;
  if (quota == "max") return std::nullopt;
  const std::optional<long long> q = to_int(quota);
  if (!q || *q <= 0) return std::nullopt;
  return static_cast<double>(*q) / static_cast<double>(*period);
}

std::optional<double> parse_cgroup1_cpu_quota(std::string_view quota_us,
                                              std::string_view period_us) {
  const std::optional<long long> q = to_int(quota_us);
  const std::optional<long long> p = to_int(period_us);
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;  // -1: unlimited
  return static_cast<double>(*q) / static_cast<double>(*p);
}

std::string cgroup2_path(std::string_view proc_self_cgroup) {
  std::istringstream in{std::string(proc_self_cgroup)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

std::string cgroup1_cpu_path(std::string_view proc_self_cgroup) {
  std::istringstream in{std::string(proc_self_cgroup)};
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::stringstream controllers(line.substr(a + 1, b - a - 1));
    std::string c;
    while (std::getline(controllers, c, ',')) {
      if (c == "cpu") return line.substr(b + 1);
    }
  }
  return "";
}

std::optional<double> cgroup_cpu_limit() {
  const std::string self = read_file("/proc/self/cgroup");
  std::optional<double> limit;
  // cgroup v2: this cgroup and every parent up to the root (a container
  // sees its own cgroup as the root of /sys/fs/cgroup).
  if (std::string path = cgroup2_path(self); !path.empty() ||
      !read_line("/sys/fs/cgroup/cpu.max").empty()) {
    while (true) {
      limit = smaller(limit, parse_cgroup2_cpu_max(
                                 read_line("/sys/fs/cgroup" + path + "/cpu.max")));
      if (path.empty() || path == "/") break;
      const size_t slash = path.rfind('/');
      path = slash == std::string::npos ? "" : path.substr(0, slash);
    }
    limit = smaller(limit, parse_cgroup2_cpu_max(read_line("/sys/fs/cgroup/cpu.max")));
  }
  // cgroup v1: the cpu controller's hierarchy.
  for (const std::string& root : {std::string("/sys/fs/cgroup/cpu,cpuacct"),
                                  std::string("/sys/fs/cgroup/cpu")}) {
    std::string path = cgroup1_cpu_path(self);
    for (int depth = 0; depth < 64; ++depth) {
      const std::string dir = root + (path == "/" ? "" : path);
      limit = smaller(limit, parse_cgroup1_cpu_quota(
                                 read_line(dir + "/cpu.cfs_quota_us"),
                                 read_line(dir + "/cpu.cfs_period_us")));
      if (path.empty() || path == "/") break;
      const size_t slash = path.rfind('/');
      path = slash == std::string::npos || slash == 0 ? "" : path.substr(0, slash);
    }
  }
  return limit;
}

}  // namespace strata::cpu
