// A temporary directory removed (recursively) on destruction. For tests and the demo.
#pragma once

#include <string>

namespace rangekv::testing {

class TempDir {
 public:
  // Creates a fresh directory under $TMPDIR (or /tmp), or under `parent` when given.
  explicit TempDir(const std::string& parent = "");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace rangekv::testing
