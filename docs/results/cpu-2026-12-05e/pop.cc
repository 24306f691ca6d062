#include <sys/mman.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <cstdlib>
using namespace std::chrono;
int main(int argc, char** argv) {
  const size_t n = 1ull << 30; const int threads = atoi(argv[1]); const bool huge = atoi(argv[2]);
  char* p = (char*)mmap(nullptr, n + (2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  p = (char*)(((uintptr_t)p + (2 << 20) - 1) & ~uintptr_t((2 << 20) - 1));
  madvise(p, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  auto t0 = steady_clock::now();
  std::thread ts[16];
  for (int t = 0; t < threads; ++t) ts[t] = std::thread([=] { size_t c = n / threads; if (madvise(p + t * c, c, MADV_POPULATE_WRITE)) perror("madvise"); });
  for (int t = 0; t < threads; ++t) ts[t].join();
  double pop = duration<double, std::milli>(steady_clock::now() - t0).count();
  t0 = steady_clock::now(); memset(p, 1, n);
  printf("%s %d threads: populate %.0f ms, then memset %.0f ms\n", huge ? "huge" : "4k", threads, pop, duration<double, std::milli>(steady_clock::now() - t0).count());
}
