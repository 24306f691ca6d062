// Placeholder: this command is not implemented yet.
#include "tools/commands.h"

namespace rangekv::tools {

void AddInspectCommands(CLI::App& /*app*/) {}

}  // namespace rangekv::tools
