// Throwaway: does flushing change later O_DIRECT write bursts? (not kept)
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
  const size_t file = 4 * total;  // passes rotate over 4 regions, as stores rotate over slots
  int fd = open("/var/tmp/fx/big2.dat", O_RDWR | O_CREAT | O_DIRECT, 0600);
  void* buf; posix_memalign(&buf, 4096, piece); memset(buf, 7, piece);
  for (size_t o = 0; o < file; o += piece) pwrite(fd, buf, piece, o);
  fsync(fd);
  int region = 0;
  auto pass = [&](int mode) {
    const size_t base = (region++ % 4) * total;
    std::atomic<size_t> next{0};
    std::vector<std::thread> ts;
    double t0 = now();
    for (int t = 0; t < threads; ++t) ts.emplace_back([&] {
      for (;;) { size_t i = next.fetch_add(1); if (i * piece >= total) break;
        pwrite(fd, buf, piece, base + i * piece); } });
    if (mode == 2) { std::this_thread::sleep_for(milliseconds(5)); fdatasync(fd); }
    for (auto& t : ts) t.join();
    double dt = now() - t0;
    if (mode == 1) fdatasync(fd);
    // the bench's verify and fill between stores: ~200 ms of other work
    std::this_thread::sleep_for(milliseconds(200));
    return dt;
  };
  const int rounds = argc > 1 ? atoi(argv[1]) : 4;
  std::vector<double> r[3];
  for (int k = 0; k < rounds; ++k)
    for (int m = 0; m < 3; ++m) for (int i = 0; i < 4; ++i) r[(m + k) % 3].push_back(pass((m + k) % 3));
  const char* names[] = {"never flushed", "flushed after each pass", "flush 5 ms into each pass"};
  for (int m = 0; m < 3; ++m) { std::sort(r[m].begin(), r[m].end());
    printf("%-28s median %.1f ms (min %.1f max %.1f)\n", names[m], r[m][r[m].size()/2]*1e3, r[m][0]*1e3, r[m].back()*1e3); }
}
