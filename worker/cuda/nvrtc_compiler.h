// NvrtcCompiler: CUDA C++ kernel sources compiled to PTX with NVRTC at load
// (issue 32: kernels generated for the model's shapes and the device, the GPU
// side of the CPU tier's JIT), with an on-disk cache.
//
// The cache key is the FNV-1a 64 hash of, each length-prefixed: the NVRTC
// version, the device name, its compute capability, the driver version, the
// program name, the source and every option (the -arch included). One file
// per key, <cache_dir>/<16 hex digits>.ptx, written to a temporary name and
// renamed, so readers never see half a file; a file that cannot be read or
// written is a miss (the PTX is still returned), never an error.
//
// NVRTC needs no GPU: with the target given explicitly (compute capability
// 8.0 -> "-arch=compute_80") this runs on a machine without one. Compute
// capability 9.0 compiles for "-arch=compute_90a": sm_90's PTX with its
// arch-specific instructions (wgmma, wgmma_source.h), which loads on sm_90
// devices only (as any 9.0 build does here: the kernels are compiled for
// the device they run on).
//
// Usage:
//   NvrtcCompiler compiler({.cache_dir = dir});
//   NvrtcTarget target{.device_name = "NVIDIA H200", .cc_major = 9, .cc_minor =
//   0,
//                      .driver_version = cuda_driver_version()};
//   absl::StatusOr<NvrtcOutput> out = compiler.compile(target, "rms_norm.cu",
//   source, {});
//   // out->ptx: the module's PTX text (NUL-terminated inside the string).
//
// Threads: one call at a time per NvrtcCompiler (several compilers may share
// a cache directory).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace strata::worker {

struct NvrtcTarget {
  std::string device_name;  // part of the cache key only
  int cc_major = 9;         // -arch=compute_<major><minor> (9.0: compute_90a)
  int cc_minor = 0;
  int driver_version = 0;  // cuda_driver_version(); part of the cache key only
};

struct NvrtcOutput {
  std::string ptx;  // ends with a NUL (what module loaders expect)
  std::string log;  // NVRTC's log (warnings); empty from the cache
  bool from_cache = false;
  std::string cache_path;  // the file of this key ("" without a cache)
};

struct NvrtcCompilerOptions {
  // "": $HOME/.cache/strata/cuda-kernels. "-": no disk cache.
  std::string cache_dir;
};

class NvrtcCompiler {
 public:
  explicit NvrtcCompiler(NvrtcCompilerOptions options = {});

  // Compiles `source` (program name `name`, in NVRTC's messages) for
  // `target` with `options` (besides the -arch this adds, e.g.
  // "-default-device", "--use_fast_math", "-DCOLS=576").
  // Errors: InvalidArgument "<name>: NVRTC compile failed for compute_90:
  // <NVRTC's log>" when the source does not compile; Internal for other
  // NVRTC failures, with nvrtcGetErrorString.
  absl::StatusOr<NvrtcOutput> compile(const NvrtcTarget& target,
                                      std::string_view name,
                                      std::string_view source,
                                      std::span<const std::string> options);

  // The key compile() caches under, as 16 hex digits.
  static std::string cache_key(const NvrtcTarget& target, std::string_view name,
                               std::string_view source,
                               std::span<const std::string> options);

  const std::string& cache_dir() const { return cache_dir_; }  // "" when off

 private:
  std::string cache_dir_;
};

// NVRTC's version as major * 1000 + minor * 10 (13000 for 13.0), 0 on error.
int nvrtc_version();

}  // namespace strata::worker
