// Throwaway: does data written just now read faster than data written a while ago (host write-back cache)?
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
const size_t kFile = 6ull << 30, kPiece = 1 << 20;
static char* buf;
double io(int fd, bool write, int threads) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> ts; double t0 = now();
  for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] {
    for (;;) { size_t i = next.fetch_add(1); if (i * kPiece >= kFile) break;
      char* b = buf + (size_t)t * kPiece;
      if (write) pwrite(fd, b, kPiece, i * kPiece); else pread(fd, b, kPiece, i * kPiece); } });
  for (auto& x : ts) x.join();
  return 6.0 / (now() - t0);
}
int main() {
  buf = (char*)mmap(nullptr, 64 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  madvise(buf, 64 << 20, MADV_HUGEPAGE); memset(buf, 5, 64 << 20);
  int a = open("/var/tmp/fx/ageA.dat", O_RDWR | O_CREAT | O_DIRECT, 0600);
  int b = open("/var/tmp/fx/ageB.dat", O_RDWR | O_CREAT | O_DIRECT, 0600);
  printf("write A %.2f GiB/s\n", io(a, true, 16));
  printf("write B %.2f GiB/s\n", io(b, true, 16));
  for (int r = 0; r < 3; ++r) {
    printf("read B (newer) %.2f GiB/s, ", io(b, false, 4));
    printf("read A (older) %.2f GiB/s\n", io(a, false, 4));
    fflush(stdout);
  }
  unlink("/var/tmp/fx/ageA.dat"); unlink("/var/tmp/fx/ageB.dat");
}
