// The client processes of `rangekv bench concurrent --mode service` (tools/bench/concurrent.h)
// and their line protocol with the coordinator. A client (`rangekv bench concurrent-client`,
// RunConcurrentClient in tools/bench/concurrent.h) opens its own Engine through the store service
// and, per round: prepares its paged KV and writes "ready"; reads "go" and runs its request; writes
// "done <ok> <start> <looked_up> <bound> <first> <last> <end> <message>" (the RequestTimeline's
// instants, absolute seconds on CLOCK_MONOTONIC); reads "verify" (sent once every client's done
// line is in) and writes "verified <mismatches>". It ends at its stdin's end with exit status 0.
//
// Thread-safety: a ClientProcess is driven by the coordinator's thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "tools/bench/concurrent_workload.h"

namespace rangekv::tools {

// One client process, seen from the coordinator. Every protocol error ends the command.
class ClientProcess {
 public:
  // Starts client `index` of plan `p` against the service at `socket`, from this binary, with
  // the options the coordinator runs with.
  static ClientProcess Spawn(const ConcurrentOptions& o, const RunPlan& p, uint32_t index,
                             const std::string& socket);
  ClientProcess(ClientProcess&& other) noexcept;
  ClientProcess& operator=(ClientProcess&&) = delete;
  ~ClientProcess();

  void AwaitReady();  // "ready": its next round's paged KV is prepared
  void Go();
  // "done": the request's instants; a failed request ends the command with its message.
  RequestTimeline AwaitDone(uint32_t index);
  void Verify();
  uint64_t AwaitVerified();  // mismatching rows of its restore
  // Closes its stdin and waits for it; it must exit 0.
  void Reap();

 private:
  ClientProcess() = default;
  void Send(const char* line);
  std::string ReadLine();

  pid_t pid_ = -1;
  FILE* to_ = nullptr;    // its stdin
  FILE* from_ = nullptr;  // its stdout
};

}  // namespace rangekv::tools
