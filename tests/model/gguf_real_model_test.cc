// Real GGUF files: the two published models (STRATA_MODELS_DIR), the
// stories260K family and llama.cpp's vocabulary-only files (STRATA_SHARED_DIR).
// Facts checked here were read with the Python gguf package (gguf 0.19).
// Every test skips, saying why, when its file is absent.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "model/gguf_reader.h"
#include "model/gguf_writer.h"
#include "tests/model/gguf_test_util.h"

namespace strata::gguf {
namespace {

namespace fs = std::filesystem;

constexpr char kSmolLm[] = "SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr char kGemma[] = "gemma-3-270m-q4_k_m.gguf";

// CRC-32 (IEEE, as zlib.crc32) of a tensor's bytes.
uint32_t crc32(const uint8_t* data, uint64_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint64_t i = 0; i < n; ++i) {
    crc ^= data[i];
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
  }
  return ~crc;
}

float first_float(const TensorInfo& t) {
  float f = 0;
  std::memcpy(&f, t.data, sizeof(f));
  return f;
}

// Read-only mapping of a whole file, for feeding prefixes to parse().
class Mapped {
 public:
  explicit Mapped(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      size_ = static_cast<size_t>(st.st_size);
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      data_ = p == MAP_FAILED ? nullptr : static_cast<const uint8_t*>(p);
    }
    ::close(fd);
  }
  ~Mapped() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

std::unique_ptr<GgufModel> open_or_skip_reason(const fs::path& path,
                                               std::string* skip) {
  if (!fs::exists(path)) {
    *skip = path.string() +
            " is absent (run scripts/fetch-models.sh or set "
            "STRATA_MODELS_DIR / STRATA_SHARED_DIR)";
    return nullptr;
  }
  auto model = GgufModel::open(path.string());
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

#define OPEN_OR_SKIP(var, path)                                            \
  std::string skip_##var;                                                  \
  std::unique_ptr<GgufModel> var = open_or_skip_reason(path, &skip_##var); \
  if (!skip_##var.empty()) GTEST_SKIP() << skip_##var;                     \
  ASSERT_NE(var, nullptr)

std::map<GgmlType, int> count_types(const GgufModel& model) {
  std::map<GgmlType, int> counts;
  for (const TensorInfo& t : model.tensors()) ++counts[t.type];
  return counts;
}

TEST(GgufRealModel, LoadsSmolLm2) {
  OPEN_OR_SKIP(model, testing::models_dir() / kSmolLm);
  const GgufFile& f = model->first();
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 33u);
  EXPECT_EQ(model->tensors().size(), 272u);
  EXPECT_EQ(f.data_offset(), 1785664u);
  EXPECT_EQ(*f.get_string("general.architecture"), "llama");
  EXPECT_EQ(*f.get_u32("llama.block_count"), 30u);
  EXPECT_EQ(*f.get_u32("llama.context_length"), 8192u);
  EXPECT_EQ(*f.get_u32("llama.embedding_length"), 576u);
  EXPECT_EQ(*f.get_u32("llama.attention.head_count"), 9u);
  EXPECT_EQ(*f.get_u32("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(*f.get_f32("llama.rope.freq_base"), 100000.0f);
  EXPECT_EQ(*f.get_u32("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(*f.get_u32("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_EQ(*f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(
      (*f.get_array("tokenizer.ggml.tokens", ValueType::kString))->items.size(),
      49152u);
  EXPECT_EQ(
      (*f.get_array("tokenizer.ggml.merges", ValueType::kString))->items.size(),
      48900u);

  const TensorInfo* emb = model->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::kQ8_0);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(emb->offset, 0u);
  EXPECT_EQ(emb->n_bytes, 30081024u);
  const TensorInfo* down = model->find_tensor("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->type, GgmlType::kQ4_1);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{1536, 576}));
  EXPECT_EQ(down->offset, 30083328u);
  EXPECT_EQ(crc32(down->data, down->n_bytes), 0x698d9708u);
  const TensorInfo* norm = model->find_tensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(first_float(*norm), 1.7578125f);
  EXPECT_EQ(crc32(norm->data, norm->n_bytes), 0xc6811e6cu);

  std::map<GgmlType, int> types = count_types(*model);
  EXPECT_EQ(types[GgmlType::kQ4_1], 210);
  EXPECT_EQ(types[GgmlType::kF32], 61);
  EXPECT_EQ(types[GgmlType::kQ8_0], 1);
}

TEST(GgufRealModel, LoadsGemma3) {
  OPEN_OR_SKIP(model, testing::models_dir() / kGemma);
  const GgufFile& f = model->first();
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 33u);
  EXPECT_EQ(model->tensors().size(), 236u);
  EXPECT_EQ(f.data_offset(), 6525120u);
  EXPECT_EQ(*f.get_string("general.architecture"), "gemma3");
  EXPECT_EQ(*f.get_u32("gemma3.block_count"), 18u);
  EXPECT_EQ(*f.get_u32("gemma3.context_length"), 32768u);
  EXPECT_EQ(*f.get_u32("gemma3.embedding_length"), 640u);
  EXPECT_EQ(*f.get_u32("gemma3.attention.sliding_window"), 512u);
  EXPECT_EQ(*f.get_u32("tokenizer.ggml.bos_token_id"), 2u);
  EXPECT_EQ(*f.get_u32("tokenizer.ggml.eos_token_id"), 1u);
  EXPECT_TRUE(*f.get_bool("tokenizer.ggml.add_bos_token"));
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                          "tokenizer.ggml.token_type"}) {
    const Value* v = f.find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(std::get<Array>(v->data).items.size(), 262144u) << key;
  }
  const TensorInfo* emb = model->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::kQ8_0);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{640, 262144}));
  EXPECT_EQ(emb->n_bytes, 178257920u);
  const TensorInfo* k = model->find_tensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->type, GgmlType::kQ5_0);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{640, 256}));
  EXPECT_EQ(k->offset, 178260480u);
  EXPECT_EQ(crc32(k->data, k->n_bytes), 0x52297f70u);
  const TensorInfo* k_norm = model->find_tensor("blk.0.attn_k_norm.weight");
  ASSERT_NE(k_norm, nullptr);
  EXPECT_EQ(crc32(k_norm->data, k_norm->n_bytes), 0x7dd7c1ecu);

  std::map<GgmlType, int> types = count_types(*model);
  EXPECT_EQ(types[GgmlType::kF32], 109);
  EXPECT_EQ(types[GgmlType::kQ5_0], 81);
  EXPECT_EQ(types[GgmlType::kQ4_K], 27);
  EXPECT_EQ(types[GgmlType::kQ8_0], 10);
  EXPECT_EQ(types[GgmlType::kQ6_K], 9);
}

