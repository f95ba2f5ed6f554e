// cuda-read-bandwidth [--gib N] [--passes P] [--device D]: the device's
// measured memory read bandwidth, the roofline decode is held to (issue 32:
// single-stream decode >= 75 % of it). Reads an N GiB buffer (default 4:
// many times the H200's 60 MiB L2, so the reads come from HBM) with 16-byte
// loads, every thread a grid-stride loop, the sum kept live by a conditional
// store that never fires; P timed passes (CUDA events) after one untimed.
// Prints one JSON line:
//   {"device": NAME, "sm": "9.0", "bytes": B, "passes": P,
//    "best_gb_s": X, "median_gb_s": Y}
// Exit 1 with {"error": ...} when there is no device or a call fails.
//
// Built by scripts/gpu-bundle.sh straight with nvcc (not a CMake target: it
// must exist in the bundle even where the CUDA backend does not), with the
// runtime linked statically, so it needs only the driver's libcuda there.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

// Sums `n` uint4s; writes to `sink` only when the sum is a value random
// data is never expected to give, so the loads cannot be optimised away.
__global__ void read_kernel(const uint4* __restrict__ data, size_t n,
                            unsigned* sink) {
  unsigned acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const uint4 v = __ldcs(data + i);  // streaming: no reuse expected
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

int fail(const char* what, cudaError_t e) {
  std::printf("{\"error\": \"%s: %s\"}\n", what, cudaGetErrorString(e));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 4.0;
  int passes = 10;
  int device = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--gib") == 0)
      gib = std::atof(argv[i + 1]);
    else if (std::strcmp(argv[i], "--passes") == 0)
      passes = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--device") == 0)
      device = std::atoi(argv[i + 1]);
  }
  if (gib <= 0 || passes < 1) {
    std::printf("{\"error\": \"--gib must be > 0 and --passes >= 1\"}\n");
    return 2;
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return fail("cudaGetDeviceCount", e);
  if (device >= count) {
    std::printf("{\"error\": \"device %d of %d\"}\n", device, count);
    return 1;
  }
  if ((e = cudaSetDevice(device)) != cudaSuccess)
    return fail("cudaSetDevice", e);
  cudaDeviceProp prop{};
  if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
    return fail("cudaGetDeviceProperties", e);

  const size_t bytes = static_cast<size_t>(gib * 1073741824.0) & ~size_t{15};
  const size_t n = bytes / sizeof(uint4);
  uint4* data = nullptr;
  unsigned* sink = nullptr;
  if ((e = cudaMalloc(&data, bytes)) != cudaSuccess)
    return fail("cudaMalloc", e);
  if ((e = cudaMalloc(&sink, sizeof(unsigned))) != cudaSuccess)
    return fail("cudaMalloc", e);
  // Any bytes will do; 0x5a everywhere makes acc 0, never the sink value.
  if ((e = cudaMemset(data, 0x5a, bytes)) != cudaSuccess)
    return fail("cudaMemset", e);

  const int threads = 512;
  const int blocks = prop.multiProcessorCount * 8;  // enough to fill each SM
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  read_kernel<<<blocks, threads>>>(data, n, sink);  // untimed
  if ((e = cudaDeviceSynchronize()) != cudaSuccess) return fail("warm-up", e);
  std::vector<double> gbs;
  for (int p = 0; p < passes; ++p) {
    cudaEventRecord(start);
    read_kernel<<<blocks, threads>>>(data, n, sink);
    cudaEventRecord(stop);
    if ((e = cudaEventSynchronize(stop)) != cudaSuccess) return fail("pass", e);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    gbs.push_back(static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
  }
  std::sort(gbs.begin(), gbs.end());
  std::printf(
      "{\"device\": \"%s\", \"sm\": \"%d.%d\", \"bytes\": %zu, \"passes\": %d, "
      "\"best_gb_s\": %.1f, \"median_gb_s\": %.1f}\n",
      prop.name, prop.major, prop.minor, bytes, passes, gbs.back(),
      gbs[gbs.size() / 2]);
  cudaFree(data);
  cudaFree(sink);
  return 0;
}
