#include "tools/bench/scratch.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

namespace rangekv::tools {

namespace {
struct ScratchRegistry {
  std::mutex mu;
  std::set<std::string> paths;
};
ScratchRegistry& LiveScratch() {
  static ScratchRegistry* registry = new ScratchRegistry;  // never destroyed: used at exit
  return *registry;
}
}  // namespace

Result<std::unique_ptr<ScratchDir>> ScratchDir::Make(const std::string& parent,
                                                     const std::string& prefix) {
  std::string base = parent;
  if (base.empty()) {
    const char* t = std::getenv("TMPDIR");
    base = t != nullptr && *t != '\0' ? t : "/var/tmp";
  }
  std::string tmpl = base + "/" + prefix + "XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoStatus(errno, "mkdtemp " + tmpl);
  {
    std::lock_guard<std::mutex> lock(LiveScratch().mu);
    LiveScratch().paths.insert(tmpl);
  }
  return std::unique_ptr<ScratchDir>(new ScratchDir(tmpl));
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  std::lock_guard<std::mutex> lock(LiveScratch().mu);
  LiveScratch().paths.erase(path_);
}

void RemoveScratchOnSignals() {
  static std::once_flag once;
  std::call_once(once, [] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) return;
    std::thread([set] {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) return;
      {
        // The lock is held to the end: no scratch directory is made or removed meanwhile.
        std::lock_guard<std::mutex> lock(LiveScratch().mu);
        for (const std::string& path : LiveScratch().paths) {
          std::error_code ec;
          std::filesystem::remove_all(path, ec);
          std::fprintf(stderr, "\nrangekv: %s: removed %s%s\n", strsignal(sig), path.c_str(),
                       ec ? (" (" + ec.message() + ")").c_str() : "");
        }
        std::signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
        std::raise(sig);
      }
    }).detach();
  });
}

}  // namespace rangekv::tools
