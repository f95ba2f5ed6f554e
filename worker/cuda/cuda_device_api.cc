// make_cuda_device_api (worker/cuda/device_api.h): cudart memory and copies
// on one device, kernels compiled by NVRTC at their first launch (PTX,
// cached on disk by NvrtcCompiler), loaded with cudaLibraryLoadData (CUDA
// 12+, no libcuda link) and kept per (source, options) and entry. Every
// copy, fill and launch goes to one stream of the api's own (in order), so
// that its launches can be captured as CUDA graphs (cudaStreamBeginCapture,
// thread-local mode) and replayed (cudaGraphLaunch). Each call first makes
// the api's device the calling thread's current one.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/env_switch.h"
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/device_api.h"
#include "worker/cuda/nvrtc_compiler.h"

namespace strata::worker {
namespace {

absl::Status cuda_error(const char* what, cudaError_t e) {
  const absl::StatusCode code = e == cudaErrorMemoryAllocation
                                    ? absl::StatusCode::kResourceExhausted
                                    : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

class CudaDeviceApi : public DeviceApi {
 public:
  CudaDeviceApi(CudaDevice device, std::string cache_dir, cudaStream_t stream)
      : device_(std::move(device)), compiler_({.cache_dir = std::move(cache_dir)}),
        stream_(stream) {
    // Programmatic dependent launch (worker/cuda/kernels/grid.cuh): sm_90
    // and later, unless STRATA_PDL=0 (the comparison gpu-check.sh times).
    pdl_ = device_.cc_major >= 9 && kernels::env_switch("STRATA_PDL") != false;
  }

  ~CudaDeviceApi() override {
    bind();
    cudaStreamSynchronize(stream_);
    for (cudaGraphExec_t g : graphs_) {
      if (g != nullptr) cudaGraphExecDestroy(g);
    }
    if (profile_start_ != nullptr) cudaEventDestroy(profile_start_);
    if (profile_stop_ != nullptr) cudaEventDestroy(profile_stop_);
    cudaStreamDestroy(stream_);
    for (auto& [key, library] : libraries_) cudaLibraryUnload(library);
  }

  std::string describe() const override {
    return absl::StrCat("cuda:", device_.ordinal, " (", device_.name, ", compute ",
                        device_.cc_major, ".", device_.cc_minor,
                        pdl_ ? ", programmatic dependent launch" : "", ")");
  }

  int multiprocessors() const override { return device_.multiprocessors; }
  int compute_capability() const override { return device_.cc_major * 10 + device_.cc_minor; }

  std::string tuning_key() const override {
    return absl::StrCat(device_.name, " compute ", device_.cc_major, ".", device_.cc_minor,
                        " driver ", cuda_driver_version());
  }

  absl::StatusOr<double> time_ms(const std::function<absl::Status()>& work,
                                 int repeats) override {
    bind();
    if (capturing_) return in_capture("time_ms");
    cudaEvent_t start = nullptr, stop = nullptr;
    if (cudaError_t e = cudaEventCreate(&start); e != cudaSuccess) {
      return cuda_error("cudaEventCreate", e);
    }
    if (cudaError_t e = cudaEventCreate(&stop); e != cudaSuccess) {
      cudaEventDestroy(start);
      return cuda_error("cudaEventCreate", e);
    }
    absl::Status st = work();  // untimed: first-use costs
    std::vector<double> ms;
    for (int r = 0; r < repeats && st.ok(); ++r) {
      cudaEventRecord(start, stream_);
      st = work();
      cudaEventRecord(stop, stream_);
      if (cudaError_t e = cudaEventSynchronize(stop); e != cudaSuccess && st.ok()) {
        st = cuda_error("cudaEventSynchronize", e);
      }
      float t = 0.0f;
      cudaEventElapsedTime(&t, start, stop);
      ms.push_back(t);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    if (!st.ok()) return st;
    if (ms.empty()) return 0.0;
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

  absl::StatusOr<void*> alloc(size_t bytes) override {
    bind();
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes); e != cudaSuccess) {
      return cuda_error(absl::StrCat("cudaMalloc of ", bytes, " bytes").c_str(), e);
    }
    return p;
  }

  void free(void* device) override {
    bind();
    if (device != nullptr) cudaFree(device);
  }

  // Copies from pageable host memory: the call returns when the host's
  // bytes are read (upload) or written (download: after the stream's work).
  absl::Status upload(void* device, const void* host, size_t bytes) override {
    bind();
    if (capturing_) return in_capture("upload");
    if (cudaError_t e = cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_);
        e != cudaSuccess) {
      return cuda_error("cudaMemcpyAsync to the device", e);
    }
    return absl::OkStatus();
  }

  absl::Status download(void* host, const void* device, size_t bytes) override {
    bind();
    if (capturing_) return in_capture("download");
    if (cudaError_t e = cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_);
        e != cudaSuccess) {
      return cuda_error("cudaMemcpyAsync from the device", e);
    }
    if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess) {
      return cuda_error("cudaStreamSynchronize", e);
    }
    return absl::OkStatus();
  }

