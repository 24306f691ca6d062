// Throwaway: O_DIRECT write rate from a payload-sized cold buffer vs a small per-thread buffer.
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
const size_t kBytes = 240ull << 20;
double io(int fd, char* buf, bool small, int threads, size_t piece, bool write) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> ts; double t0 = now();
  for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] {
    for (;;) { size_t i = next.fetch_add(1); if (i * piece >= kBytes) break;
      char* b = small ? buf + (size_t)t * piece : buf + i * piece;
      ssize_t n = write ? pwrite(fd, b, piece, i * piece) : pread(fd, b, piece, i * piece);
      if (n != (ssize_t)piece) { perror("io"); _exit(1); } } });
  for (auto& x : ts) x.join();
  return kBytes / double(1 << 30) / (now() - t0);
}
int main() {
  char* big = (char*)mmap(nullptr, 256ull << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  madvise(big, 256ull << 20, MADV_HUGEPAGE); memset(big, 7, 256ull << 20);
  int fd = open("/var/tmp/fx/w.dat", O_RDWR | O_CREAT | O_DIRECT, 0600);
  fallocate(fd, 0, 0, kBytes);
  io(fd, big, false, 32, 8 << 20, true);
  for (int r = 0; r < 4; ++r) {
    printf("write 32x8MiB big %.2f  small %.2f | 16x1MiB big %.2f small %.2f | read 16x1MiB big %.2f small %.2f\n",
           io(fd, big, false, 32, 8 << 20, true), io(fd, big, true, 32, 8 << 20, true),
           io(fd, big, false, 16, 1 << 20, true), io(fd, big, true, 16, 1 << 20, true),
           io(fd, big, false, 16, 1 << 20, false), io(fd, big, true, 16, 1 << 20, false));
    fflush(stdout);
  }
  unlink("/var/tmp/fx/w.dat");
}
