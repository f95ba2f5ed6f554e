// The device backend tests' fixture (device_backend_fixture.h).
#include "tests/cuda/device_backend_fixture.h"

#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/quantize.h"
#include "model/gguf_writer.h"
#include "model/synthetic_model.h"
#include "tests/cuda/emulated_step_kernels.h"
#include "tests/test_paths.h"

namespace strata::worker::device_test {

Loaded open_model(const std::string& path) {
  auto opened = gguf::GgufModel::open(path);
  EXPECT_TRUE(opened.ok()) << opened.status();
  if (!opened.ok()) return {};
  Loaded l;
  l.model = std::shared_ptr<const gguf::GgufModel>(std::move(*opened));
  auto hp = arch::read_hyperparameters(l.model->first());
  EXPECT_TRUE(hp.ok()) << hp.status();
  if (hp.ok()) l.hp = *hp;
  return l;
}

std::string device_kind;

int emulated_compute_capability = 80;

std::unique_ptr<DeviceApi> new_api() {
  if (device_kind == "emulated") {
    auto api = testing::emulated_step_device();
    api->set_compute_capability(emulated_compute_capability);
    return api;
  }
  auto api = make_cuda_device_api(0, "");
  EXPECT_TRUE(api.ok()) << api.status();
  return api.ok() ? *std::move(api) : nullptr;
}

DeviceBackendOptions test_options(int max_batch, int row_warps, int mma_min_rows) {
  DeviceBackendOptions o;
  o.max_batch = max_batch;
  o.tune = false;
  o.row_warps = row_warps;
  o.mma_min_rows = mma_min_rows;
  return o;
}

std::unique_ptr<Backend> device_backend(const Loaded& m, BlockRange range,
                                        const DeviceBackendOptions& o) {
  auto b = make_device_backend(m.model, m.hp, range, o, new_api());
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

std::unique_ptr<Backend> device_backend(const Loaded& m, BlockRange range, int max_batch,
                                        int row_warps) {
  return device_backend(m, range, test_options(max_batch, row_warps));
}

std::unique_ptr<Backend> cpu_backend(const Loaded& m, BlockRange range, int max_batch) {
  CpuBackendOptions o;
  o.max_batch = max_batch;
  o.no_tune = true;
  auto b = make_cpu_backend(m.model, m.hp, range, o);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

std::vector<std::vector<float>> logits_alone(Backend& b, int seq, std::vector<int32_t> prompt,
                                             const std::vector<int32_t>& next, int n_ctx) {
  std::vector<std::vector<float>> out;
  EXPECT_TRUE(b.add_sequence(seq, n_ctx).ok());
  ForwardRequest req;
  req.seq = seq;
  req.tokens = prompt;
  ForwardResult r;
  EXPECT_TRUE(b.forward(req, &r).ok());
  out.emplace_back(r.logits.begin(), r.logits.end());
  for (int32_t t : next) {
    const int32_t one[] = {t};
    req.tokens = one;
    EXPECT_TRUE(b.forward(req, &r).ok());
    out.emplace_back(r.logits.begin(), r.logits.end());
  }
  return out;
}

std::vector<float> forward_logits(Backend& b, const std::vector<int32_t>& tokens,
                                  const std::vector<ForwardSlice>& slices) {
  ForwardRequest req;
  req.tokens = tokens;
  req.slices = slices;
  ForwardResult r;
  const absl::Status st = b.forward(req, &r);
  EXPECT_TRUE(st.ok()) << st;
  return std::vector<float>(r.logits.begin(), r.logits.end());
}

std::string stories_path() {
  return (strata::testing::shared_dir() / "models" / "stories260K.gguf").string();
}

std::string tiny_model_path(const std::string& name) {
  return (strata::testing::models_dir() / "tiny" / ("tiny-" + name + ".gguf")).string();
}


absl::Status write_converted_copy(const std::string& in, const std::string& out,
                                  const std::function<GgmlType(const gguf::TensorInfo&)>& type_of,
                                  const TensorEdit& edit) {
  auto model = gguf::GgufFile::open(in);
  if (!model.ok()) return model.status();
  const gguf::GgufFile& f = **model;
  gguf::GgufWriter w;
  for (const gguf::KeyValue& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;
    if (absl::Status st = w.set_metadata(kv.key, kv.value); !st.ok()) return st;
  }
  std::vector<GgmlType> types;
  for (const gguf::TensorInfo& t : f.tensors()) {
    types.push_back(type_of(t));
    if (absl::Status st = w.add_tensor(t.name, types.back(), t.shape); !st.ok()) return st;
  }
  return w.write(out, [&](size_t i, const gguf::TensorInfo&, std::span<uint8_t> bytes) {
    const gguf::TensorInfo& t = f.tensors()[i];
    if (types[i] == t.type) {
      std::memcpy(bytes.data(), t.data, bytes.size());
    } else {
      std::vector<float> values(static_cast<size_t>(t.n_elements));
      const int64_t n = static_cast<int64_t>(t.n_elements);
      if (absl::Status st = reference::dequantize_row(t.type, t.data, n, values.data());
          !st.ok()) {
        return st;
      }
      if (absl::Status st = reference::quantize_row(types[i], values.data(), n, bytes.data());
          !st.ok()) {
        return st;
      }
    }
    if (edit) edit(t, bytes);
    return absl::OkStatus();
  });
}

std::function<GgmlType(const gguf::TensorInfo&)> matrices_as(GgmlType type) {
  return [type](const gguf::TensorInfo& t) {
    const bool matrix = t.shape.size() >= 2 && t.shape[1] > 1;
    return matrix && t.shape[0] % ggml_type_info(type).block_size == 0 ? type : t.type;
  };
}

std::string stories_with_a_bf16_matrix(gguf::testing::TempDir& dir) {
  const std::string path = dir.file("bf16.gguf");
  EXPECT_TRUE(write_converted_copy(stories_path(), path, [](const gguf::TensorInfo& t) {
                return t.name == "blk.1.attn_k.weight" ? GgmlType::kBF16 : t.type;
              }).ok());
  return path;
}

std::string tiny_llama(gguf::testing::TempDir& dir, const std::string& type_name) {
  synth::SynthOptions o;
  o.shape = "tiny-llama";
  o.type = GgmlType::kF32;
  if (type_name == "Q4_K_M") {
    o.type = GgmlType::kQ4_K;
    o.mix = synth::SynthOptions::Mix::kQ4_K_M;
  }
  const std::string path = dir.file("m.gguf");
  auto report = synth::write_synthetic_model(o, path);
  EXPECT_TRUE(report.ok()) << report.status();
  if (type_name == "F32" || type_name == "Q4_K_M") return path;
  const std::optional<GgmlType> type = ggml_type_from_name(type_name);
  EXPECT_TRUE(type.has_value()) << type_name;
  const std::string converted = dir.file("converted.gguf");
  EXPECT_TRUE(write_converted_copy(path, converted, matrices_as(*type)).ok());
  return converted;
}

}  // namespace strata::worker::device_test
