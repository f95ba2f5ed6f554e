// libFuzzer target: the coordinator's cluster config (coordinator/
// cluster_config.h) on arbitrary YAML text. A config that parses must hold
// the ranges the header promises; one that does not must say why.
#include <cstddef>
#include <cstdint>

#include "coordinator/cluster_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using strata::fuzz::check;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = strata::coordinator::parse_cluster_config(text, "fuzz.yaml");
  if (!config.ok()) {
    check(!config.status().message().empty(), "a refused config says why");
    return 0;
  }
  const auto& c = *config;
  check(c.max_sequences >= 1 && c.max_sequences <= 1024, "max_sequences in range");
  check(c.prefill_chunk >= 1, "prefill_chunk positive");
  check(c.context_length >= 0, "context_length not negative");
  check(c.prefix_cache_blocks >= -1, "prefix_cache_blocks >= -1");
  check(!c.workers.empty(), "a config has workers");
  for (const auto& w : c.workers) {
    check(strata::coordinator::check_address(w.address).ok(), "worker address checked");
    check(c.explicit_placement == w.blocks.has_value(),
          "explicit placement gives every worker blocks, auto none");
    (void)strata::coordinator::worker_label(w);
  }
  (void)strata::coordinator::check_address(c.listen, /*port_zero_ok=*/true);
  return 0;
}
