// What a benchmark records about the machine it ran on, beside its numbers.
//
// Thread-safety: stateless functions.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace rangekv::tools {

struct MachineInfo {
  unsigned nproc = 0;
  double memory_gib = 0;
  std::string kernel;       // uname -r
  std::string file_system;  // of the benchmark's directory: "ext4", "tmpfs", ... or its magic
  std::string date;         // UTC, YYYY-MM-DD
  nlohmann::json ToJson() const;
};
MachineInfo DescribeMachine(const std::string& dir);

// The file system holding `path` ("ext4", "tmpfs", "xfs", ..., "0x<magic>", "unknown").
std::string FileSystemName(const std::string& path);

// Now, UTC, "YYYY-MM-DDTHH:MM:SSZ".
std::string UtcTimestamp();

}  // namespace rangekv::tools
