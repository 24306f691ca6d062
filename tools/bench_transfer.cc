// Placeholder: this command is not implemented yet.
#include "tools/commands.h"

namespace rangekv::tools {

void AddBenchTransferCommands(CLI::App& /*bench*/) {}

}  // namespace rangekv::tools
