// Scratch directories of a benchmark run, removed when the run ends, also when it is
// interrupted (a benchmark interrupted at 6 GiB would otherwise leave 12 GiB or more behind).
//
// Thread-safety: ScratchDir objects may be made and destroyed on any thread.
#pragma once

#include <memory>
#include <string>

#include "rangekv/status.h"

namespace rangekv::tools {

// A directory created for the run under `parent` (default: $TMPDIR or /var/tmp), removed with
// everything in it when this object goes away, and also when the process is stopped by SIGINT,
// SIGTERM or SIGHUP once RemoveScratchOnSignals() ran.
class ScratchDir {
 public:
  static Result<std::unique_ptr<ScratchDir>> Make(const std::string& parent,
                                                  const std::string& prefix);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  explicit ScratchDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (and so in every thread it starts
// later) and starts a thread that waits for them: on one, every live ScratchDir is removed and
// the signal is raised again with its default action, so the process still ends by it. Call
// once, before any other thread exists (the bench and demo commands do, before parsing their
// flags). Not for commands that wait for these signals themselves (`rangekv serve`).
void RemoveScratchOnSignals();

}  // namespace rangekv::tools
