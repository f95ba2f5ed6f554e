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
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
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


// A host entry taking cudaLaunchKernel's argument array, and the bytes of
// each of its parameters (what a captured launch copies).
struct HostEntry {
  std::function<void(void** args)> call;
  std::vector<size_t> arg_bytes;
};

template <typename... A, size_t... I>
void call_with(void (*f)(A...), void** args, std::index_sequence<I...>) {
  f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(args[I])...);
}

// `f` (a kernel's host build) as a HostEntry.
template <typename... A>
HostEntry adapt(void (*f)(A...)) {
  return HostEntry{
      [f](void** args) { call_with(f, args, std::index_sequence_for<A...>{}); },
      {sizeof(std::remove_cv_t<std::remove_reference_t<A>>)...}};
}

class EmulatedDeviceApi : public DeviceApi {
 public:
  void add(const KernelSource& source, const std::string& entry, HostEntry fn) {
    entries_[key(source, entry)] = std::move(fn);
  }

  std::string describe() const override { return "emulated (CPU coroutines)"; }
  int multiprocessors() const override { return 1; }
  // 80 unless set: the emulation runs every kernel, sm_90's wgmma ones too
  // (a device backend takes those on 90).
  int compute_capability() const override { return compute_capability_; }
  void set_compute_capability(int cc) { compute_capability_ = cc; }
  std::string tuning_key() const override { return "emulated"; }

  // Wall-clock time of the emulation (what a tuner test can order by).
  absl::StatusOr<double> time_ms(const std::function<absl::Status()>& work,
                                 int repeats) override {
    if (capturing_) return in_capture("time_ms");
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
    // Exactly `bytes` (the accounting above is a device's rounding): a read
    // past the end shows under AddressSanitizer, though a device's rounding
    // would hide it.
    void* p = nullptr;
    if (posix_memalign(&p, 256, std::max<size_t>(bytes, 1)) != 0) {
      return absl::ResourceExhaustedError("emulated device: out of memory");
    }
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
    if (capturing_) return in_capture("upload");
    std::memcpy(device, host, bytes);
    return absl::OkStatus();
  }
  absl::Status download(void* host, const void* device, size_t bytes) override {
    if (capturing_) return in_capture("download");
    std::memcpy(host, device, bytes);
    return absl::OkStatus();
  }
  absl::Status fill(void* device, int value, size_t bytes) override {
    if (capturing_) return in_capture("fill");
    std::memset(device, value, bytes);
    return absl::OkStatus();
  }

