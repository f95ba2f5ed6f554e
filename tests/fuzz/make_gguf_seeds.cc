// Writes a few small, valid GGUF files (every value type, nested arrays, a
// vocabulary, tensors of several types, a custom alignment) into a folder, as
// seeds for the GGUF reader fuzzer. Usage: make_gguf_seeds OUT_DIR
#include <cstdio>
#include <string>
#include <vector>

#include "model/gguf_writer.h"

namespace {

using namespace strata::gguf;  // NOLINT: a small tool

int write(const GgufWriter& writer, const std::string& path) {
  absl::Status s = writer.write(
      path, [](size_t index, const TensorInfo&, std::span<uint8_t> out) {
        for (size_t i = 0; i < out.size(); ++i) {
          out[i] = static_cast<uint8_t>(i + index);
        }
        return absl::OkStatus();
      });
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int failures = 0;

  GgufWriter values;
  (void)values.set_metadata("general.architecture", value_string("llama"));
  (void)values.set_metadata("llama.block_count", value_u32(2));
  (void)values.set_metadata("u8", value_u8(1));
  (void)values.set_metadata("i8", value_i8(-1));
  (void)values.set_metadata("u16", value_u16(2));
  (void)values.set_metadata("i16", value_i16(-2));
  (void)values.set_metadata("i32", value_i32(-3));
  (void)values.set_metadata("f32", value_f32(0.5f));
  (void)values.set_metadata("b", value_bool(true));
  (void)values.set_metadata("u64", value_u64(4));
  (void)values.set_metadata("i64", value_i64(-4));
  (void)values.set_metadata("f64", value_f64(0.25));
  (void)values.set_metadata(
      "nested",
      value_array(ValueType::kArray,
                  {value_array(ValueType::kString,
                               {value_string("a"), value_string("bc")}),
                   value_array(ValueType::kUint8, {value_u8(9)})}));
  failures += write(values, dir + "/values.gguf");

  GgufWriter vocab;
  std::vector<Value> tokens, scores, types;
  for (int i = 0; i < 8; ++i) {
    tokens.push_back(value_string("t" + std::to_string(i)));
    scores.push_back(value_f32(-static_cast<float>(i)));
    types.push_back(value_i32(1));
  }
  (void)vocab.set_metadata("tokenizer.ggml.model", value_string("llama"));
  (void)vocab.set_metadata("tokenizer.ggml.tokens",
                           value_array(ValueType::kString, tokens));
  (void)vocab.set_metadata("tokenizer.ggml.scores",
                           value_array(ValueType::kFloat32, scores));
  (void)vocab.set_metadata("tokenizer.ggml.token_type",
                           value_array(ValueType::kInt32, types));
  (void)vocab.set_metadata("tokenizer.ggml.bos_token_id", value_u32(1));
  failures += write(vocab, dir + "/vocab.gguf");

  GgufWriter tensors;
  (void)tensors.set_metadata("general.alignment", value_u32(64));
  (void)tensors.set_metadata("split.no", value_u16(0));
  (void)tensors.set_metadata("split.count", value_u16(1));
  (void)tensors.set_metadata("split.tensors.count", value_i32(4));
  (void)tensors.add_tensor("a", strata::GgmlType::kF32, {4, 2});
  (void)tensors.add_tensor("b", strata::GgmlType::kQ4_0, {32, 2});
  (void)tensors.add_tensor("c", strata::GgmlType::kQ4_K, {256});
  (void)tensors.add_tensor("d", strata::GgmlType::kF16, {3, 1, 1, 2});
  failures += write(tensors, dir + "/tensors.gguf");
  return failures == 0 ? 0 : 1;
}
