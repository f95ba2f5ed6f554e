// CpuInfo: what the processor this process runs on says about itself — its
// name, how many cores and hardware threads it offers, its caches and the
// x86 instruction-set extensions that both the CPU and the OS (XCR0) enable.
// `strata hardware` prints it; the bandwidth benchmark sizes its arrays from
// the last-level cache.
//
// Sources, in order of preference: CPUID (brand string, feature leaves 1, 7
// and 0x80000001, XGETBV for the OS-enabled register state), Linux sysfs
// (/sys/devices/system/cpu: topology, caches) and /proc/cpuinfo (model name
// where CPUID has no brand string), sched_getaffinity (CPUs this process may
// run on). Anything a source does not say is left empty or 0, never guessed.
//
// The ISA *tier* a kernel generator targets is not decided here; that is
// kernels/cpu/isa.h's job. This file only reports raw flags.
//
// Thread-safety: read_cpu_info() reads files and executes CPUID; any thread
// may call it. CpuInfo is a plain value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::cpu {

struct CacheInfo {
  int level = 0;          // 1, 2, 3, ...
  std::string type;       // "Data", "Instruction" or "Unified" (sysfs words)
  int64_t size_bytes = 0;
  int shared_by = 0;      // logical CPUs that share one instance (0: unknown)
};

struct CpuInfo {
  std::string vendor;  // CPUID vendor id, e.g. "AuthenticAMD"; "" off x86
  std::string model;   // e.g. "AMD EPYC 9R14 96-Core Processor"
  int logical_cpus = 0;    // online hardware threads in the machine
  int physical_cores = 0;  // distinct (package, core) pairs; 0: unknown
  int packages = 0;        // sockets; 0: unknown
  int allowed_cpus = 0;    // hardware threads this process may run on
  std::vector<CacheInfo> caches;  // of CPU 0, by level then type
  // Extensions usable by this process (CPU and OS agree), lower case as
  // Linux names them: "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f",
  // "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16",
  // "avx_vnni", "amx_tile", ...; empty off x86.
  std::vector<std::string> isa_flags;

  bool has(const std::string& flag) const;
  // Bytes of the largest data or unified cache; 0 when unknown.
  int64_t last_level_cache_bytes() const;
};

// Reads everything above. Never fails: what cannot be read stays empty.
CpuInfo read_cpu_info();

// Hardware threads this process may run on: its affinity mask (as
// CpuInfo::allowed_cpus), else the machine's, and no more than its cgroup
// CPU limit rounded down (a container's `resources.limits.cpu`, a systemd
// unit's CPUQuota); at least 1. What a thread count of 0 ("all cores",
// `threads: auto`) means to every command. More threads than the quota
// would be throttled in turn and leave the pipeline waiting for the
// slowest.
int usable_threads();

// The CPU limit of this process's cgroup in CPUs (1.5 for a quota of
// 150000 us per 100000 us), the smallest over its cgroup and their parents
// (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`, found
// through /proc/self/cgroup); nullopt when unlimited or unknown.
std::optional<double> cgroup_cpu_limit();

// The parsers behind it, on a file's text: cgroup v2 `cpu.max` ("max
// 100000" -> nullopt, "150000 100000" -> 1.5); v1 quota and period ("-1"
// -> nullopt). nullopt for malformed text.
std::optional<double> parse_cgroup2_cpu_max(std::string_view text);
std::optional<double> parse_cgroup1_cpu_quota(std::string_view quota_us,
                                              std::string_view period_us);
// The cgroup paths of /proc/self/cgroup's text: the v2 path ("0::/a/b"),
// and the v1 path of the `cpu` controller ("4:cpu,cpuacct:/a"); "" when
// absent.
std::string cgroup2_path(std::string_view proc_self_cgroup);
std::string cgroup1_cpu_path(std::string_view proc_self_cgroup);

// "32 KiB", "512 KiB", "32 MiB": sizes as caches are usually written.
std::string format_cache_size(int64_t bytes);

}  // namespace strata::cpu
