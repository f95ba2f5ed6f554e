// EmulatedDeviceApi: the DeviceApi seam (worker/cuda/device_api.h) on the
// CPU, for tests without a GPU. "Device" memory is host memory; a launch
// runs the entry's host build (a kernel source compiled for the CPU with
// tests/cuda/cuda_emulator.h) on emulated blocks and threads. The host
// builds are registered by (source name, options, entry): a source
// compiled with other options (-DNCOLS=3) is another kernel, as on a
// device. A launch of an unregistered kernel is InvalidArgument, as a
// missing entry is on a device.
//
// Usage:
//   EmulatedDeviceApi api;
//   api.add(matvec_source, "strata_matvec_q4_0", adapt(one_column::strata_matvec_q4_0));
//   ... then the same calls as on make_cuda_device_api's device.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/cuda/cuda_emulator.h"
#include "worker/cuda/device_api.h"

namespace strata::worker::testing {

// A host entry taking cudaLaunchKernel's argument array.
using HostEntry = std::function<void(void** args)>;

template <typename... A, size_t... I>
void call_with(void (*f)(A...), void** args, std::index_sequence<I...>) {
  f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(args[I])...);
}

// `f` (a kernel's host build) as a HostEntry.
template <typename... A>
HostEntry adapt(void (*f)(A...)) {
  return [f](void** args) { call_with(f, args, std::index_sequence_for<A...>{}); };
}

class EmulatedDeviceApi : public DeviceApi {
 public:
  void add(const KernelSource& source, const std::string& entry, HostEntry fn) {
    entries_[key(source, entry)] = std::move(fn);
  }

  std::string describe() const override { return "emulated (CPU coroutines)"; }
  int multiprocessors() const override { return 1; }
  std::string tuning_key() const override { return "emulated"; }

  // Wall-clock time of the emulation (what a tuner test can order by).
  absl::StatusOr<double> time_ms(const std::function<absl::Status()>& work,
                                 int repeats) override {
    if (absl::Status st = work(); !st.ok()) return st;
    std::vector<double> ms;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      if (absl::Status st = work(); !st.ok()) return st;
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                       .count());
    }
    if (ms.empty()) return 0.0;
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

  // Device memory, as a device has a fixed amount: kCapacityBytes in all
  // (host memory underneath), so an allocation past it fails however the
  // host overcommits.
  static constexpr size_t kCapacityBytes = size_t{8} << 30;

  absl::StatusOr<void*> alloc(size_t bytes) override {
    const size_t rounded = (bytes + 255) / 256 * 256 + 256;
    if (rounded > kCapacityBytes - allocated_) {
      return absl::ResourceExhaustedError(absl::StrCat("emulated device: out of memory (", bytes,
                                                       " bytes asked, ",
                                                       kCapacityBytes - allocated_, " free)"));
    }
    void* p = std::aligned_alloc(256, rounded);
    if (p == nullptr) return absl::ResourceExhaustedError("emulated device: out of memory");
    allocated_ += rounded;
    sizes_[p] = rounded;
    return p;
  }
  void free(void* device) override {
    if (device == nullptr) return;
    auto it = sizes_.find(device);
    if (it != sizes_.end()) {
      allocated_ -= it->second;
      sizes_.erase(it);
    }
    std::free(device);
  }
  absl::Status upload(void* device, const void* host, size_t bytes) override {
    std::memcpy(device, host, bytes);
    return absl::OkStatus();
  }
  absl::Status download(void* host, const void* device, size_t bytes) override {
    std::memcpy(host, device, bytes);
    return absl::OkStatus();
  }
  absl::Status fill(void* device, int value, size_t bytes) override {
    std::memset(device, value, bytes);
    return absl::OkStatus();
  }

  using DeviceApi::launch;

  absl::StatusOr<KernelHandle> load(const KernelRef& kernel) override {
    const std::string k = key(*kernel.source, kernel.entry);
    if (auto it = handles_.find(k); it != handles_.end()) return it->second;
    auto it = entries_.find(k);
    if (it == entries_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          kernel.source->name, " (", absl::StrJoin(kernel.source->options, " "),
          ") has no emulated entry ", kernel.entry));
    }
    const KernelHandle h{static_cast<int>(loaded_.size())};
    loaded_.push_back(&it->second);
    handles_.emplace(k, h);
    return h;
  }

  absl::Status launch(KernelHandle kernel, unsigned grid, unsigned block,
                      void** args) override {
    if (kernel.id < 0 || kernel.id >= static_cast<int>(loaded_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("no loaded kernel ", kernel.id));
    }
    const HostEntry& fn = *loaded_[static_cast<size_t>(kernel.id)];
    ++launches_;
    cuda_emulation::launch(grid, block, [&] { fn(args); });
    return absl::OkStatus();
  }

  // Kernel launches so far.
  int64_t launches() const { return launches_; }

 private:
  static std::string key(const KernelSource& source, const std::string& entry) {
    return absl::StrCat(source.name, "\n", absl::StrJoin(source.options, "\n"), "\n", entry);
  }
  std::map<std::string, HostEntry> entries_;  // add()ed; node-stable
  std::map<void*, size_t> sizes_;             // allocations and their bytes
  size_t allocated_ = 0;
  std::map<std::string, KernelHandle> handles_;
  std::vector<const HostEntry*> loaded_;  // [KernelHandle::id]
  int64_t launches_ = 0;
};

}  // namespace strata::worker::testing
