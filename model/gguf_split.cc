// GgufModel: one model from one GGUF file or from the parts gguf-split wrote
// (llama.cpp tools/gguf-split: parts "NAME-%05d-of-%05d.gguf" numbered from
// 1, each carrying split.no (0-based), split.count and split.tensors.count;
// the first part also carries the model's metadata).
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "model/gguf_keys.h"
#include "model/gguf_reader.h"
#include "model/gguf_text.h"

namespace strata::gguf {
namespace {

// "DIR/NAME-00002-of-00003.gguf" -> {"DIR/NAME", 2, 3}.
struct SplitName {
  std::string prefix;
  uint32_t part = 0;  // 1-based, as in the file name
  uint32_t count = 0;
};

std::optional<uint32_t> parse_five_digits(std::string_view text) {
  if (text.size() != 5) return std::nullopt;
  uint32_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  return value;
}

std::optional<SplitName> parse_split_name(std::string_view path) {
  constexpr std::string_view kExtension = ".gguf";
  // "-00001-of-00003.gguf"
  constexpr size_t kSuffix = 1 + 5 + 4 + 5 + kExtension.size();
  if (path.size() <= kSuffix || !path.ends_with(kExtension)) {
    return std::nullopt;
  }
  std::string_view suffix = path.substr(path.size() - kSuffix);
  if (suffix[0] != '-' || suffix.substr(6, 4) != "-of-") return std::nullopt;
  std::optional<uint32_t> part = parse_five_digits(suffix.substr(1, 5));
  std::optional<uint32_t> count = parse_five_digits(suffix.substr(10, 5));
  if (!part || !count) return std::nullopt;
  return SplitName{std::string(path.substr(0, path.size() - kSuffix)), *part,
                   *count};
}

// Five digits, zero-padded, as gguf-split's "%05d".
std::string five_digits(uint32_t n) {
  std::string digits = text::cat(n);
  if (digits.size() < 5) digits.insert(0, 5 - digits.size(), '0');
  return digits;
}

std::string part_path(const SplitName& name, uint32_t part) {
  return text::cat(name.prefix, "-", five_digits(part), "-of-",
                   five_digits(name.count), ".gguf");
}

absl::Status key_error(const std::string& path, const KeyValue& kv,
                       std::string_view rule) {
  return absl::InvalidArgumentError(text::cat(
      path, ": key '", kv.key, "' at offset ", kv.file_offset, ": ", rule));
}

// The integer value of split.no / split.count (UINT16 by the key table) or
// split.tensors.count (INT32); nullopt when absent.
std::optional<int64_t> split_key(const GgufFile& file, std::string_view key) {
  const KeyValue* kv = file.find_entry(key);
  if (kv == nullptr) return std::nullopt;
  if (const uint16_t* v = std::get_if<uint16_t>(&kv->value.data)) return *v;
  if (const int32_t* v = std::get_if<int32_t>(&kv->value.data)) return *v;
  return std::nullopt;  // unreachable: the reader enforced the type
}

// Checks split.no and split.count of part `part` (1-based) of `count`.
absl::Status check_part_keys(const std::string& path, const GgufFile& file,
                             uint32_t part, uint32_t count) {
  const KeyValue* count_kv = file.find_entry(kSplitCountKey);
  if (count_kv == nullptr) {
    return absl::InvalidArgumentError(
        text::cat(path, ": the file name says part ", part, " of ", count,
                  " but key 'split.count' is absent"));
  }
  if (split_key(file, kSplitCountKey) != count) {
    return key_error(
        path, *count_kv,
        text::cat("split.count ", *split_key(file, kSplitCountKey),
                  " disagrees with the file name (", count, " parts)"));
  }
  const KeyValue* no_kv = file.find_entry(kSplitNoKey);
  if (no_kv == nullptr) {
    return absl::InvalidArgumentError(text::cat(
        path, ": part ", part, " of ", count, " lacks key 'split.no'"));
  }
  if (split_key(file, kSplitNoKey) != static_cast<int64_t>(part - 1)) {
    return key_error(path, *no_kv,
                     text::cat("split.no ", *split_key(file, kSplitNoKey),
                               " but the file is part ", part, " of ", count,
                               " (expected split.no ", part - 1, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

bool is_split_part_name(std::string_view path) {
  const std::optional<SplitName> name = parse_split_name(path);
  return name.has_value() && name->count > 1;
}

absl::StatusOr<std::unique_ptr<GgufModel>> GgufModel::open(
    const std::string& path, const ReaderLimits& limits) {
  return open_parts(path, limits, nullptr);
}

absl::StatusOr<std::unique_ptr<GgufModel>> GgufModel::open_shard(
    const std::string& path, const TensorFilter& wanted,
    const ReaderLimits& limits) {
  return open_parts(path, limits, &wanted);
}

absl::StatusOr<std::unique_ptr<GgufModel>> GgufModel::open_parts(
    const std::string& path, const ReaderLimits& limits,
    const TensorFilter* wanted) {
  absl::StatusOr<std::unique_ptr<GgufFile>> opened =
      GgufFile::open(path, limits);
  if (!opened.ok()) return opened.status();
  auto model = std::unique_ptr<GgufModel>(new GgufModel());

  const std::optional<SplitName> name = parse_split_name(path);
  const std::optional<int64_t> split_count =
      split_key(**opened, kSplitCountKey);
  if (split_count.has_value() && *split_count < 1) {
    return key_error(path, *(*opened)->find_entry(kSplitCountKey),
                     text::cat("split.count ", *split_count,
                               " is not a number of parts (1 or more)"));
  }
  const bool single = name.has_value()
                          ? name->count == 1 && split_count.value_or(1) == 1
                          : split_count.value_or(1) == 1;
  if (single) {
    if (split_count.has_value() || name.has_value()) {
      // A one-part "split": split.no, when present, must say part 0.
      if (std::optional<int64_t> no = split_key(**opened, kSplitNoKey);
          no.has_value() && *no != 0) {
        return key_error(
            path, *(*opened)->find_entry(kSplitNoKey),
            text::cat("split.no ", *no, " in a model of one part"));
      }
    }
    model->parts_.push_back(std::move(*opened));
  } else {
    if (!name.has_value()) {
      return key_error(
          path, *(*opened)->find_entry(kSplitCountKey),
          text::cat("split.count ", *split_count,
                    " but the file name does not follow "
                    "NAME-00001-of-0000N.gguf, so the parts cannot be found"));
    }
    if (name->count == 0 || name->part == 0 || name->part > name->count) {
      return absl::InvalidArgumentError(text::cat(
          path, ": file name says part ", name->part, " of ", name->count));
    }
    for (uint32_t part = 1; part <= name->count; ++part) {
      const std::string part_name = part_path(*name, part);
      std::unique_ptr<GgufFile> file;
      if (part == name->part) {
        file = std::move(*opened);
      } else {
        absl::StatusOr<std::unique_ptr<GgufFile>> other =
            GgufFile::open(part_name, limits);
        // A shard may do without a part other than the first (metadata).
        if (!other.ok() && wanted != nullptr && part > 1 &&
            absl::IsNotFound(other.status())) {
          model->absent_.push_back(part_name);
          model->parts_.push_back(nullptr);
          continue;
        }
        if (!other.ok()) {
          if (wanted != nullptr && part == 1) {
            return absl::Status(
                other.status().code(),
                text::cat("split part 1 of ", name->count,
                          " (it holds the model's metadata): ",
                          std::string(other.status().message())));
          }
          return absl::Status(
              other.status().code(),
              text::cat("split part ", part, " of ", name->count, ": ",
                        std::string(other.status().message())));
        }
        file = std::move(*other);
      }
      if (absl::Status s = check_part_keys(part_name, *file, part, name->count);
          !s.ok()) {
        return s;
      }
      model->parts_.push_back(std::move(file));
    }
  }

  // One tensor list over all parts; names unique across parts.
  uint64_t total = 0;
  for (size_t p = 0; p < model->parts_.size(); ++p) {
    if (model->parts_[p] == nullptr) continue;  // absent
    for (const TensorInfo& tensor : model->parts_[p]->tensors()) {
      auto [it, inserted] =
          model->tensor_index_.emplace(tensor.name, model->tensors_.size());
      if (!inserted) {
        const TensorInfo& first = model->tensors_[it->second];
        return absl::InvalidArgumentError(text::cat(
            name ? part_path(*name, static_cast<uint32_t>(p + 1)) : path,
            ": tensor '", tensor.name, "' at offset ", tensor.info_offset,
            ": duplicate tensor name across parts (already in part ",
            first.split_index + 1, " at offset ", first.info_offset, ")"));
      }
      model->tensors_.push_back(tensor);
      model->tensors_.back().split_index = static_cast<uint32_t>(p);
      ++total;
    }
  }
  // The count covers every part: it cannot be checked with parts absent.
  if (model->parts_.size() > 1 && model->absent_.empty()) {
    for (size_t p = 0; p < model->parts_.size(); ++p) {
      const std::string part_name =
          part_path(*name, static_cast<uint32_t>(p + 1));
      const KeyValue* kv = model->parts_[p]->find_entry(kSplitTensorsCountKey);
      if (kv == nullptr) {
        if (p > 0) continue;  // only the first part must carry it
        return absl::InvalidArgumentError(
            text::cat(part_name, ": key 'split.tensors.count' is absent"));
      }
      const int64_t declared =
          *split_key(*model->parts_[p], kSplitTensorsCountKey);
      if (declared < 0 || static_cast<uint64_t>(declared) != total) {
        return key_error(
            part_name, *kv,
            text::cat("split.tensors.count ", declared, " but the ",
                      model->parts_.size(), " parts hold ", total, " tensors"));
      }
    }
  }
  if (wanted != nullptr) model->unmap_unwanted(*wanted);
  return model;
}

void GgufModel::unmap_unwanted(const TensorFilter& wanted) {
  std::vector<bool> keep(parts_.size(), false);
  keep[0] = true;  // the metadata
  for (const TensorInfo& t : tensors_) {
    if (wanted(t.name)) keep[t.split_index] = true;
  }
  for (TensorInfo& t : tensors_) {
    if (!keep[t.split_index]) t.data = nullptr;
  }
  for (size_t p = 0; p < parts_.size(); ++p) {
    if (!keep[p]) parts_[p].reset();
  }
}

absl::Status GgufModel::missing_tensor(std::string_view name) const {
  if (absent_.empty()) {
    return absl::InvalidArgumentError(text::cat(name, ": missing"));
  }
  std::string absent;
  for (const std::string& path : absent_) {
    const std::optional<SplitName> part = parse_split_name(path);
    absent += text::cat(absent.empty() ? "" : ", ", path, " (part ",
                        part ? part->part : 0, " of ", parts_.size(), ")");
  }
  return absl::NotFoundError(text::cat(
      name, ": in none of the ", parts_.size() - absent_.size(), " parts of ",
      parts_.size(), " on this disk; absent: ", absent));
}

uint64_t GgufModel::release_pages(const uint8_t* data, uint64_t n_bytes) const {
  for (const std::unique_ptr<GgufFile>& part : parts_) {
    if (part == nullptr) continue;
    if (const uint64_t released = part->release_pages(data, n_bytes);
        released > 0) {
      return released;
    }
  }
  return 0;
}

const TensorInfo* GgufModel::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace strata::gguf
