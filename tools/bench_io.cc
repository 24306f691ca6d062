// Placeholder: this command is not implemented yet.
#include "tools/commands.h"

namespace rangekv::tools {

void AddBenchIoCommand(CLI::App& /*bench*/) {}

}  // namespace rangekv::tools
