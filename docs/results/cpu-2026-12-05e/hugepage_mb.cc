// Throwaway: 16 threads x 1 MiB O_DIRECT pwrite of 252 MiB from a 4 KiB-page buffer vs a huge-page buffer;
// counts the disk's write requests per pass (/sys/block/vda/stat).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>
#include <algorithm>
using namespace std::chrono;
static double now() { return duration<double>(steady_clock::now().time_since_epoch()).count(); }
static long writes() { std::ifstream f("/sys/block/vda/stat"); long v[11]; for (auto& x : v) f >> x; return v[4]; }
int main(int argc, char** argv) {
  const size_t total = 252ull << 20; const size_t piece = 1 << 20;
  const int threads = argc > 2 ? atoi(argv[2]) : 16;
  int fd = open("/var/tmp/fx/big6.dat", O_RDWR | O_CREAT | O_DIRECT, 0600);
  char* bufs[2];
  for (int h = 0; h < 2; ++h) {
    // scatter the 4 KiB buffer's frames: fault it in after fragmenting with another mapping
    void* p = mmap(nullptr, total + (2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char* b = (char*)(((uintptr_t)p + (2 << 20) - 1) & ~uintptr_t((2 << 20) - 1));
    if (h == 1) madvise(b, total, MADV_HUGEPAGE); else madvise(b, total, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < total; i += 4096) b[i] = 7 + h;
    bufs[h] = b;
  }
  for (size_t o = 0; o < 2 * total; o += total) pwrite(fd, bufs[0], total, o);
  fsync(fd);
  auto pass = [&](int h, long* ios) {
    const size_t base = 0;
    std::atomic<size_t> next{0};
    std::vector<std::thread> ts;
    long w0 = writes();
    double t0 = now();
    for (int t = 0; t < threads; ++t) ts.emplace_back([&] {
      for (;;) { size_t i = next.fetch_add(1); if (i * piece >= total) break;
        pwrite(fd, bufs[h] + i * piece, piece, base + i * piece); } });
    for (auto& t : ts) t.join();
    double dt = now() - t0;
    *ios = writes() - w0;
    std::this_thread::sleep_for(milliseconds(150));
    return dt;
  };
  std::vector<double> r[2]; long ios[2] = {0, 0};
  const int rounds = argc > 1 ? atoi(argv[1]) : 6;
  for (int k = 0; k < rounds; ++k) for (int m = 0; m < 2; ++m) { int c = (m + k) % 2; for (int j = 0; j < 3; ++j) r[c].push_back(pass(c, &ios[c])); }
  const char* n[] = {"4 KiB pages", "huge pages"};
  for (int m = 0; m < 2; ++m) { std::sort(r[m].begin(), r[m].end());
    printf("%-12s %d threads median %.1f ms (%.2f GiB/s; min %.1f max %.1f), disk write requests per pass %ld\n", n[m], threads, r[m][r[m].size()/2]*1e3, 252/1024./r[m][r[m].size()/2], r[m][0]*1e3, r[m].back()*1e3, ios[m]); }
  system("grep AnonHugePages /proc/self/smaps_rollup 2>/dev/null || true");
}
