// Test helpers for the tokenizer tests: where the models, the shared
// conformance vectors and the committed expected data are; loading a
// model's vocabulary; a tiny GGUF image writer that, unlike GgufWriter, will
// write hostile metadata; hex.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/gguf_reader.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocabulary.h"
#include "tests/test_paths.h"

namespace strata::tokenizer::testing {

using strata::testing::models_dir;
using strata::testing::shared_dir;

// tests/tokenizer/data (expected ids from scripts/make_tokenizer_expected.py),
// or $STRATA_TOKENIZER_DATA.
inline std::filesystem::path data_dir() {
  if (const char* env = std::getenv("STRATA_TOKENIZER_DATA")) return env;
  return STRATA_TOKENIZER_DATA;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string from_hex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(
        std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

// The vocabulary of a GGUF model file.
inline absl::StatusOr<Vocabulary> load_vocabulary(
    const std::filesystem::path& path) {
  auto model = gguf::GgufModel::open(path.string());
  if (!model.ok()) return model.status();
  return vocabulary_from_gguf((*model)->first());
}

// Writes GGUF v3 images with any metadata at all (no tensors).
class GgufImage {
 public:
  void add_string(std::string_view key, std::string_view value) {
    begin(key, gguf::ValueType::kString);
    put_string(value);
  }
  void add_u32(std::string_view key, uint32_t value) {
    begin(key, gguf::ValueType::kUint32);
    put(value);
  }
  void add_i32(std::string_view key, int32_t value) {
    begin(key, gguf::ValueType::kInt32);
    put(value);
  }
  void add_bool(std::string_view key, bool value) {
    begin(key, gguf::ValueType::kBool);
    put(static_cast<uint8_t>(value));
  }
  void add_strings(std::string_view key, const std::vector<std::string>& v) {
    begin_array(key, gguf::ValueType::kString, v.size());
    for (const std::string& s : v) put_string(s);
  }
  void add_f32s(std::string_view key, const std::vector<float>& v) {
    begin_array(key, gguf::ValueType::kFloat32, v.size());
    for (float f : v) put(f);
  }
  void add_i32s(std::string_view key, const std::vector<int32_t>& v) {
    begin_array(key, gguf::ValueType::kInt32, v.size());
    for (int32_t i : v) put(i);
  }

  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    auto put_raw = [&out](const void* p, size_t n) {
      const auto* b = static_cast<const uint8_t*>(p);
      out.insert(out.end(), b, b + n);
    };
    const uint32_t magic = 0x46554747;  // "GGUF"
    const uint32_t version = 3;
    const uint64_t n_tensors = 0;
    put_raw(&magic, 4);
    put_raw(&version, 4);
    put_raw(&n_tensors, 8);
    put_raw(&n_kv_, 8);
    out.insert(out.end(), kv_.begin(), kv_.end());
    while (out.size() % 32 != 0) out.push_back(0);
    return out;
  }

 private:
  template <typename T>
  void put(T v) {
    const auto* b = reinterpret_cast<const uint8_t*>(&v);
    kv_.insert(kv_.end(), b, b + sizeof v);
  }
  void put_string(std::string_view s) {
    put(static_cast<uint64_t>(s.size()));
    kv_.insert(kv_.end(), s.begin(), s.end());
  }
  void begin(std::string_view key, gguf::ValueType type) {
    ++n_kv_;
    put_string(key);
    put(static_cast<uint32_t>(type));
  }
  void begin_array(std::string_view key, gguf::ValueType element,
                   size_t count) {
    begin(key, gguf::ValueType::kArray);
    put(static_cast<uint32_t>(element));
    put(static_cast<uint64_t>(count));
  }

  uint64_t n_kv_ = 0;
  std::vector<uint8_t> kv_;
};

// Test names from string parameters ("llama-bpe" -> "llama_bpe").
inline std::string param_name(
    const ::testing::TestParamInfo<std::string>& param) {
  std::string name = param.param;
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

// A tokenizer from an image, or the first error on the way (reader, then
// vocabulary loading, then the tokenizer itself).
inline absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer_from_image(
    const std::vector<uint8_t>& bytes) {
  auto file = gguf::GgufFile::parse(bytes.data(), bytes.size());
  if (!file.ok()) return file.status();
  return Tokenizer::from_gguf(**file);
}

}  // namespace strata::tokenizer::testing