  absl::Status fill(void* device, int value, size_t bytes) override {
    bind();
    if (capturing_) return in_capture("fill");
    if (cudaError_t e = cudaMemsetAsync(device, value, bytes, stream_); e != cudaSuccess) {
      return cuda_error("cudaMemsetAsync", e);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<GraphHandle> capture(const std::function<absl::Status()>& work) override {
    bind();
    if (capturing_) return in_capture("capture");
    if (profiling_) return absl::UnimplementedError("no graphs while launches are profiled");
    if (cudaError_t e = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
        e != cudaSuccess) {
      return cuda_error("cudaStreamBeginCapture", e);
    }
    capturing_ = true;
    const absl::Status st = work();
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    if (!st.ok() || end != cudaSuccess) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return st.ok() ? cuda_error("cudaStreamEndCapture", end) : st;
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (made != cudaSuccess) return cuda_error("cudaGraphInstantiate", made);
    graphs_.push_back(exec);
    return GraphHandle{static_cast<int>(graphs_.size()) - 1};
  }

  absl::Status replay(GraphHandle graph) override {
    bind();
    if (capturing_) return in_capture("replay");
    if (graph.id < 0 || graph.id >= static_cast<int>(graphs_.size()) ||
        graphs_[static_cast<size_t>(graph.id)] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("no captured graph ", graph.id));
    }
    if (cudaError_t e = cudaGraphLaunch(graphs_[static_cast<size_t>(graph.id)], stream_);
        e != cudaSuccess) {
      return cuda_error("cudaGraphLaunch", e);
    }
    return absl::OkStatus();
  }

  void release(GraphHandle graph) override {
    bind();
    if (graph.id < 0 || graph.id >= static_cast<int>(graphs_.size())) return;
    cudaGraphExec_t& g = graphs_[static_cast<size_t>(graph.id)];
    if (g != nullptr) cudaGraphExecDestroy(g);
    g = nullptr;
  }

  using DeviceApi::launch;

  absl::StatusOr<KernelHandle> load(const KernelRef& kernel) override {
    bind();
    const KernelSource& src = *kernel.source;
    const std::string key = absl::StrCat(src.name, "\n", absl::StrJoin(src.options, "\n"));
    auto entry_key = std::make_pair(key, kernel.entry);
    if (auto it = handles_.find(entry_key); it != handles_.end()) return it->second;
    auto lib = libraries_.find(key);
    if (lib == libraries_.end()) {
      const NvrtcTarget target{.device_name = device_.name,
                               .cc_major = device_.cc_major,
                               .cc_minor = device_.cc_minor,
                               .driver_version = cuda_driver_version()};
      absl::StatusOr<NvrtcOutput> ptx = compiler_.compile(target, src.name, src.text, src.options);
      if (!ptx.ok()) return ptx.status();
      cudaLibrary_t library = nullptr;
      if (cudaError_t e = cudaLibraryLoadData(&library, ptx->ptx.data(), nullptr, nullptr, 0,
                                              nullptr, nullptr, 0);
          e != cudaSuccess) {
        return cuda_error(absl::StrCat("loading ", src.name).c_str(), e);
      }
      lib = libraries_.emplace(key, library).first;
    }
    cudaKernel_t k = nullptr;
    if (cudaError_t e = cudaLibraryGetKernel(&k, lib->second, kernel.entry.c_str());
        e != cudaSuccess) {
      return absl::InvalidArgumentError(
          absl::StrCat(src.name, " has no entry ", kernel.entry, ": ", cudaGetErrorString(e)));
    }
    const KernelHandle h{static_cast<int>(kernels_.size())};
    kernels_.push_back(Loaded{k, kernel.entry});
    times_.push_back(KernelTime{absl::StrCat(src.name, " ", absl::StrJoin(src.options, " ")),
                                kernel.entry, 0, 0.0});
    handles_.emplace(std::move(entry_key), h);
    return h;
  }

  absl::Status launch(KernelHandle kernel, unsigned grid, unsigned block,
                      void** args) override {
    bind();
    if (kernel.id < 0 || kernel.id >= static_cast<int>(kernels_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("no loaded kernel ", kernel.id));
    }
    const Loaded& k = kernels_[static_cast<size_t>(kernel.id)];
    if (profiling_) cudaEventRecord(profile_start_, stream_);
    // Every kernel waits for the one before at its start (grid.cuh), so
    // it may be launched before that one ends (not while profiling: each
    // launch is timed alone).
    cudaLaunchAttribute early{};
    early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    early.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(grid);
    config.blockDim = dim3(block);
    config.dynamicSmemBytes = 0;
    config.stream = stream_;
    config.attrs = &early;
    config.numAttrs = pdl_ && !profiling_ ? 1 : 0;
    if (cudaError_t e = cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(k.kernel), args);
        e != cudaSuccess) {
      return cuda_error(absl::StrCat("launch of ", k.entry).c_str(), e);
    }
    if (profiling_) {
      cudaEventRecord(profile_stop_, stream_);
      if (cudaError_t e = cudaEventSynchronize(profile_stop_); e != cudaSuccess) {
        return cuda_error(absl::StrCat("launch of ", k.entry).c_str(), e);
      }
      float ms = 0.0f;
      cudaEventElapsedTime(&ms, profile_start_, profile_stop_);
      KernelTime& t = times_[static_cast<size_t>(kernel.id)];
      ++t.launches;
      t.ms += ms;
    }
    return absl::OkStatus();
  }

