// make_device_backend (device_backend.h) and the sequences of the device
// backend (device_backend_impl.h): each sequence's f16 K and V caches on the
// device, their lengths, the prefix cache's rows.
#include "worker/cuda/device_backend.h"

#include "worker/cuda/device_backend_impl.h"

namespace strata::worker {
namespace device {

// --- sequences -------------------------------------------------------------

absl::Status DeviceBackend::add_sequence(int seq, int n_ctx) {
  if (n_ctx <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("n_ctx must be positive, got ", n_ctx));
  }
  if (sequences_.count(seq) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", seq, " already exists"));
  }
  const size_t bytes = static_cast<size_t>(n_layers()) * static_cast<size_t>(n_ctx) *
                       static_cast<size_t>(k_width() + v_width()) * sizeof(uint16_t);
  Sequence s;
  s.n_ctx = n_ctx;
  STRATA_DEVICE_ASSIGN_OR_RETURN(s.kv, space(bytes));
  if (n_ctx > max_ctx_) {
    // Prompt rows in one attention launch: as many as 64 MiB of scores
    // hold at the longest context (at least one).
    const size_t per_row = static_cast<size_t>(hp_.n_head) * static_cast<size_t>(n_ctx) *
                           sizeof(float);
    const int rows = static_cast<int>(
        std::clamp<size_t>((size_t{64} << 20) / per_row, 1, static_cast<size_t>(options_.max_batch)));
    drop_graphs();  // they name the old scores buffer and its stride
    STRATA_DEVICE_ASSIGN_OR_RETURN(scores_, space(per_row * static_cast<size_t>(rows)));
    max_ctx_ = n_ctx;
    attention_rows_ = rows;
  }
  sequences_.emplace(seq, std::move(s));
  return absl::OkStatus();
}

absl::Status DeviceBackend::remove_sequence(int seq) {
  if (sequences_.erase(seq) == 0) {
    return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> DeviceBackend::sequence_length(int seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  return it->second.length;
}

absl::StatusOr<int> DeviceBackend::sequence_context(int seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  return it->second.n_ctx;
}

absl::Status DeviceBackend::truncate_sequence(int seq, int n) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  if (n < 0 || n > it->second.length) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", seq, ": cannot truncate to ", n,
                                                   " of ", it->second.length, " positions"));
  }
  it->second.length = n;
  return absl::OkStatus();
}

// A position's rows of every layer: K (k_width f16) then V (v_width f16),
// layer after layer. read_kv writes positions one after another.
int64_t DeviceBackend::kv_row_bytes() const {
  return int64_t{n_layers()} * (k_width() + v_width()) * int64_t{sizeof(uint16_t)};
}

absl::Status DeviceBackend::read_kv(int seq, int pos, int n, uint8_t* out) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  const Sequence& s = it->second;
  if (pos < 0 || n < 0 || pos + n > s.length) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", seq, ": rows [", pos, ", ", pos + n,
                                              ") outside its ", s.length, " positions"));
  }
  const size_t kb = static_cast<size_t>(k_width()) * 2, vb = static_cast<size_t>(v_width()) * 2;
  std::vector<uint8_t> k(kb * n), v(vb * n);
  for (int layer = 0; layer < n_layers(); ++layer) {
    STRATA_DEVICE_RETURN_IF_ERROR(api_->download(k.data(), k_cache(s, layer) + int64_t{pos} * k_width(),
                                          k.size()));
    STRATA_DEVICE_RETURN_IF_ERROR(api_->download(v.data(), v_cache(s, layer) + int64_t{pos} * v_width(),
                                          v.size()));
    for (int t = 0; t < n; ++t) {
      uint8_t* row = out + static_cast<size_t>(t) * kv_row_bytes() + layer * (kb + vb);
      std::memcpy(row, k.data() + t * kb, kb);
      std::memcpy(row + kb, v.data() + t * vb, vb);
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceBackend::append_kv(int seq, int n, const uint8_t* in) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  Sequence& s = it->second;
  if (n < 0 || s.length + n > s.n_ctx) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", seq, ": ", s.length, " + ", n,
                                              " positions exceed the context of ", s.n_ctx));
  }
  const size_t kb = static_cast<size_t>(k_width()) * 2, vb = static_cast<size_t>(v_width()) * 2;
  std::vector<uint8_t> k(kb * n), v(vb * n);
  for (int layer = 0; layer < n_layers(); ++layer) {
    for (int t = 0; t < n; ++t) {
      const uint8_t* row = in + static_cast<size_t>(t) * kv_row_bytes() + layer * (kb + vb);
      std::memcpy(k.data() + t * kb, row, kb);
      std::memcpy(v.data() + t * vb, row + kb, vb);
    }
    STRATA_DEVICE_RETURN_IF_ERROR(
        api_->upload(k_cache(s, layer) + int64_t{s.length} * k_width(), k.data(), k.size()));
    STRATA_DEVICE_RETURN_IF_ERROR(
        api_->upload(v_cache(s, layer) + int64_t{s.length} * v_width(), v.data(), v.size()));
  }
  s.length += n;
  return absl::OkStatus();
}

}  // namespace device

absl::StatusOr<std::unique_ptr<Backend>> make_device_backend(
    std::shared_ptr<const gguf::GgufModel> model, const arch::Hyperparameters& hp,
    BlockRange range, const DeviceBackendOptions& options, std::unique_ptr<DeviceApi> api) {
  if (model == nullptr) return absl::InvalidArgumentError("make_device_backend: no model");
  if (api == nullptr) return absl::InvalidArgumentError("make_device_backend: no device");
  if (range.first < 0 || range.first >= range.last || range.last > hp.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("blocks [", range.first, ", ", range.last,
                                                   ") are not a range of the model's ",
                                                   hp.n_layer));
  }
  if (options.max_batch < 1 || options.max_batch > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch must be 1 to 65536, got ", options.max_batch));
  }
  if (options.mma_min_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("mma_min_rows must be 0 (never) or more, got ", options.mma_min_rows));
  }
  if (options.attention_splits < 0 || options.attention_splits > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention_splits must be 0 (by the device) to 64, got ", options.attention_splits));
  }
  if (options.attention_split_keys < 1) {
    return absl::InvalidArgumentError(absl::StrCat("attention_split_keys must be at least 1, got ",
                                                   options.attention_split_keys));
  }
  auto backend = std::make_unique<device::DeviceBackend>(std::move(model), hp, range, options,
                                                         std::move(api));
  if (absl::Status st = backend->load(); !st.ok()) return st;
  return backend;
}

}  // namespace strata::worker
