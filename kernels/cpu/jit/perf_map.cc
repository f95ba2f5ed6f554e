#include "kernels/cpu/jit/perf_map.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "kernels/cpu/env_switch.h"

namespace strata::kernels::jit {

bool perf_map_enabled() {
  static const bool on = env_switch("STRATA_PERF_MAP") == true;
  return on;
}

void perf_map_add(const void* code, size_t bytes, const std::string& name) {
  if (!perf_map_enabled()) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  char path[64];
  std::snprintf(path, sizeof path, "/tmp/perf-%d.map", static_cast<int>(getpid()));
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%zx %zx %s\n", reinterpret_cast<size_t>(code), bytes, name.c_str());
    std::fclose(f);
  }
}

}  // namespace strata::kernels::jit
