#include "kernels/cpu/isa.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/env_switch.h"
#include "xbyak/xbyak_util.h"

namespace strata::kernels {

const char* isa_name(IsaTier tier) {
  switch (tier) {
    case IsaTier::kAvx2:
      return "avx2";
    case IsaTier::kAvx512:
      return "avx512";
    case IsaTier::kAvx512Vnni:
      return "avx512vnni";
  }
  return "?";
}

std::optional<IsaTier> parse_isa(std::string_view name) {
  for (IsaTier t : {IsaTier::kAvx2, IsaTier::kAvx512, IsaTier::kAvx512Vnni}) {
    if (name == isa_name(t)) return t;
  }
  return std::nullopt;
}

CpuFeatures cpu_features() {
  // CPUID once per process: in a VM every CPUID traps to the hypervisor
  // (tens of microseconds), and the answer cannot change.
  static const CpuFeatures features = [] {
    using Cpu = Xbyak::util::Cpu;
    const Cpu cpu;
    CpuFeatures f;
    f.avx2 = cpu.has(Cpu::tAVX2) && cpu.has(Cpu::tFMA) && cpu.has(Cpu::tF16C);
    f.avx512 = f.avx2 && cpu.has(Cpu::tAVX512F) && cpu.has(Cpu::tAVX512BW) &&
               cpu.has(Cpu::tAVX512VL) && cpu.has(Cpu::tAVX512DQ);
    f.avx512_vnni = f.avx512 && cpu.has(Cpu::tAVX512_VNNI);
    return f;
  }();
  return features;
}

bool cpu_has(IsaTier tier) {
  const CpuFeatures f = cpu_features();
  switch (tier) {
    case IsaTier::kAvx2:
      return f.avx2;
    case IsaTier::kAvx512:
      return f.avx512;
    case IsaTier::kAvx512Vnni:
      return f.avx512_vnni;
  }
  return false;
}

absl::StatusOr<IsaTier> detect_isa() {
  const CpuFeatures f = cpu_features();
  if (f.avx512_vnni) return IsaTier::kAvx512Vnni;
  if (f.avx512) return IsaTier::kAvx512;
  if (f.avx2) return IsaTier::kAvx2;
  return absl::FailedPreconditionError(
      "this CPU lacks AVX2/FMA/F16C, which the cpu kernels need");
}

namespace {
const char* missing_features(IsaTier tier) {
  switch (tier) {
    case IsaTier::kAvx2:
      return "AVX2/FMA/F16C";
    case IsaTier::kAvx512:
      return "AVX-512 F/BW/VL/DQ";
    case IsaTier::kAvx512Vnni:
      return "AVX-512 F/BW/VL/DQ/VNNI";
  }
  return "?";
}
}  // namespace

absl::StatusOr<IsaTier> select_isa(std::string_view forced) {
  std::string_view source = "--isa";
  if (forced.empty()) {
    const char* env = std::getenv("STRATA_ISA");
    if (env == nullptr || *env == '\0') return detect_isa();
    forced = env;
    source = "STRATA_ISA";
  }
  const std::optional<IsaTier> tier = parse_isa(forced);
  if (!tier) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source), ": unknown ISA tier '",
                     std::string(forced),
                     "'; expected avx2, avx512 or avx512vnni"));
  }
  if (!cpu_has(*tier)) {
    return absl::FailedPreconditionError(
        absl::StrCat("ISA tier ", isa_name(*tier), " forced by ",
                     std::string(source),
                     ", but this CPU lacks ", missing_features(*tier)));
  }
  return *tier;
}

bool jit_disabled_by_env() {
  return env_switch("STRATA_JIT") == false;
}

absl::StatusOr<std::optional<IsaTier>> engine_isa(std::string_view forced) {
  const char* env = std::getenv("STRATA_ISA");
  const bool is_forced = !forced.empty() || (env != nullptr && *env != '\0');
  if (is_forced) {
    absl::StatusOr<IsaTier> tier = select_isa(forced);
    if (!tier.ok()) return tier.status();
    if (jit_disabled_by_env()) return std::optional<IsaTier>();
    return std::optional<IsaTier>(*tier);
  }
  if (jit_disabled_by_env()) return std::optional<IsaTier>();
  absl::StatusOr<IsaTier> tier = detect_isa();
  if (!tier.ok()) return std::optional<IsaTier>();
  return std::optional<IsaTier>(*tier);
}

std::string engine_kernels_text(std::string_view forced) {
  absl::StatusOr<std::optional<IsaTier>> tier = engine_isa(forced);
  if (!tier.ok()) return std::string(tier.status().message());
  if (tier->has_value()) return absl::StrCat("generated, ", isa_name(**tier));
  if (jit_disabled_by_env()) {
    return absl::StrCat("reference (STRATA_JIT=", std::getenv("STRATA_JIT"), ")");
  }
  return absl::StrCat("reference (no ISA tier: ", detect_isa().status().message(), ")");
}

std::string cpu_model_name() {
  unsigned int regs[4];
  Xbyak::util::Cpu::getCpuid(0x80000000u, regs);
  if (regs[0] < 0x80000004u) return "unknown x86-64";
  char brand[49] = {};
  for (unsigned int i = 0; i < 3; ++i) {
    Xbyak::util::Cpu::getCpuid(0x80000002u + i, regs);
    std::memcpy(brand + 16 * i, regs, 16);
  }
  std::string s(brand);
  const size_t b = s.find_first_not_of(' ');
  const size_t e = s.find_last_not_of(' ');
  if (b == std::string::npos) return "unknown x86-64";
  return s.substr(b, e - b + 1);
}

std::string cpu_signature() {
  const Xbyak::util::Cpu cpu;  // decodes CPUID leaf 1 (display family/model)
  return absl::StrCat(cpu_model_name(), " f", cpu.displayFamily, "m", cpu.displayModel, "s",
                      cpu.stepping);
}

}  // namespace strata::kernels
