// DeviceApi: what the cuda backend asks of a device — memory, copies, and
// launches of the kernels of worker/cuda/kernels — behind one seam with two
// implementations:
//   - the GPU: make_cuda_device_api (cudart, the kernels compiled by NVRTC
//     at their first launch and cached in memory and on disk);
//   - the CPU emulation for tests (tests/cuda/emulated_device_api.h), which
//     runs the same kernel sources on host threads, so that a kernel test
//     or a forward pass written against this seam runs here without a GPU
//     and unchanged on the GPU machine.
//
// A kernel is named by its source (program name, text and compile options:
// -DNCOLS=8 makes another kernel than -DNCOLS=1) and its entry point.
// load() compiles and loads it once (a backend loads every kernel it will
// launch when it loads the model: "kernels generated at load") and gives a
// handle whose launches cost no lookup. Arguments are passed as
// cudaLaunchKernel takes them: an array of pointers to each argument's
// value, in the entry's parameter order, of exactly the entry's types.
//
// Device memory is opaque to the host: only upload/download touch it.
// Threads: one thread at a time per DeviceApi. Launches run in order;
// download waits for every launch before it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::worker {

struct KernelSource {
  std::string name;                  // program name: "matvec.cu"
  const char* text = nullptr;        // CUDA C++ (worker/cuda/kernels/*.cuh)
  std::vector<std::string> options;  // "-DNCOLS=8", ...
};

struct KernelRef {
  const KernelSource* source = nullptr;  // outlives every launch of it
  std::string entry;                     // "strata_matvec_q4_0"
};

// A loaded kernel of one DeviceApi (its index there); -1: none.
struct KernelHandle {
  int id = -1;
};

