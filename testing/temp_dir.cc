#include "testing/temp_dir.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "base/check.h"

namespace rangekv::testing {

TempDir::TempDir(const std::string& parent) {
  std::string base = parent;
  if (base.empty()) {
    const char* t = std::getenv("TMPDIR");
    base = t && *t ? t : "/tmp";
  }
  std::string tmpl = base + "/rangekv-XXXXXX";
  char* p = mkdtemp(tmpl.data());
  RANGEKV_CHECK(p != nullptr);
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace rangekv::testing
