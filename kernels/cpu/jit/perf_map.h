// Names generated code for Linux `perf`: with STRATA_PERF_MAP=1 in the
// environment, each generated kernel is listed in /tmp/perf-<pid>.map
// ("<start hex> <size hex> <name>", the format perf's JIT interface reads;
// see tools/perf/Documentation/jit-interface.txt in the Linux sources), so
// `perf report` shows samples in, say, "strata_u5_r8c1_in640_out1024"
// rather than bare addresses. Without the variable nothing is written.
#pragma once

#include <cstddef>
#include <string>

namespace strata::kernels::jit {

// True when STRATA_PERF_MAP is on (1/true/yes/on; kernels/cpu/env_switch.h;
// read once).
bool perf_map_enabled();

// Appends one line for `bytes` bytes of code at `code`; a no-op when
// disabled. Errors writing the file are ignored (profiling aid only).
void perf_map_add(const void* code, size_t bytes, const std::string& name);

}  // namespace strata::kernels::jit
