// Split models as llama.cpp's gguf-split writes them: NAME-0000i-of-0000N.gguf
// with split.no (0-based), split.count and split.tensors.count.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "model/gguf_reader.h"
#include "model/gguf_writer.h"
#include "tests/model/gguf_test_util.h"

namespace strata::gguf {
namespace {

using testing::TempDir;

struct PartSpec {
  int split_no;       // value of split.no
  int split_count;    // value of split.count
  int tensors_count;  // value of split.tensors.count; < 0: omit the key
  std::vector<std::string> tensors;
};

// Writes one part at `path`; each tensor is F32 [4] filled with its index.
void write_part(const std::string& path, const PartSpec& spec, bool first) {
  GgufWriter writer;
  if (first) {
    ASSERT_TRUE(
        writer.set_metadata("general.architecture", value_string("llama"))
            .ok());
    ASSERT_TRUE(writer.set_metadata("llama.block_count", value_u32(3)).ok());
  }
  ASSERT_TRUE(writer
                  .set_metadata("split.no",
                                value_u16(static_cast<uint16_t>(spec.split_no)))
                  .ok());
  ASSERT_TRUE(writer
                  .set_metadata("split.count", value_u16(static_cast<uint16_t>(
                                                   spec.split_count)))
                  .ok());
  if (spec.tensors_count >= 0) {
    ASSERT_TRUE(
        writer
            .set_metadata("split.tensors.count", value_i32(spec.tensors_count))
            .ok());
  }
  for (const std::string& name : spec.tensors) {
    ASSERT_TRUE(writer.add_tensor(name, GgmlType::kF32, {4}).ok());
  }
  absl::Status s = writer.write(
      path, [&](size_t index, const TensorInfo&, std::span<uint8_t> out) {
        std::fill(out.begin(), out.end(), static_cast<uint8_t>(index + 1));
        return absl::OkStatus();
      });
  ASSERT_TRUE(s.ok()) << s;
}

std::string part_name(const TempDir& dir, int part, int count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05d-of-%05d.gguf", part, count);
  return dir.file(name);
}

// Three good parts: 2 + 1 + 2 tensors.
std::vector<PartSpec> good_parts() {
  return {{0, 3, 5, {"token_embd.weight", "blk.0.attn_q.weight"}},
          {1, 3, 5, {"blk.1.attn_q.weight"}},
          {2, 3, 5, {"blk.2.attn_q.weight", "output.weight"}}};
}

void write_parts(const TempDir& dir, const std::vector<PartSpec>& parts,
                 int file_count = 3) {
  for (size_t i = 0; i < parts.size(); ++i) {
    write_part(part_name(dir, static_cast<int>(i) + 1, file_count), parts[i],
               i == 0);
  }
}

void expect_invalid(const absl::StatusOr<std::unique_ptr<GgufModel>>& model,
                    std::string_view rule) {
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument)
      << model.status();
  EXPECT_NE(model.status().message().find(std::string(rule)),
            absl::string_view::npos)
      << "expected \"" << rule << "\" in: " << model.status();
}

TEST(GgufSplit, OpensAllParts) {
  TempDir dir;
  write_parts(dir, good_parts());
  for (int entry : {1, 2, 3}) {  // any part may be named
    SCOPED_TRACE(entry);
    auto model = GgufModel::open(part_name(dir, entry, 3));
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_EQ((*model)->parts().size(), 3u);
    EXPECT_EQ(*(*model)->first().get_string("general.architecture"), "llama");
    const std::vector<TensorInfo>& tensors = (*model)->tensors();
    ASSERT_EQ(tensors.size(), 5u);
    const char* names[] = {"token_embd.weight", "blk.0.attn_q.weight",
                           "blk.1.attn_q.weight", "blk.2.attn_q.weight",
                           "output.weight"};
    const uint32_t parts[] = {0, 0, 1, 2, 2};
    const uint8_t fills[] = {1, 2, 1, 1, 2};
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(tensors[i].name, names[i]);
      EXPECT_EQ(tensors[i].split_index, parts[i]);
      EXPECT_EQ(tensors[i].data[0], fills[i]);
      EXPECT_EQ((*model)->find_tensor(names[i]), &tensors[i]);
    }
  }
}

TEST(GgufSplit, SingleFileIsOnePart) {
  TempDir dir;
  GgufWriter writer;
  ASSERT_TRUE(
      writer.add_tensor("a", GgmlType::kF32, {4}, std::vector<uint8_t>(16))
          .ok());
  ASSERT_TRUE(writer.write(dir.file("plain.gguf")).ok());
  auto model = GgufModel::open(dir.file("plain.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->parts().size(), 1u);
  EXPECT_EQ((*model)->tensors().size(), 1u);
  // A "split" of one part, named as gguf-split names it, without split keys.
  ASSERT_TRUE(writer.write(part_name(dir, 1, 1)).ok());
  model = GgufModel::open(part_name(dir, 1, 1));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->parts().size(), 1u);
}

TEST(GgufSplit, RejectsMissingPart) {
  TempDir dir;
  write_parts(dir, good_parts());
  std::filesystem::remove(part_name(dir, 2, 3));
  auto model = GgufModel::open(part_name(dir, 1, 3));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound)
      << model.status();
  EXPECT_NE(model.status().message().find("split part 2 of 3"),
            absl::string_view::npos)
      << model.status();
  EXPECT_NE(model.status().message().find("model-00002-of-00003.gguf"),
            absl::string_view::npos)
      << model.status();
}

