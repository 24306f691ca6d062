#include <sys/mman.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <cstdlib>
using namespace std::chrono;
int main(int argc, char** argv) {
  const size_t n = 1ull << 30; const bool huge = argc > 1 && atoi(argv[1]);
  const int sleep_ms = argc > 2 ? atoi(argv[2]) : 1000;
  char* p = (char*)mmap(nullptr, n + (2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  p = (char*)(((uintptr_t)p + (2 << 20) - 1) & ~uintptr_t((2 << 20) - 1));
  madvise(p, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  for (int i = 0; i < 6; ++i) {
    auto t0 = steady_clock::now(); memset(p, i, n);
    printf("%s memset %d: %.0f ms\n", huge ? "huge" : "4k", i, duration<double, std::milli>(steady_clock::now() - t0).count());
    fflush(stdout);
    std::this_thread::sleep_for(milliseconds(sleep_ms));
  }
}
