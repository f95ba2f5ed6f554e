#include "client/cli/commands.h"
namespace strata::cli {
void add_inspect_command(CLI::App&, int&) {}
}  // namespace strata::cli