  absl::Status set_profiling(bool on) override {
    bind();
    if (capturing_) return in_capture("set_profiling");
    if (on && profile_start_ == nullptr) {
      if (cudaError_t e = cudaEventCreate(&profile_start_); e != cudaSuccess) {
        profile_start_ = nullptr;
        return cuda_error("cudaEventCreate", e);
      }
    }
    if (on && profile_stop_ == nullptr) {
      if (cudaError_t e = cudaEventCreate(&profile_stop_); e != cudaSuccess) {
        profile_stop_ = nullptr;
        return cuda_error("cudaEventCreate", e);
      }
    }
    profiling_ = on;
    return absl::OkStatus();
  }

  std::vector<KernelTime> kernel_profile() const override {
    return launched_most_time_first(times_);
  }

 private:
  // cudart's current device is the calling thread's: a worker calls from
  // threads other than the one that made the api (cuda:1 would otherwise
  // get device 0's memory and launches).
  void bind() const { cudaSetDevice(device_.ordinal); }

  static absl::Status in_capture(const char* what) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " while capturing a graph: only launches can be captured"));
  }

  struct Loaded {
    cudaKernel_t kernel = nullptr;
    std::string entry;
  };

  CudaDevice device_;
  NvrtcCompiler compiler_;
  std::map<std::string, cudaLibrary_t> libraries_;
  std::map<std::pair<std::string, std::string>, KernelHandle> handles_;
  std::vector<Loaded> kernels_;  // [KernelHandle::id]
  std::vector<KernelTime> times_;  // [KernelHandle::id]: launches timed while profiling
  cudaStream_t stream_ = nullptr;
  bool capturing_ = false;
  std::vector<cudaGraphExec_t> graphs_;  // [GraphHandle::id]; released: null
  bool profiling_ = false;
  cudaEvent_t profile_start_ = nullptr, profile_stop_ = nullptr;
  bool pdl_ = false;  // launches may begin before the kernel before ends
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceApi>> make_cuda_device_api(int ordinal,
                                                                std::string kernel_cache_dir) {
  absl::StatusOr<CudaDevice> device = cuda_device(ordinal);
  if (!device.ok()) return device.status();
  if (cudaError_t e = cudaSetDevice(ordinal); e != cudaSuccess) {
    return cuda_error(absl::StrCat("cudaSetDevice(", ordinal, ")").c_str(), e);
  }
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    return cuda_error("cudaStreamCreateWithFlags", e);
  }
  return std::make_unique<CudaDeviceApi>(*std::move(device), std::move(kernel_cache_dir), stream);
}

}  // namespace strata::worker