// A captured graph of launches of one DeviceApi (capture()); -1: none.
struct GraphHandle {
  int id = -1;
};

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;

  // "cuda:0 (NVIDIA H200, compute 9.0)", "emulated (CPU coroutines)".
  virtual std::string describe() const = 0;
  // What a tuning measurement is valid for: the device model, its compute
  // capability and the driver ("NVIDIA H200 compute 9.0 driver 13000").
  virtual std::string tuning_key() const = 0;
  // Blocks that run at once, about (streaming multiprocessors; 1 for the
  // emulation): what grid-stride kernels size their grids by.
  virtual int multiprocessors() const = 0;
  // The device's compute capability, major x 10 + minor (90 for an H200):
  // which kernels it has the instructions of (sm_90's wgmma; the emulation
  // says what a test sets, 80 by default).
  virtual int compute_capability() const = 0;

  // `bytes` of device memory (uninitialised); ResourceExhausted when the
  // device has too little.
  virtual absl::StatusOr<void*> alloc(size_t bytes) = 0;
  // Frees what alloc returned (nullptr: no-op).
  virtual void free(void* device) = 0;
  // Host -> device and device -> host copies of `bytes`.
  virtual absl::Status upload(void* device, const void* host, size_t bytes) = 0;
  virtual absl::Status download(void* host, const void* device, size_t bytes) = 0;
  // Sets `bytes` of device memory to `value`.
  virtual absl::Status fill(void* device, int value, size_t bytes) = 0;

  // Compiles (or finds compiled) and loads `kernel`; the same handle for
  // the same (source name, options, entry). Errors: InvalidArgument when
  // the source does not compile or has no such entry (naming both); the
  // device's error otherwise.
  virtual absl::StatusOr<KernelHandle> load(const KernelRef& kernel) = 0;

  // Runs a loaded kernel on grid x 1 x 1 blocks of `block` x 1 x 1
  // threads. InvalidArgument for a handle this api did not give; the
  // device's error otherwise.
  virtual absl::Status launch(KernelHandle kernel, unsigned grid, unsigned block,
                              void** args) = 0;

  // Milliseconds `work` (launches) takes on the device: the median of
  // `repeats` timed runs after one untimed.
  virtual absl::StatusOr<double> time_ms(const std::function<absl::Status()>& work,
                                         int repeats) = 0;

  // CUDA graphs: capture() runs `work` recording the launches it makes
  // instead of running them — kernels, grids, blocks and the arguments'
  // values at the time of the launch — and replay() runs the recorded
  // launches again, in order, after everything enqueued before (one
  // submission instead of one a launch; the data they read may have
  // changed, the arguments have not). Inside `work` only launches are
  // allowed: an upload, download, fill or time_ms there is
  // FailedPrecondition, and so is capture() itself. release() frees a
  // graph. An api without graphs says Unimplemented (the default), and its
  // user launches one by one.
  virtual absl::StatusOr<GraphHandle> capture(const std::function<absl::Status()>& work) {
    (void)work;
    return absl::UnimplementedError("this device api cannot capture graphs");
  }
  virtual absl::Status replay(GraphHandle graph) {
    (void)graph;
    return absl::UnimplementedError("this device api cannot capture graphs");
  }
  virtual void release(GraphHandle graph) { (void)graph; }

  // Kernel profile (diagnostics: where a step's time goes; `strata speed`
  // with STRATA_KERNEL_PROFILE, worker/cuda/cuda_backend.h). While on, each
  // launch is timed on the device (the host waits for it: slower, and
  // capture() is Unimplemented, so a profiled step launches one by one) and
  // added to its kernel's total. Unimplemented where the api cannot.
  struct KernelTime {
    std::string program;  // the source's name and options: "matvec.cu -DNCOLS=8 ..."
    std::string entry;    // "strata_matvec3_q4_k"
    long long launches = 0;
    double ms = 0.0;      // summed over the launches
  };
  virtual absl::Status set_profiling(bool on) {
    (void)on;
    return absl::UnimplementedError("this device api does not time its launches");
  }
  // Every kernel launched while profiling, most time first.
  virtual std::vector<KernelTime> kernel_profile() const { return {}; }

 protected:
  // kernel_profile() of an api keeping a KernelTime a loaded kernel: those
  // launched, most time first.
  static std::vector<KernelTime> launched_most_time_first(std::vector<KernelTime> times) {
    std::erase_if(times, [](const KernelTime& t) { return t.launches == 0; });
    std::sort(times.begin(), times.end(),
              [](const KernelTime& a, const KernelTime& b) { return a.ms > b.ms; });
    return times;
  }

 public:

  // load() then launch() (tests; a backend keeps its handles).
  absl::Status launch(const KernelRef& kernel, unsigned grid, unsigned block, void** args) {
    absl::StatusOr<KernelHandle> h = load(kernel);
    if (!h.ok()) return h.status();
    return launch(*h, grid, block, args);
  }
};

// A device allocation that frees itself.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceApi* api, void* p, size_t bytes) : api_(api), p_(p), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      api_ = o.api_;
      p_ = o.p_;
      bytes_ = o.bytes_;
      o.api_ = nullptr;
      o.p_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  // `bytes` of `api`'s memory.
  static absl::StatusOr<DeviceBuffer> make(DeviceApi* api, size_t bytes) {
    absl::StatusOr<void*> p = api->alloc(bytes);
    if (!p.ok()) return p.status();
    return DeviceBuffer(api, *p, bytes);
  }

  void* get() const { return p_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void reset() {
    if (api_ != nullptr) api_->free(p_);
    api_ = nullptr;
    p_ = nullptr;
    bytes_ = 0;
  }
  DeviceApi* api_ = nullptr;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Device `ordinal` through cudart, with an NVRTC compiler whose disk cache
// is `kernel_cache_dir` ("" : ~/.cache/strata/cuda-kernels; "-": none).
// FailedPrecondition when there is no such device (cuda_device's message);
// Unimplemented in a build without CUDA.
absl::StatusOr<std::unique_ptr<DeviceApi>> make_cuda_device_api(int ordinal,
                                                                std::string kernel_cache_dir);

}  // namespace strata::worker