TEST(GgufSplit, RejectsWrongSplitNo) {
  TempDir dir;
  std::vector<PartSpec> parts = good_parts();
  parts[1].split_no = 2;
  write_parts(dir, parts);
  auto model = GgufModel::open(part_name(dir, 1, 3));
  expect_invalid(model, "split.no 2 but the file is part 2 of 3");
  expect_invalid(model, "key 'split.no' at offset 24");
}

TEST(GgufSplit, RejectsSplitCountDisagreeingWithFileName) {
  TempDir dir;
  std::vector<PartSpec> parts = good_parts();
  parts[2].split_count = 4;
  write_parts(dir, parts);
  expect_invalid(GgufModel::open(part_name(dir, 1, 3)),
                 "split.count 4 disagrees with the file name (3 parts)");
}

TEST(GgufSplit, RejectsTensorCountMismatch) {
  TempDir dir;
  std::vector<PartSpec> parts = good_parts();
  parts[0].tensors_count = 6;
  write_parts(dir, parts);
  expect_invalid(GgufModel::open(part_name(dir, 1, 3)),
                 "split.tensors.count 6 but the 3 parts hold 5 tensors");
}

TEST(GgufSplit, RejectsFirstPartWithoutTensorCount) {
  TempDir dir;
  std::vector<PartSpec> parts = good_parts();
  parts[0].tensors_count = -1;
  write_parts(dir, parts);
  expect_invalid(GgufModel::open(part_name(dir, 1, 3)),
                 "key 'split.tensors.count' is absent");
}

TEST(GgufSplit, RejectsDuplicateTensorAcrossParts) {
  TempDir dir;
  std::vector<PartSpec> parts = good_parts();
  parts[2].tensors[0] = "blk.0.attn_q.weight";
  write_parts(dir, parts);
  expect_invalid(GgufModel::open(part_name(dir, 1, 3)),
                 "duplicate tensor name across parts (already in part 1");
}

TEST(GgufSplit, RejectsSplitCountWithoutSplitFileName) {
  TempDir dir;
  write_part(dir.file("renamed.gguf"), good_parts()[0], true);
  expect_invalid(GgufModel::open(dir.file("renamed.gguf")),
                 "does not follow NAME-00001-of-0000N.gguf");
}

// split.count 0 names no parts at all: refused as such, in a file named as
// a part or not (it used to be blamed on the file name).
TEST(GgufSplit, RejectsSplitCountZero) {
  TempDir dir;
  PartSpec zero = good_parts()[0];
  zero.split_count = 0;
  write_part(dir.file("model.gguf"), zero, true);
  expect_invalid(GgufModel::open(dir.file("model.gguf")),
                 "split.count 0 is not a number of parts");
  write_part(part_name(dir, 1, 3), zero, true);
  expect_invalid(GgufModel::open(part_name(dir, 1, 3)),
                 "split.count 0 is not a number of parts");
}

TEST(GgufSplit, RejectsSplitFileNameWithoutSplitKeys) {
  TempDir dir;
  GgufWriter writer;
  ASSERT_TRUE(writer.write(part_name(dir, 1, 2)).ok());
  ASSERT_TRUE(writer.write(part_name(dir, 2, 2)).ok());
  expect_invalid(GgufModel::open(part_name(dir, 1, 2)),
                 "but key 'split.count' is absent");
}

TEST(GgufSplit, RejectsPartNumberBeyondCount) {
  TempDir dir;
  write_part(part_name(dir, 4, 3), good_parts()[0], true);
  expect_invalid(GgufModel::open(part_name(dir, 4, 3)),
                 "file name says part 4 of 3");
}

// A worker's view: only the parts holding the tensors it asks for.
bool wants_block_1(std::string_view name) {
  return name == "blk.1.attn_q.weight";
}

TEST(GgufSplitShard, MapsOnlyTheFirstPartAndThePartsItNeeds) {
  TempDir dir;
  write_parts(dir, good_parts());
  auto model = GgufModel::open_shard(part_name(dir, 1, 3), wants_block_1);
  ASSERT_TRUE(model.ok()) << model.status();
  const auto& parts = (*model)->parts();
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_NE(parts[0], nullptr);  // the metadata
  EXPECT_NE(parts[1], nullptr);  // blk.1
  EXPECT_EQ(parts[2], nullptr);  // read, then unmapped
  EXPECT_TRUE((*model)->absent_parts().empty());
  // Every tensor of the parts present is listed; those unmapped lack data.
  ASSERT_EQ((*model)->tensors().size(), 5u);
  EXPECT_EQ((*model)->find_tensor("blk.1.attn_q.weight")->data[0], 1);
  EXPECT_NE((*model)->find_tensor("blk.0.attn_q.weight")->data, nullptr);
  const TensorInfo* output = (*model)->find_tensor("output.weight");
  ASSERT_NE(output, nullptr);
  EXPECT_EQ(output->data, nullptr);
  EXPECT_EQ(output->n_bytes, 16u);
}

