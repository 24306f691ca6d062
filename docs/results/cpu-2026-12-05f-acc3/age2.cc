// Throwaway: does a 6 GiB file read slower after 18 GiB of other writes (host write-back cache)?
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
using namespace std::chrono;
static double now() { return duration<double>(steady_clock::now().time_since_epoch()).count(); }
const size_t kFile = 6ull << 30, kPiece = 1 << 20, kRing = 1ull << 30;
static char* buf;
double io(int fd, bool write, int threads) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> ts; double t0 = now();
  for (int t = 0; t < threads; ++t) ts.emplace_back([&] {
    for (;;) { size_t i = next.fetch_add(1); if (i * kPiece >= kFile) break;
      char* b = buf + (i * kPiece) % kRing;
      ssize_t n = write ? pwrite(fd, b, kPiece, i * kPiece) : pread(fd, b, kPiece, i * kPiece);
      if (n != (ssize_t)kPiece) { perror("io"); _exit(1); } } });
  for (auto& x : ts) x.join();
  return 6.0 / (now() - t0);
}
int main() {
  buf = (char*)mmap(nullptr, kRing, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  madvise(buf, kRing, MADV_HUGEPAGE); memset(buf, 5, kRing);
  int fd[4];
  for (int i = 0; i < 4; ++i) {
    std::string p = "/var/tmp/fx/age" + std::to_string(i) + ".dat";
    fd[i] = open(p.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0600);
    printf("write %d %.2f GiB/s\n", i, io(fd[i], true, 16)); fflush(stdout);
  }
  for (int r = 0; r < 3; ++r) {
    printf("read 3 (newest) %.2f GiB/s, ", io(fd[3], false, 4));
    printf("read 0 (18 GiB older) %.2f GiB/s, ", io(fd[0], false, 4));
    printf("read 2 %.2f GiB/s\n", io(fd[2], false, 4));
    fflush(stdout);
  }
  for (int i = 0; i < 4; ++i) unlink(("/var/tmp/fx/age" + std::to_string(i) + ".dat").c_str());
}