TEST(GgufRealModel, LoadsStories260K) {
  OPEN_OR_SKIP(model, testing::shared_dir() / "models" / "stories260K.gguf");
  const GgufFile& f = model->first();
  EXPECT_EQ(f.metadata().size(), 19u);
  EXPECT_EQ(model->tensors().size(), 48u);
  EXPECT_EQ(f.data_offset(), 14176u);
  EXPECT_EQ(*f.get_u32("llama.block_count"), 5u);
  EXPECT_EQ(*f.get_u32("llama.embedding_length"), 64u);
  const TensorInfo* norm = model->find_tensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->offset, 131072u);
  EXPECT_EQ(crc32(norm->data, norm->n_bytes), 0xd4ab65d9u);
}

TEST(GgufRealModel, LoadsEverySharedGguf) {
  const fs::path shared = testing::shared_dir();
  if (!fs::exists(shared)) GTEST_SKIP() << shared << " is absent";
  int n = 0;
  for (const fs::path& dir :
       {shared / "models", shared / "conformance" / "tokenizer"}) {
    if (!fs::exists(dir)) continue;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
      if (entry.path().extension() != ".gguf") continue;
      SCOPED_TRACE(entry.path().string());
      auto model = GgufModel::open(entry.path().string());
      EXPECT_TRUE(model.ok()) << model.status();
      ++n;
    }
  }
  if (n == 0) GTEST_SKIP() << "no .gguf files under " << shared;
}

