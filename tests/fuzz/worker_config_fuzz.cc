// libFuzzer target: the worker's config (worker/worker_config.h) on
// arbitrary YAML text, then validate() as strata-worker runs it after the
// flags.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tests/fuzz/fuzz_util.h"
#include "worker/worker_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using strata::fuzz::check;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = strata::worker::parse_worker_config(text, "fuzz.yaml");
  if (!config.ok()) {
    check(!config.status().message().empty(), "a refused config says why");
    return 0;
  }
  const absl::Status valid = strata::worker::validate(*config);
  if (valid.ok()) {
    // 0 is auto (cpu::usable_threads() at start), else 1 .. 1024.
    check(config->threads >= 0 && config->threads <= 1024, "threads 0 (auto) or in [1, 1024]");
    check(config->max_message_bytes > 0, "max_message_bytes positive");
    check(!config->model_dirs.empty(), "a valid config has model_dirs");
  }
  for (const auto& d : config->model_dirs) (void)strata::worker::expand_home(d);
  return 0;
}
