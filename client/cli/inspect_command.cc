// `strata inspect MODEL.gguf [--json]`: a GGUF dump (metadata and tensor
// table). A file the reader refuses gives exit status 1 and one line naming
// the rule and the byte offset.
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <limits>
#include <string>

#include "client/cli/commands.h"
#include "client/cli/metadata_format.h"
#include "model/gguf_reader.h"
#include "model/gguf_text.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

using nlohmann::ordered_json;

struct InspectOptions {
  std::string model;
  bool json = false;
  size_t max_array_items = 16;  // text view only
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

void print_json(const gguf::GgufModel& model) {
  ordered_json out;
  ordered_json metadata = ordered_json::object();
  for (const gguf::KeyValue& kv : model.first().metadata()) {
    metadata[kv.key] = value_to_json(kv.value);
  }
  out["metadata"] = std::move(metadata);
  ordered_json tensors = ordered_json::array();
  for (const gguf::TensorInfo& t : model.tensors()) {
    ordered_json row;
    row["name"] = t.name;
    row["type"] = std::string(ggml_type_info(t.type).name);
    row["shape"] = t.shape;
    row["offset"] = t.offset;
    row["bytes"] = t.n_bytes;
    if (model.parts().size() > 1) row["split"] = t.split_index;
    tensors.push_back(std::move(row));
  }
  out["tensors"] = std::move(tensors);
  out["data_offset"] = model.first().data_offset();
  std::cout << out.dump(-1, ' ', false, ordered_json::error_handler_t::replace)
            << "\n";
}

// The block number of a "blk.N." tensor, -1 for the others.
int block_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int block = 0;
  size_t i = 4;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && block < 1000000; ++i) {
    block = block * 10 + (name[i] - '0');
  }
  return i > 4 && i < name.size() && name[i] == '.' ? block : -1;
}

// A split model's parts: what each holds, so that an operator can copy to a
// worker only part 1 (the metadata) and the parts its blocks live in.
void print_parts(const gguf::GgufModel& model) {
  struct Part {
    size_t tensors = 0;
    uint64_t bytes = 0;
    int first_block = -1, last_block = -1;
    std::string others;  // tensors outside the blocks
  };
  std::vector<Part> parts(model.parts().size());
  for (const gguf::TensorInfo& t : model.tensors()) {
    Part& p = parts[t.split_index];
    ++p.tensors;
    p.bytes += t.n_bytes;
    if (int b = block_of(t.name); b >= 0) {
      if (p.first_block < 0 || b < p.first_block) p.first_block = b;
      if (b > p.last_block) p.last_block = b;
    } else {
      p.others += (p.others.empty() ? "" : " ") + gguf::text::escape(t.name);
    }
  }
  std::printf("\n%zu parts (a worker needs part 1 and the parts holding its "
              "blocks' tensors):\n", parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part& p = parts[i];
    std::string blocks = p.first_block < 0
                             ? std::string("no blocks")
                             : "blocks " + std::to_string(p.first_block) + "-" +
                                   std::to_string(p.last_block);
    std::printf("  part %zu: %zu tensors, %.2f MiB, %s%s%s\n", i + 1, p.tensors,
                static_cast<double>(p.bytes) / (1024.0 * 1024.0), blocks.c_str(),
                p.others.empty() ? "" : ", ", p.others.c_str());
  }
}

void print_text(const std::string& path, const gguf::GgufModel& model,
                size_t max_items) {
  const gguf::GgufFile& first = model.first();
  uint64_t total_bytes = 0;
  for (const gguf::TensorInfo& t : model.tensors()) total_bytes += t.n_bytes;
  std::printf("%s: GGUF v%u, %zu part(s), %zu metadata keys, %zu tensors, "
              "%.2f MiB of tensor data, alignment %" PRIu64 "\n",
              path.c_str(), first.version(), model.parts().size(),
              first.metadata().size(), model.tensors().size(),
              static_cast<double>(total_bytes) / (1024.0 * 1024.0),
              first.alignment());
  if (model.parts().size() > 1) print_parts(model);
  std::printf("\nmetadata:\n");
  for (const gguf::KeyValue& kv : first.metadata()) {
    // Names come from the file: escaped, as values are, so that no byte of
    // theirs reaches the terminal raw (a newline, an escape sequence).
    std::printf("  %-40s %-14s %s\n", gguf::text::escape(kv.key).c_str(),
                type_label(kv.value).c_str(),
                value_to_text(kv.value, max_items).c_str());
  }
  std::printf("\ntensors:\n  %-5s %-36s %-8s %-22s %14s %12s\n", "#", "name",
              "type", "shape", "offset", "bytes");
  size_t index = 0;
  for (const gguf::TensorInfo& t : model.tensors()) {
    std::printf("  %-5zu %-36s %-8s %-22s %14" PRIu64 " %12" PRIu64 "\n",
                index++, gguf::text::escape(t.name).c_str(),
                std::string(ggml_type_info(t.type).name).c_str(),
                shape_text(t.shape).c_str(), t.offset, t.n_bytes);
  }
}

int run_inspect(const InspectOptions& options) {
  auto model = gguf::GgufModel::open(options.model);
  if (!model.ok()) {
    return report_failure("inspect", options.model, model.status());
  }
  if (options.json) {
    print_json(**model);
  } else {
    print_text(options.model, **model, options.max_array_items);
  }
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Print a GGUF file's metadata and tensor table");
  cmd->add_option("model", options->model, "GGUF file (first part if split)")
      ->required();
  cmd->add_flag("--json", options->json,
                "One JSON object: {metadata, tensors}; arrays never shortened");
  cmd->add_option("--max-array-items", options->max_array_items,
                  "Array elements shown in the text view")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  cmd->callback([options, &exit_code] { exit_code = run_inspect(*options); });
}

}  // namespace strata::cli
