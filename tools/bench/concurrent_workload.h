// The shape of `rangekv bench concurrent`'s rounds (tools/bench/concurrent.h), the same in the
// coordinating process and in every client process of the service mode: the options, each
// (variant, N)'s plan, the engines' options, the requests' token ids, paged KV and pattern
// seeds, and one request run and verified.
//
// Thread-safety: after Setup, const methods may be called from any thread; a request's paged
// KV is used by its own thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/device.h"
#include "rangekv/engine.h"
#include "service/store_service.h"
#include "tools/bench/paged_kv.h"
#include "tools/bench/requests.h"

namespace rangekv::tools {

struct ConcurrentOptions {
  std::string device = "auto";
  std::string io = "posix";
  std::string size = "256MiB";
  std::string n_list = "1,2,4,8,16";
  std::string stripe = "8MiB";
  std::string dir;
  uint32_t reps = 2;
  uint32_t warmups = 1;
  uint32_t ceiling_threads = 0;
  std::string ceiling_passes = "round";  // round: before every round; end: after the N's rounds
  uint64_t seed = 20261202;
  bool buffered = false;
  bool quiet = false;
  std::string mode = "embedded";       // embedded | service | both
  uint32_t client_read_threads = 0;    // service clients' read_io_threads (0: the engine's auto)
  uint32_t client_read_workers = 0;    // service clients' read_workers (0: the engine's default)
  uint32_t client_read_banks = 0;      // service clients' read_banks (0: the engine's default)
  uint32_t embedded_read_banks = 0;    // the embedded engine's read_banks (0: its default)
  uint32_t embedded_read_workers = 0;  // the embedded engine's read_workers (0: its default)
  uint32_t embedded_read_threads = 0;  // the embedded engine's read_io_threads (0: its auto)
  std::string variants = "distinct,same-prefix,mixed";
  bool interleave = false;                 // mode both: the two arms' rounds in turn
  std::string client_share_reads = "off";  // service clients' EngineTuning::share_reads
  // The in-process service's read gate (ServiceOptions::read_slots) and every client's
  // EngineTuning::read_gate; 0: none. The command defaults it to rangekv serve's (--read-slots
  // auto).
  uint32_t read_gate = 0;
  bool pin_clients = false;  // service client i runs on the i-th of N equal shares of the CPUs
  // Service clients: "processes" (one per request, the deployment's shape) or "threads" (N
  // engines in this process, each its own session): tells what separate processes cost apart
  // from what N engines cost.
  std::string clients = "processes";
};

enum class ConcurrentMode : uint8_t { kEmbedded, kService, kServiceThreads };
const char* ModeName(ConcurrentMode m);  // "embedded", "service", "svc-thrd"

enum class Variant : uint8_t { kDistinct, kSamePrefix, kMixed };
const char* VariantName(Variant v);  // "distinct", "same-prefix", "mixed"
Variant ParseVariant(const std::string& name);

// The shape of one (variant, N) run.
struct RunPlan {
  Variant variant = Variant::kDistinct;
  uint32_t n = 0;
  uint64_t tokens = 0;  // per request (P)
  uint32_t restores = 0, stores = 0;
  uint32_t prefixes = 0;  // stored untimed first
  uint32_t rounds = 0;
  uint64_t capacity_bytes = 0;
};

// One row of the report: a (mode, variant, N)'s timed rounds.
struct ConcurrentRow {
  ConcurrentMode mode = ConcurrentMode::kEmbedded;
  Variant variant = Variant::kDistinct;
  uint32_t n = 0;
  uint32_t restores = 0, stores = 0;
  uint64_t request_tokens = 0;
  uint64_t bytes_per_rep = 0;
  std::vector<double> aggregate_gib_s;  // per timed repetition
  double aggregate_median = 0;
  // Per-request latency of every timed repetition, by kind: a mixed row's restores and stores
  // are two distributions (tens of ms against hundreds), so their percentiles are kept apart.
  // p50/p90/p99 are the restores' (the stores' in a row without restores).
  std::vector<double> latencies_s;
  std::vector<double> store_latencies_s;
  double p50 = 0, p90 = 0, p99 = 0;
  double store_p50 = 0, store_p99 = 0;  // a mixed row's stores
  double ceiling_gib_s = 0;             // the best read ceiling of this N
  std::string ceiling_config;
  double embedded_gib_s = 0;  // service rows of mode both: the embedded row's aggregate
  uint64_t verify_failures = 0;
  std::vector<RequestTimeline> timelines;  // every request of every timed repetition, relative
};

class ConcurrentWorkload {
 public:
  // Parses the options (sizes, N list, variants); makes the device. Ends the command on bad
  // options.
  explicit ConcurrentWorkload(const ConcurrentOptions& options);

  const ConcurrentOptions& options() const { return o_; }
  const Geometry& geometry() const { return geometry_; }
  Device& device() const { return *device_; }
  uint64_t row_bytes() const { return row_bytes_; }
  uint64_t total_tokens() const { return total_tokens_; }
  const std::vector<uint32_t>& ns() const { return ns_; }
  const std::vector<Variant>& variants() const { return variants_; }

  RunPlan Plan(Variant variant, uint32_t n) const;
  // Engine options of every engine of a run: embedded at `store_dir`, or a client of the
  // service at `socket`.
  EngineOptions Options(const RunPlan& p, const std::string& store_dir,
                        const std::string& socket) const;

  uint64_t PrefixSeed(const RunPlan& p, uint32_t i) const;
  std::vector<int32_t> Prompt(const RunPlan& p, uint32_t i) const;
  // Request i's paged KV (restores of prefix i use the pattern seed PrefixSeed(i)).
  std::unique_ptr<PagedKvSpace> Space(const RunPlan& p, uint32_t i) const;

  // Request i of a round, untimed part first: stores fill their paged KV with a new pattern
  // and get this round's new prompt in `tokens`; restores poison theirs (their `tokens` stay
  // the prompt of their prefix).
  void PrepareRequest(const RunPlan& p, uint32_t round, uint32_t i, PagedKvSpace& kv,
                      std::vector<int32_t>* tokens) const;
  // Requests [0, restores) restore, the rest store.
  Status RunRequest(Engine& engine, const RunPlan& p, uint32_t round, uint32_t i, PagedKvSpace& kv,
                    const std::vector<int32_t>& tokens, RequestTimeline* t) const;
  // Rows of a restore that differ from its prefix's pattern (0 for a store).
  uint64_t VerifyRequest(const RunPlan& p, uint32_t i, PagedKvSpace& kv) const;
  // Untimed: stores each distinct prefix once (into kv[0, prefixes)).
  void StorePrefixes(Engine& engine, const RunPlan& p,
                     std::vector<std::unique_ptr<PagedKvSpace>>& kv) const;

 private:
  const ConcurrentOptions& o_;
  ModelSpec model_;
  Geometry geometry_;
  uint64_t row_bytes_ = 0;
  uint64_t total_tokens_ = 0;
  std::vector<uint32_t> ns_;
  std::vector<Variant> variants_;  // in the order distinct, same-prefix, mixed
  std::unique_ptr<Device> device_;
};

// "bench concurrent: <message>" on stderr, unless the options say quiet.
void ConcurrentProgress(const ConcurrentOptions& o, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
// Ends `rangekv bench concurrent` with `what` (FailCommand).
[[noreturn]] void ConcurrentFail(const std::string& what);
// Ends it when `s` is an error: "<what>: <s>".
void ConcurrentCheck(const Status& s, const std::string& what);

}  // namespace rangekv::tools
