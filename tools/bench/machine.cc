#include "tools/bench/machine.h"

#include <sys/statfs.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <thread>

#include "base/units.h"

namespace rangekv::tools {
namespace {

std::string UtcFormat(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), format, &tm);
  return buf;
}

}  // namespace

nlohmann::json MachineInfo::ToJson() const {
  return {{"nproc", nproc},
          {"memory_gib", std::round(memory_gib * 10) / 10},
          {"kernel", kernel},
          {"file_system", file_system},
          {"date", date}};
}

std::string FileSystemName(const std::string& path) {
  struct statfs fs;
  if (::statfs(path.c_str(), &fs) != 0) return "unknown";
  switch (static_cast<uint64_t>(fs.f_type)) {
    case 0xEF53:
      return "ext4";
    case 0x01021994:
      return "tmpfs";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x794C7630:
      return "overlayfs";
    case 0x6969:
      return "nfs";
    case 0x65735546:
      return "fuse";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "0x%" PRIx64, static_cast<uint64_t>(fs.f_type));
      return buf;
    }
  }
}

MachineInfo DescribeMachine(const std::string& dir) {
  MachineInfo m;
  m.nproc = std::thread::hardware_concurrency();
  struct sysinfo si;
  if (::sysinfo(&si) == 0) {
    m.memory_gib = static_cast<double>(si.totalram) * si.mem_unit / static_cast<double>(kGiB);
  }
  struct utsname u;
  if (::uname(&u) == 0) m.kernel = u.release;
  m.file_system = FileSystemName(dir);
  m.date = UtcFormat("%Y-%m-%d");
  return m;
}

std::string UtcTimestamp() { return UtcFormat("%Y-%m-%dT%H:%M:%SZ"); }

}  // namespace rangekv::tools
