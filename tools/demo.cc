// Placeholder: this command is not implemented yet.
#include "tools/commands.h"

namespace rangekv::tools {

void AddDemoCommand(CLI::App& /*app*/) {}

}  // namespace rangekv::tools
