#include "tools/bench/concurrent_clients.h"

#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstring>
#include <utility>
#include <vector>

#include "base/log.h"
#include "tools/bench/concurrent.h"

namespace rangekv::tools {

ClientProcess ClientProcess::Spawn(const ConcurrentOptions& o, const RunPlan& p, uint32_t index,
                                   const std::string& socket) {
  // Flag and value pairs, a pair a line.
  // clang-format off
  std::vector<std::string> args = {"rangekv", "bench", "concurrent-client",
                                   "--socket", socket,
                                   "--variant", VariantName(p.variant),
                                   "--n", std::to_string(p.n),
                                   "--index", std::to_string(index),
                                   "--device", o.device,
                                   "--io", o.io,
                                   "--size", o.size,
                                   "--stripe", o.stripe,
                                   "--reps", std::to_string(o.reps),
                                   "--warmups", std::to_string(o.warmups),
                                   "--seed", std::to_string(o.seed),
                                   "--client-read-threads", std::to_string(o.client_read_threads),
                                   "--client-read-workers", std::to_string(o.client_read_workers),
                                   "--client-read-banks", std::to_string(o.client_read_banks),
                                   "--client-share-reads", o.client_share_reads,
                                   "--read-gate", std::to_string(o.read_gate)};
  // clang-format on
  if (o.buffered) args.push_back("--buffered");
  if (o.pin_clients) args.push_back("--pin-clients");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) ConcurrentFail("pipe failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  ClientProcess c;
  const int rc = posix_spawn(&c.pid_, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    ConcurrentFail("spawning a client process failed: " + std::string(std::strerror(rc)));
  }
  c.to_ = fdopen(in[1], "w");
  c.from_ = fdopen(out[0], "r");
  return c;
}

ClientProcess::ClientProcess(ClientProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      to_(std::exchange(other.to_, nullptr)),
      from_(std::exchange(other.from_, nullptr)) {}

ClientProcess::~ClientProcess() {
  // Reached without Reap only when the command is failing: the client reads the end of its
  // stdin and ends; it is not waited for (it may be stuck in the request that failed).
  if (to_ != nullptr) std::fclose(to_);
  if (from_ != nullptr) std::fclose(from_);
}

void ClientProcess::Send(const char* line) {
  std::fputs(line, to_);
  std::fflush(to_);
}

std::string ClientProcess::ReadLine() {
  char buf[1024];
  if (std::fgets(buf, sizeof buf, from_) == nullptr) {
    ConcurrentFail("client process " + std::to_string(pid_) + " ended early (its stderr says why)");
  }
  return buf;
}

void ClientProcess::AwaitReady() {
  if (ReadLine() != "ready\n") ConcurrentFail("client protocol: expected ready");
}

void ClientProcess::Go() { Send("go\n"); }

RequestTimeline ClientProcess::AwaitDone(uint32_t index) {
  const std::string line = ReadLine();
  int ok = 0;
  int consumed = 0;
  RequestTimeline t;
  if (std::sscanf(line.c_str(), "done %d %lf %lf %lf %lf %lf %lf %n", &ok, &t.start, &t.looked_up,
                  &t.bound, &t.first, &t.last, &t.end, &consumed) != 7) {
    ConcurrentFail("client protocol: " + line);
  }
  if (ok != 1) ConcurrentFail("request " + std::to_string(index) + ": " + line.substr(consumed));
  return t;
}

void ClientProcess::Verify() { Send("verify\n"); }

uint64_t ClientProcess::AwaitVerified() {
  unsigned long long bad = 0;
  if (std::sscanf(ReadLine().c_str(), "verified %llu", &bad) != 1) {
    ConcurrentFail("client protocol: expected verified");
  }
  return bad;
}

void ClientProcess::Reap() {
  std::fclose(std::exchange(to_, nullptr));
  std::fclose(std::exchange(from_, nullptr));
  int wstatus = 0;
  const pid_t pid = std::exchange(pid_, -1);
  if (waitpid(pid, &wstatus, 0) != pid || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    ConcurrentFail("a client process failed at its end");
  }
}

namespace {

// Pins this process (still one thread: its later threads inherit the mask) to the index-th of
// n equal shares of the CPUs it may use, as a node's serving instances are often pinned.
void PinToShare(uint32_t index, uint32_t n) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    ConcurrentFail("sched_getaffinity failed");
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  const size_t count = cpus.size();
  size_t lo = index * count / n, hi = (index + 1) * count / n;
  if (hi <= lo) lo = index % count, hi = lo + 1;  // fewer CPUs than clients
  cpu_set_t share;
  CPU_ZERO(&share);
  for (size_t i = lo; i < hi; ++i) CPU_SET(cpus[i], &share);
  if (sched_setaffinity(0, sizeof share, &share) != 0) ConcurrentFail("sched_setaffinity failed");
}

void Line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Line(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::fflush(stdout);
}

}  // namespace

void RunConcurrentClient(const ConcurrentOptions& options, const ConcurrentClient& c) {
  if (options.pin_clients) PinToShare(c.index, c.n);
  SetMinLogLevel(LogLevel::kWarning);
  const ConcurrentWorkload w(options);
  const RunPlan p = w.Plan(ParseVariant(c.variant), c.n);
  if (c.index >= p.n) ConcurrentFail("--index outside [0, n)");
  Result<std::unique_ptr<Engine>> opened = Engine::Open(w.Options(p, "", c.socket));
  if (!opened.ok()) ConcurrentFail("open: " + opened.status().ToString());
  Engine& engine = **opened;
  std::unique_ptr<PagedKvSpace> kv = w.Space(p, c.index);
  std::vector<int32_t> prompt =
      c.index < p.restores ? w.Prompt(p, c.index) : std::vector<int32_t>{};
  char line[64];
  for (uint32_t round = 0; round < p.rounds; ++round) {
    w.PrepareRequest(p, round, c.index, *kv, &prompt);
    Line("ready\n");
    if (std::fgets(line, sizeof line, stdin) == nullptr) ConcurrentFail("stdin closed");
    RequestTimeline t;
    const Status s = w.RunRequest(engine, p, round, c.index, *kv, prompt, &t);
    std::string why = s.ToString();
    std::replace(why.begin(), why.end(), '\n', ' ');
    Line("done %d %.9f %.9f %.9f %.9f %.9f %.9f %s\n", s.ok() ? 1 : 0, t.start, t.looked_up,
         t.bound, t.first, t.last, t.end, why.c_str());
    // The round's timed part ends with the last client: verify only when told.
    if (std::fgets(line, sizeof line, stdin) == nullptr) ConcurrentFail("stdin closed");
    const uint64_t bad = s.ok() ? w.VerifyRequest(p, c.index, *kv) : 0;
    Line("verified %llu\n", static_cast<unsigned long long>(bad));
  }
  const Engine::ReadShare share = engine.read_share();
  std::fprintf(stderr,
               "bench client %u of %u: read share at the end: %u readers, %u stripe reads and "
               "%u read I/O pieces in flight at most",
               c.index, p.n, share.readers, share.read_workers, share.read_io_threads);
  if (share.gate_slots > 0) {
    std::fprintf(stderr,
                 "; the node's read gate of %u slots: %" PRIu64 " reads waited, %" PRIu64
                 " waits ran out",
                 share.gate_slots, share.gate_waited, share.gate_timed_out);
  }
  std::fprintf(stderr, "\n");
  Status closed = engine.Close();
  if (!closed.ok()) ConcurrentFail("close: " + closed.ToString());
}

}  // namespace rangekv::tools