TEST(GgufSplitShard, WorksWithoutThePartsItDoesNotNeed) {
  TempDir dir;
  write_parts(dir, good_parts());
  std::filesystem::remove(part_name(dir, 3, 3));
  for (int entry : {1, 2}) {  // the first part or the shard's own named
    SCOPED_TRACE(entry);
    auto model = GgufModel::open_shard(part_name(dir, entry, 3), wants_block_1);
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_EQ((*model)->absent_parts().size(), 1u);
    EXPECT_EQ((*model)->absent_parts()[0], part_name(dir, 3, 3));
    EXPECT_EQ((*model)->parts()[2], nullptr);
    EXPECT_EQ((*model)->tensors().size(), 3u);  // parts 1 and 2
    EXPECT_EQ((*model)->find_tensor("blk.1.attn_q.weight")->data[0], 1);
    EXPECT_EQ((*model)->find_tensor("output.weight"), nullptr);
    // A tensor needed from the absent part: the error names both.
    absl::Status missing = (*model)->missing_tensor("blk.2.attn_q.weight");
    EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
    EXPECT_NE(missing.message().find("blk.2.attn_q.weight: in none of the 2 "
                                     "parts of 3 on this disk; absent: " +
                                     part_name(dir, 3, 3) + " (part 3 of 3)"),
              absl::string_view::npos)
        << missing;
  }
  // open() still wants every part.
  EXPECT_EQ(GgufModel::open(part_name(dir, 1, 3)).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(GgufSplitShard, NeedsTheFirstPart) {
  TempDir dir;
  write_parts(dir, good_parts());
  std::filesystem::remove(part_name(dir, 1, 3));
  auto model = GgufModel::open_shard(part_name(dir, 2, 3), wants_block_1);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound)
      << model.status();
  EXPECT_NE(model.status().message().find(
                "split part 1 of 3 (it holds the model's metadata)"),
            absl::string_view::npos)
      << model.status();
}

TEST(GgufSplitShard, ChecksThePartsPresent) {
  TempDir dir;
  std::vector<PartSpec> parts = good_parts();
  parts[1].split_no = 2;
  write_parts(dir, parts);
  std::filesystem::remove(part_name(dir, 3, 3));
  expect_invalid(GgufModel::open_shard(part_name(dir, 1, 3), wants_block_1),
                 "split.no 2 but the file is part 2 of 3");
}

TEST(GgufSplitShard, MissingTensorWithEveryPartIsInvalid) {
  TempDir dir;
  write_parts(dir, good_parts());
  auto model = GgufModel::open_shard(part_name(dir, 1, 3), wants_block_1);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::Status missing = (*model)->missing_tensor("blk.9.attn_q.weight");
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument) << missing;
  EXPECT_EQ(missing.message(), "blk.9.attn_q.weight: missing");
}

TEST(GgufPages, ReleasesWholePagesOfTheMappingAndKeepsTheBytes) {
  TempDir dir;
  GgufWriter writer;
  std::vector<uint8_t> bytes(5 * 4096 + 100);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 1);
  ASSERT_TRUE(writer.add_tensor("t", GgmlType::kI8, {static_cast<int64_t>(bytes.size())},
                                bytes)
                  .ok());
  ASSERT_TRUE(writer.write(dir.file("m.gguf")).ok());
  auto model = GgufModel::open(dir.file("m.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  const TensorInfo& t = *(*model)->find_tensor("t");
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t released = (*model)->release_pages(t.data, t.n_bytes);
  // Only whole pages inside the tensor; its data starts mid-page.
  EXPECT_GE(released, t.n_bytes / page * page - page);
  EXPECT_LE(released, t.n_bytes);
  EXPECT_EQ(released % page, 0u);
  // The bytes read back the same (faulted in again from the file).
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), t.data));
  // Outside the mapping, or a buffer parsed in memory: nothing.
  EXPECT_EQ((*model)->release_pages(bytes.data(), bytes.size()), 0u);
  auto image = writer.to_bytes();
  ASSERT_TRUE(image.ok());
  auto parsed = GgufFile::parse(image->data(), image->size());
  ASSERT_TRUE(parsed.ok());
  const TensorInfo& pt = *(*parsed)->find_tensor("t");
  EXPECT_EQ((*parsed)->release_pages(pt.data, pt.n_bytes), 0u);
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), pt.data));
}

}  // namespace
}  // namespace strata::gguf