// Re-serializing a llama.cpp-written file with the writer (metadata copied,
// tensor bytes copied) gives the same bytes: same layout, same padding.
TEST(GgufRealModel, WriterReproducesLlamaCppLayout) {
  const fs::path path =
      testing::shared_dir() / "models" / "stories260K-Q8_0.gguf";
  OPEN_OR_SKIP(model, path);
  const GgufFile& f = model->first();
  GgufWriter writer;
  for (const KeyValue& kv : f.metadata()) {
    ASSERT_TRUE(writer.set_metadata(kv.key, kv.value).ok()) << kv.key;
  }
  for (const TensorInfo& t : f.tensors()) {
    ASSERT_TRUE(writer.add_tensor(t.name, t.type, t.shape).ok()) << t.name;
  }
  auto bytes = writer.to_bytes(
      [&](size_t index, const TensorInfo&, std::span<uint8_t> out) {
        const TensorInfo& src = f.tensors()[index];
        std::copy(src.data, src.data + src.n_bytes, out.begin());
        return absl::OkStatus();
      });
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  Mapped original(path.string());
  ASSERT_NE(original.data(), nullptr);
  ASSERT_EQ(bytes->size(), original.size());
  EXPECT_TRUE(std::equal(bytes->begin(), bytes->end(), original.data()));
}

// Prefixes of a real file shorter than the end of its last tensor are
// refused with InvalidArgument (never a crash); longer ones are accepted.
// Cut at every offset of the first 4 KiB, then `header_cuts` spread over
// the metadata and tensor infos, the first bytes of the first and last
// tensor infos, and `data_cuts` spread over the tensor data. (Each cut past
// the metadata re-parses all of it: ~60 ms for gemma's 262k-token
// vocabulary, so the counts stay modest.)
void check_truncations(const fs::path& path, int header_cuts, int data_cuts) {
  if (!fs::exists(path)) GTEST_SKIP() << path << " is absent";
  Mapped file(path.string());
  ASSERT_NE(file.data(), nullptr);
  auto whole = GgufFile::parse(file.data(), file.size());
  ASSERT_TRUE(whole.ok()) << whole.status();
  uint64_t data_end = 0;
  for (const TensorInfo& t : (*whole)->tensors()) {
    data_end = std::max(data_end, t.offset + t.n_bytes);
  }
  const uint64_t header_end = (*whole)->data_offset();
  const uint64_t needed = header_end + data_end;

  std::vector<uint64_t> cuts;
  for (uint64_t k = 0; k < std::min<uint64_t>(header_end, 4096); ++k) {
    cuts.push_back(k);
  }
  for (int i = 0; i < header_cuts; ++i) {
    cuts.push_back(header_end * static_cast<uint64_t>(i) / header_cuts);
  }
  const auto& tensors = (*whole)->tensors();
  for (const TensorInfo* t : {&tensors.front(), &tensors.back()}) {
    for (uint64_t d = 0; d < 24; ++d) cuts.push_back(t->info_offset + d);
  }
  for (int i = 0; i < data_cuts; ++i) {
    cuts.push_back(header_end + (needed - header_end) *
                                    static_cast<uint64_t>(i) / data_cuts);
  }
  cuts.push_back(needed - 1);
  for (uint64_t k : cuts) {
    auto prefix = GgufFile::parse(file.data(), k);
    ASSERT_FALSE(prefix.ok()) << "accepted a prefix of " << k << " bytes";
    ASSERT_EQ(prefix.status().code(), absl::StatusCode::kInvalidArgument)
        << k << ": " << prefix.status();
  }
  for (uint64_t k = needed; k <= file.size(); ++k) {
    EXPECT_TRUE(GgufFile::parse(file.data(), k).ok()) << k;
  }
}

TEST(GgufRealModel, RejectsTruncatedSmolLm2) {
  check_truncations(testing::models_dir() / kSmolLm, 300, 200);
}

TEST(GgufRealModel, RejectsTruncatedGemma3) {
  check_truncations(testing::models_dir() / kGemma, 100, 40);
}

TEST(GgufRealModel, RejectsTruncatedStories260K) {
  check_truncations(testing::shared_dir() / "models" / "stories260K-Q4_0.gguf",
                    2000, 300);
}

}  // namespace
}  // namespace strata::gguf