  // Graphs: the launches of `work` recorded with a copy of their arguments'
  // bytes (HostEntry::arg_bytes), replayed in order.
  absl::StatusOr<GraphHandle> capture(const std::function<absl::Status()>& work) override {
    if (capturing_) return in_capture("capture");
    if (profiling_) return absl::UnimplementedError("no graphs while launches are profiled");
    capturing_ = true;
    recording_.clear();
    const absl::Status st = work();
    capturing_ = false;
    if (!st.ok()) return st;
    graphs_.push_back(std::move(recording_));
    recording_.clear();
    ++captures_;
    return GraphHandle{static_cast<int>(graphs_.size()) - 1};
  }
  absl::Status replay(GraphHandle graph) override {
    if (capturing_) return in_capture("replay");
    if (graph.id < 0 || graph.id >= static_cast<int>(graphs_.size()) ||
        released_.count(graph.id) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("no captured graph ", graph.id));
    }
    ++replays_;
    for (Recorded& r : graphs_[static_cast<size_t>(graph.id)]) {
      std::vector<void*> args;
      for (size_t offset : r.offsets) args.push_back(r.words.data() + offset);
      ++launches_;
      ++launches_of_[timed_[static_cast<size_t>(r.kernel.id)].entry];
      const HostEntry& fn = *loaded_[static_cast<size_t>(r.kernel.id)];
      cuda_emulation::launch(r.grid, r.block, [&] { fn.call(args.data()); });
    }
    return absl::OkStatus();
  }
  void release(GraphHandle graph) override {
    if (graph.id < 0 || graph.id >= static_cast<int>(graphs_.size())) return;
    graphs_[static_cast<size_t>(graph.id)].clear();
    released_.insert(graph.id);
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
    timed_.push_back(KernelTime{absl::StrCat(kernel.source->name, " ",
                                        absl::StrJoin(kernel.source->options, " ")),
                           kernel.entry, 0, 0.0});
    handles_.emplace(k, h);
    return h;
  }

  absl::Status launch(KernelHandle kernel, unsigned grid, unsigned block,
                      void** args) override {
    if (kernel.id < 0 || kernel.id >= static_cast<int>(loaded_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("no loaded kernel ", kernel.id));
    }
    const HostEntry& fn = *loaded_[static_cast<size_t>(kernel.id)];
    if (capturing_) {  // recorded: the arguments' bytes, in 8-byte words each
      Recorded r{kernel, grid, block, {}, {}};
      for (size_t i = 0; i < fn.arg_bytes.size(); ++i) {
        r.offsets.push_back(r.words.size());
        r.words.resize(r.words.size() + (fn.arg_bytes[i] + 7) / 8);
        std::memcpy(r.words.data() + r.offsets.back(), args[i], fn.arg_bytes[i]);
      }
      recording_.push_back(std::move(r));
      return absl::OkStatus();
    }
    ++launches_;
    ++launches_of_[timed_[static_cast<size_t>(kernel.id)].entry];
    blocks_[timed_[static_cast<size_t>(kernel.id)].entry].insert(block);
    const auto t0 = std::chrono::steady_clock::now();
    cuda_emulation::launch(grid, block, [&] { fn.call(args); });
    if (profiling_) {  // the emulation's wall clock
      KernelTime& t = timed_[static_cast<size_t>(kernel.id)];
      ++t.launches;
      t.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
    }
    return absl::OkStatus();
  }

  absl::Status set_profiling(bool on) override {
    if (capturing_) return in_capture("set_profiling");
    profiling_ = on;
    return absl::OkStatus();
  }
  std::vector<KernelTime> kernel_profile() const override {
    return launched_most_time_first(timed_);
  }

  // Kernel launches run so far (one by one or in replays).
  int64_t launches() const { return launches_; }
  // The blocks (threads) `entry` was launched with, outside graphs.
  std::set<unsigned> blocks_of(const std::string& entry) const {
    auto it = blocks_.find(entry);
    return it == blocks_.end() ? std::set<unsigned>{} : it->second;
  }
  // Launches of `entry` run so far (one by one or in replays).
  int64_t launches_of(const std::string& entry) const {
    auto it = launches_of_.find(entry);
    return it == launches_of_.end() ? 0 : it->second;
  }
  // Graphs captured and replays run so far.
  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }

 private:
  struct Recorded {
    KernelHandle kernel;
    unsigned grid = 0, block = 0;
    std::vector<uint64_t> words;  // every argument's bytes from a word of its own
    std::vector<size_t> offsets;  // [argument]: its first word
  };
  static absl::Status in_capture(const char* what) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " while capturing a graph: only launches can be captured"));
  }
  static std::string key(const KernelSource& source, const std::string& entry) {
    return absl::StrCat(source.name, "\n", absl::StrJoin(source.options, "\n"), "\n", entry);
  }
  std::map<std::string, HostEntry> entries_;  // add()ed; node-stable
  std::map<void*, size_t> sizes_;             // allocations and their bytes
  size_t allocated_ = 0;
  std::map<std::string, KernelHandle> handles_;
  std::vector<const HostEntry*> loaded_;  // [KernelHandle::id]
  std::vector<KernelTime> timed_;  // [KernelHandle::id]: launches and time while profiling
  bool profiling_ = false;
  int64_t launches_ = 0;
  std::map<std::string, std::set<unsigned>> blocks_;
  std::map<std::string, int64_t> launches_of_;
  bool capturing_ = false;
  std::vector<Recorded> recording_;
  std::vector<std::vector<Recorded>> graphs_;  // [GraphHandle::id]
  std::set<int> released_;
  int64_t captures_ = 0, replays_ = 0;
  int compute_capability_ = 80;
};

}  // namespace strata::worker::testing
