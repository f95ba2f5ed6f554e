// ISA tiers of the x86-64 CPU kernels: which generator (kernels/cpu/jit/)
// emits code for this machine. A tier is picked from CPUID at run time and
// may be forced (the STRATA_ISA environment variable or a command-line
// option) so that every tier is tested on a machine that has it.
//
//   kAvx2        AVX2 + FMA + F16C (Haswell, Zen 1 and later): the floor.
//   kAvx512      kAvx2 + AVX-512 F, BW, VL, DQ (Skylake-SP, Zen 4).
//   kAvx512Vnni  kAvx512 + AVX-512 VNNI (vpdpbusd; Cascade Lake, Zen 4).
//
// Thread-safety: pure functions; cpu_features() (and so cpu_has, detect_isa)
// reads CPUID once per process.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace strata::kernels {

enum class IsaTier { kAvx2 = 0, kAvx512 = 1, kAvx512Vnni = 2 };

// "avx2", "avx512", "avx512vnni".
const char* isa_name(IsaTier tier);

// The inverse of isa_name; nullopt for any other text.
std::optional<IsaTier> parse_isa(std::string_view name);

// The CPU's features: what the kernels of each tier need.
struct CpuFeatures {
  bool avx2 = false;  // with FMA and F16C
  bool avx512 = false;  // F, BW, VL, DQ
  bool avx512_vnni = false;
};
CpuFeatures cpu_features();

// True when this CPU can run code of `tier`.
bool cpu_has(IsaTier tier);

// The best tier this CPU runs. FailedPrecondition when it lacks even AVX2
// ("this CPU lacks AVX2/FMA/F16C, which the cpu kernels need").
absl::StatusOr<IsaTier> detect_isa();

// The tier to use: `forced` when given (a name as parse_isa takes), else
// the STRATA_ISA environment variable when set and non-empty, else
// detect_isa(). Errors: InvalidArgument for an unknown name ("STRATA_ISA:
// unknown ISA tier 'sse'; expected avx2, avx512 or avx512vnni"),
// FailedPrecondition for a tier this CPU lacks ("ISA tier avx512 forced by
// STRATA_ISA, but this CPU lacks AVX-512 F/BW/VL/DQ").
absl::StatusOr<IsaTier> select_isa(std::string_view forced = {});

// True when STRATA_JIT is off (0/false/no/off; kernels/cpu/env_switch.h):
// the engine runs the reference ops everywhere.
bool jit_disabled_by_env();

// The tier the engine's generated kernels run on, or nullopt when it runs
// the reference ops (STRATA_JIT=0, or a CPU without AVX2 and no tier
// forced). A forced tier (`forced`, else STRATA_ISA) is checked even with
// STRATA_JIT=0. Errors: select_isa's, for a forced tier.
absl::StatusOr<std::optional<IsaTier>> engine_isa(std::string_view forced = {});

// One line for reports: "generated, avx2" or "reference (STRATA_JIT=0)"
// (the variable's own value: "reference (STRATA_JIT=off)") /
// "reference (no ISA tier: ...)", from engine_isa(forced); an error's text
// when engine_isa fails.
std::string engine_kernels_text(std::string_view forced = {});

// The CPU's brand string from CPUID ("AMD EPYC 7B13 ..."), trimmed.
std::string cpu_model_name();

// What the tune cache keys on: the brand string and CPUID leaf 1's display
// family, model and stepping as Xbyak::util::Cpu decodes them ("AMD EPYC
// f26m2s1"; Intel SDM vol. 2A, CPUID EAX=01h). A virtual machine may show
// one brand string ("AMD EPYC") for Zen 3, 4 and 5, whose best tiles differ.
std::string cpu_signature();

}  // namespace strata::kernels
