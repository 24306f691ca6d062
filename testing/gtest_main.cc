// The main() of every gtest binary (rangekv_test in CMakeLists.txt). Two things beyond
// gtest_main:
//   - A binary whose tests all skipped (and none failed) exits with kAllSkippedExitCode, which
//     CTest's SKIP_RETURN_CODE turns into "skipped" rather than "passed" (the GPU tests on a
//     machine without a GPU).
//   - When RANGEKV_TEST_COUNTS_DIR is set, it writes "<passed> <failed> <skipped>" (test cases)
//     to $RANGEKV_TEST_COUNTS_DIR/<tag>-<binary>.txt, tag = $RANGEKV_TEST_COUNTS_TAG or "run";
//     scripts/test.sh sums those files into its closing line.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

constexpr int kAllSkippedExitCode = 77;

std::string BaseName(const char* path) {
  std::string p = path != nullptr ? path : "test";
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

void WriteCounts(const std::string& binary, const ::testing::UnitTest& u) {
  const char* dir = std::getenv("RANGEKV_TEST_COUNTS_DIR");
  if (dir == nullptr || *dir == '\0') return;
  const char* tag = std::getenv("RANGEKV_TEST_COUNTS_TAG");
  const std::string path =
      std::string(dir) + "/" + (tag != nullptr && *tag ? tag : "run") + "-" + binary + ".txt";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write test counts to %s\n", path.c_str());
    return;
  }
  std::fprintf(f, "%d %d %d\n", u.successful_test_count(), u.failed_test_count(),
               u.skipped_test_count());
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  WriteCounts(BaseName(argv[0]), u);
  if (rc == 0 && u.successful_test_count() == 0 && u.skipped_test_count() > 0 &&
      u.failed_test_count() == 0) {
    std::printf("all %d tests skipped (exit %d: CTest reports the binary as skipped)\n",
                u.skipped_test_count(), kAllSkippedExitCode);
    return kAllSkippedExitCode;
  }
  return rc;
}
