#include "base/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "base/log.h"
#include "base/units.h"

namespace rangekv {

uint64_t PageBytes() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

Result<uint8_t*> MapIoMemory(uint64_t bytes, const char* what) {
  if (bytes == 0) return InvalidArgument(std::string("zero-byte allocation of ") + what);
  const uint64_t mapped = AlignUp(bytes, PageBytes());
  if (mapped < bytes) return InvalidArgument(std::string("allocation size overflows"));
  // Large mappings reserve one huge page more and trim it, so the memory starts on a huge-page
  // boundary and every whole 2 MiB of it can be a huge page.
  const bool huge = mapped >= kHugePageBytes;
  const uint64_t reserved = huge ? mapped + kHugePageBytes : mapped;
  if (reserved < mapped) return InvalidArgument(std::string("allocation size overflows"));
  void* r = mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r == MAP_FAILED) {
    const int err = errno;
    return Status(StatusCode::kResourceExhausted, std::string("mmap of ") + std::to_string(mapped) +
                                                      " bytes of " + what +
                                                      " failed: " + std::strerror(err));
  }
  auto* base = static_cast<uint8_t*>(r);
  if (!huge) return base;
  auto* p = reinterpret_cast<uint8_t*>(AlignUp(reinterpret_cast<uintptr_t>(base), kHugePageBytes));
  const uint64_t head = static_cast<uint64_t>(p - base);
  const uint64_t tail = reserved - head - mapped;
  if (head != 0) (void)munmap(base, head);
  if (tail != 0) (void)munmap(p + mapped, tail);
  // Best effort: EINVAL where transparent huge pages are compiled out.
  (void)madvise(p, mapped, MADV_HUGEPAGE);
  return p;
}

void UnmapIoMemory(void* p, uint64_t bytes) {
  if (munmap(p, AlignUp(bytes, PageBytes())) != 0) {
    Log(LogLevel::kError, std::string("munmap failed: ") + std::strerror(errno));
  }
}

uint64_t HugePageBytesOfMapping(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintmax_t begin = 0, end = 0;
    // A mapping's header line: "begin-end perms offset dev inode [path]" in hex.
    if (std::sscanf(line.c_str(), "%jx-%jx ", &begin, &end) == 2 &&
        line.find(':') > line.find(' ')) {
      if (inside) return 0;
      inside = addr >= begin && addr < end;
      continue;
    }
    uintmax_t kib = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %ju kB", &kib) == 1) {
      return static_cast<uint64_t>(kib) * 1024;
    }
  }
  return 0;
}

bool TransparentHugePagesAdvisable() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(f, mode);
  return mode.find("[always]") != std::string::npos || mode.find("[madvise]") != std::string::npos;
}

}  // namespace rangekv
