// A WorkerService (worker/worker_service.h) for the worker fuzz targets,
// called directly (no server, no network): its model_dirs is a temporary
// folder holding a copy of stories260K.gguf ("stories.gguf"), a truncated
// copy ("short.gguf"), an empty file and a subfolder.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include "worker/worker_config.h"
#include "worker/worker_service.h"

namespace strata::fuzz {

// The folder, made once per process (removed at exit).
inline const std::string& model_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    std::string templ = (fs::temp_directory_path() / "strata-fuzz-XXXXXX").string();
    require(::mkdtemp(templ.data()) != nullptr, "mkdtemp");
    const fs::path d = templ;
    std::error_code ec;
    fs::copy_file(stories_path(), d / "stories.gguf", ec);
    require(!ec, stories_path() + ": " + ec.message());
    {
      std::ifstream in(stories_path(), std::ios::binary);
      std::string head(4096, '\0');
      in.read(head.data(), static_cast<std::streamsize>(head.size()));
      std::ofstream(d / "short.gguf", std::ios::binary) << head;
    }
    std::ofstream(d / "empty.gguf").flush();
    fs::create_directory(d / "sub", ec);
    static const std::string keep = d.string();
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(keep, ignored);
    });
    return d.string();
  }();
  return dir;
}

inline worker::WorkerConfig service_config() {
  worker::WorkerConfig c;
  c.name = "fuzz";
  c.listen = "127.0.0.1:0";
  c.threads = 1;
  c.memory_budget_bytes = uint64_t{64} << 20;  // refuses big shards by budget
  c.model_dirs = {model_dir()};
  c.answer_timeout_ms = 1000;
  return c;
}

}  // namespace strata::fuzz
