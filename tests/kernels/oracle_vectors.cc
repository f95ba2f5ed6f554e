#include "tests/kernels/oracle_vectors.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

namespace strata::testing {
namespace {

OracleStatus load_status() {
  OracleStatus status;
  const char* env = std::getenv("STRATA_QUANT_VECTORS_DIR");
  status.dir = env != nullptr ? env : STRATA_QUANT_VECTORS_DIR;
  const std::string missing =
      "no oracle vectors in " + status.dir +
      " (run through ctest: its fixture kernels.MakeQuantVectors writes them "
      "with STRATA_PYTHON, which needs numpy and the gguf package)";
  status.gguf_why = missing;
  status.ggml_why = missing;
  std::ifstream in(status.dir + "/status.txt");
  std::string line;
  while (std::getline(in, line)) {
    const bool ok = line.find(": ok") != std::string::npos;
    if (line.rfind("gguf:", 0) == 0) {
      status.gguf_ok = ok;
      status.gguf_why = "gguf Python package unavailable: " + line;
    } else if (line.rfind("ggml:", 0) == 0) {
      status.ggml_ok = ok;
      status.ggml_why = "ggml library (llama_cpp package) unavailable: " + line;
    }
  }
  return status;
}

}  // namespace

const OracleStatus& oracle_status() {
  static const OracleStatus status = load_status();
  return status;
}

std::optional<std::vector<uint8_t>> read_vector(const std::string& name) {
  std::ifstream in(oracle_status().dir + "/" + name, std::ios::binary);
  if (!in) return std::nullopt;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in),
                              std::istreambuf_iterator<char>());
}

}  // namespace strata::testing
