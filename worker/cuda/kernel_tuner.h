// The cuda backend's tuner (issue 32): for each weight matrix shape (type,
// n_in, n_out) the matrix kernel's split-K (ROW_WARPS: 1, 2 or 4 warps a
// row, a build each, worker/cuda/kernels/matvec_source.h) and launch (its
// block: 64, 128 or 256 threads, step_kernels.h kStepMatvecBlocks) choices,
// measured once on the device (one column, the fastest of the candidates'
// median times: matvec_candidates()), and the tensor-core form of a prompt
// chunk's product (PrefillForm: int8 mma.sync, f16 wgmma on sm_90, f16
// mma.sync; timed on a chunk of zero rows), kept in a JSON file per device
// and kernel source, as the CPU tuner keeps its parameters
// (kernels/cpu/jit/tuner.h).
//
// The file: {"key": KEY, "matvec": {"Q4_K 4096x14336 i8": {"row_warps": 2,
// "threads": 128, "ms": {"w1 t64": t, ...}}, ...}, "prefill": {"Q4_K
// 4096x14336 @512": {"i8": t, "wgmma": t, "f16": t}, ...}} (@: the chunk's
// rows). KEY names the
// device, its compute capability, the driver and hashes of the kernel
// sources (tuning_key()): a file of another key is not used (and is
// replaced at the next save). A missing, unreadable or malformed file is an
// empty tuner: tuning never fails a load.
//
// Threads: one at a time.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
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

// The tensor-core forms of a prompt chunk's product, in the order the
// backend prefers them untuned: int8 mma.sync on the rows' Q8 values
// (mma.cuh's mma_tile_i8), f16 of the same values on sm_90's warpgroup
// instructions (wgmma.cuh), f16 mma.sync on the float rows (mma_tile).
// Their sums differ in the last bits; a load's choice holds for every step.
enum class PrefillForm { kInt8, kWgmma, kF16 };
// "i8", "wgmma", "f16" (the file's names).
std::string_view prefill_form_text(PrefillForm form);

// `device` (DeviceApi::tuning_key()) and the hashes of the matrix
// kernel's source and of the tensor-core kernels' (mma and wgmma).
std::string tuning_key(const std::string& device);

// $HOME/.cache/strata/cuda-tuner.json ("" when HOME is unset).
std::string default_tuner_path();

class KernelTuner {
 public:
  // path "": in memory only (nothing read or written).
  KernelTuner(std::string path, std::string key);

  // Reads the file; what cannot be used is left out (see above).
  void load();
  // Writes the file (through PATH.tmp, renamed). Errors: the I/O error.
  absl::Status save() const;

  // The choice measured for `shape`, or none.
  std::optional<MatvecChoice> find(const MatvecShape& shape) const;
  // Records a measurement: times_ms[i] of matvec_candidates()[i]; returns
  // the fastest (the first of equals).
  MatvecChoice record(const MatvecShape& shape, const std::vector<double>& times_ms);

  // The fastest of `candidates` (the backend's order) for a prompt chunk
  // of `rows` rows through `shape` (its int8 flag ignored), when the file
  // or an earlier record_prefill timed every one of them; none else.
  std::optional<PrefillForm> find_prefill(const MatvecShape& shape, int rows,
                                          const std::vector<PrefillForm>& candidates) const;
  // Records times_ms[i] of candidates[i] beside the shape's other forms'
  // times; returns the fastest of the candidates (the first of equals).
  PrefillForm record_prefill(const MatvecShape& shape, int rows,
                             const std::vector<PrefillForm>& candidates,
                             const std::vector<double>& times_ms);

  // Shapes measured since load() (not read from the file), of both kinds.
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
  // By shape text (no " i8"): each form's time, by prefill_form_text.
  std::map<std::string, std::map<std::string, double>> prefill_;
  int measured_ = 0;
};

}  // namespace strata::worker
