// Throwaway: does a journal-like commit (append + fsync of a small file) slow concurrent O_DIRECT writes?
#include <fcntl.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <algorithm>
using namespace std::chrono;
static double now() { return duration<double>(steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char** argv) {
  const size_t total = 252ull << 20, piece = 1 << 20; const int threads = 32;
  const size_t file = 4 * total;
  int fd = open("/var/tmp/fx/big3.dat", O_RDWR | O_CREAT | O_DIRECT, 0600);
  int jfd = open("/var/tmp/fx/journal.dat", O_RDWR | O_CREAT | O_TRUNC, 0600);
  size_t jsize = 0;
  void* buf; posix_memalign(&buf, 4096, piece); memset(buf, 7, piece);
  char rec[300]; memset(rec, 3, sizeof rec);
  for (size_t o = 0; o < file; o += piece) pwrite(fd, buf, piece, o);
  fsync(fd);
  auto commit = [&](bool pack) { if (pack) fdatasync(fd); pwrite(jfd, rec, sizeof rec, jsize); jsize += sizeof rec; fdatasync(jfd); };
  int region = 0;
  // mode bit 1: commit (append+fsync) as the pass starts; bit 2: pack fdatasync + commit 100 ms after the pass
  auto pass = [&](int mode) {
    const size_t base = (region++ % 4) * total;
    std::atomic<size_t> next{0};
    std::vector<std::thread> ts;
    double t0 = now();
    for (int t = 0; t < threads; ++t) ts.emplace_back([&] {
      for (;;) { size_t i = next.fetch_add(1); if (i * piece >= total) break;
        pwrite(fd, buf, piece, base + i * piece); } });
    if (mode & 1) commit(false);
    for (auto& t : ts) t.join();
    double dt = now() - t0;
    std::this_thread::sleep_for(milliseconds(100));
    if (mode & 2) commit(true);
    std::this_thread::sleep_for(milliseconds(100));
    return dt;
  };
  const int rounds = argc > 1 ? atoi(argv[1]) : 4;
  std::vector<double> r[4];
  for (int k = 0; k < rounds; ++k)
    for (int m = 0; m < 4; ++m) for (int i = 0; i < 4; ++i) r[(m + k) % 4].push_back(pass((m + k) % 4));
  const char* names[] = {"no commit", "commit at pass start", "pack sync + commit after pass", "both"};
  for (int m = 0; m < 4; ++m) { std::sort(r[m].begin(), r[m].end());
    printf("%-32s median %.1f ms (min %.1f max %.1f)\n", names[m], r[m][r[m].size()/2]*1e3, r[m][0]*1e3, r[m].back()*1e3); }
}
