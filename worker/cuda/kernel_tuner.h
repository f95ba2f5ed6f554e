// The cuda backend's tuner (issue 32): for each weight matrix shape (type,
// n_in, n_out) the split-K choice of the matrix kernel (ROW_WARPS: 1, 2 or
// 4 warps a row, worker/cuda/kernels/matvec_source.h), measured once on
// the device (one column, the fastest of the choices' median times) and
// kept in a JSON file per device and kernel source, as the CPU tuner keeps
// its parameters (kernels/cpu/jit/tuner.h).
//
// The file: {"key": KEY, "matvec": {"Q4_K 4096x14336": {"row_warps": 2,
// "ms": [t1, t2, t4]}, ...}}. KEY names the device, its compute capability,
// the driver and a hash of the kernel source (tuning_key()): a file of
// another key is not used (and is replaced at the next save). A missing,
// unreadable or malformed file is an empty tuner: tuning never fails a
// load.
//
// Threads: one at a time.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/ggml_type.h"

namespace strata::worker {

struct MatvecShape {
  GgmlType type = GgmlType::kF32;
  int n_in = 0;
  int n_out = 0;
};

// "Q4_K 4096x14336" (the file's key of a shape).
std::string matvec_shape_text(const MatvecShape& shape);

// `device` (DeviceApi::tuning_key()) and the matrix kernel's source hash.
std::string tuning_key(const std::string& device);

// $HOME/.cache/strata/cuda-tuner.json ("" when HOME is unset).
std::string default_tuner_path();

class MatvecTuner {
 public:
  // path "": in memory only (nothing read or written).
  MatvecTuner(std::string path, std::string key);

  // Reads the file; what cannot be used is left out (see above).
  void load();
  // Writes the file (through PATH.tmp, renamed). Errors: the I/O error.
  absl::Status save() const;

  // The ROW_WARPS measured for `shape`, or none.
  std::optional<int> find(const MatvecShape& shape) const;
  // Records a measurement: times_ms[i] of kStepRowWarps[i]; returns the
  // ROW_WARPS of the fastest (the first of equals).
  int record(const MatvecShape& shape, const std::vector<double>& times_ms);
  // Entries measured since load() (not read from the file).
  int measured() const { return measured_; }
  int size() const { return static_cast<int>(entries_.size()); }

 private:
  struct Entry {
    int row_warps = 1;
    std::vector<double> ms;
  };
  std::string path_;
  std::string key_;
  std::map<std::string, Entry> entries_;
  int measured_ = 0;
};

}  // namespace strata::worker
