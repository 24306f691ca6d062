// Throwaway: does the destination's footprint change O_DIRECT read rates (host-side copy into guest memory)?
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
using namespace std::chrono;
static double now() { return duration<double>(steady_clock::now().time_since_epoch()).count(); }
const size_t kFile = 4ull << 30, kPiece = 1 << 20, kBig = 1ull << 30;
static char* buf;
double rd(int fd, int threads, size_t ring) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> ts; double t0 = now();
  for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] {
    for (;;) { size_t i = next.fetch_add(1); if (i * kPiece >= kFile) break;
      char* b = ring == 0 ? buf + (size_t)t * kPiece : buf + (i * kPiece) % ring;
      pread(fd, b, kPiece, i * kPiece); } });
  for (auto& x : ts) x.join();
  return 4.0 / (now() - t0);
}
int main() {
  buf = (char*)mmap(nullptr, kBig, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  madvise(buf, kBig, MADV_HUGEPAGE); memset(buf, 5, kBig);
  int a = open("/var/tmp/fx/dstA.dat", O_RDWR | O_CREAT | O_DIRECT, 0600);
  for (size_t o = 0; o < kFile; o += 64 << 20) pwrite(a, buf, 64 << 20, o);
  fsync(a);
  for (int r = 0; r < 3; ++r) {
    printf("4 thr reused 4 MiB %.2f | ring 256 MiB %.2f | ring 1 GiB %.2f | 16 thr ring 1 GiB %.2f GiB/s\n",
           rd(a, 4, 0), rd(a, 4, 256 << 20), rd(a, 4, kBig), rd(a, 16, kBig));
    fflush(stdout);
  }
  unlink("/var/tmp/fx/dstA.dat");
}
