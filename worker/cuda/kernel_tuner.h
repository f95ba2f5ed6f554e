// The cuda backend's tuner (issue 32): for each weight matrix shape (type,
// n_in, n_out) the matrix kernel's split-K (ROW_WARPS: 1, 2 or 4 warps a
// row, a build each, worker/cuda/kernels/matvec_source.h) and launch (its
// block: 64, 128 or 256 threads, step_kernels.h kStepMatvecBlocks) choices,
// measured once on the device (one column, the fastest of the candidates'
// median times: matvec_candidates()) and kept in a JSON file per device and
// kernel source, as the CPU tuner keeps its parameters (kernels/cpu/jit/
// tuner.h).
//
// The file: {"key": KEY, "matvec": {"Q4_K 4096x14336 i8": {"row_warps": 2,
// "threads": 128, "ms": {"w1 t64": t, ...}}, ...}}. KEY names the device, its compute capability,
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
  bool int8 = false;  // the kernel's int8 form (matvec3_i8_entry)
};

// One way to run the matrix kernel: its build's ROW_WARPS and its launch's
// block. The sums depend on row_warps alone.
struct MatvecChoice {
  int row_warps = 1;
  int threads = 128;
  bool operator==(const MatvecChoice&) const = default;
};

// Every choice the tuner times, in order: each ROW_WARPS (kStepRowWarps)
// with each block (kStepMatvecBlocks) that holds whole rows of it.
std::vector<MatvecChoice> matvec_candidates();
// "w2 t128" (the file's name of a choice's time).
std::string matvec_choice_text(const MatvecChoice& choice);

// "Q4_K 4096x14336", "Q4_K 4096x14336 i8" for the int8 form (the file's
// key of a shape).
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

  // The choice measured for `shape`, or none.
  std::optional<MatvecChoice> find(const MatvecShape& shape) const;
  // Records a measurement: times_ms[i] of matvec_candidates()[i]; returns
  // the fastest (the first of equals).
  MatvecChoice record(const MatvecShape& shape, const std::vector<double>& times_ms);
  // Entries measured since load() (not read from the file).
  int measured() const { return measured_; }
  int size() const { return static_cast<int>(entries_.size()); }

 private:
  struct Entry {
    MatvecChoice choice;
    std::map<std::string, double> ms;  // by matvec_choice_text
  };
  std::string path_;
  std::string key_;
  std::map<std::string, Entry> entries_;
  int measured_ = 0;
};

}  // namespace strata::worker
