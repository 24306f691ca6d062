// `rangekv serve`: the node's store service (docs/store-service.md). Foreground, logs to
// stderr, stops cleanly (every store's snapshot written) on SIGTERM or SIGINT: what a systemd
// unit with Type=simple expects.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "base/cpus.h"
#include "base/parse.h"
#include "commands.h"
#include "engine/options.h"
#include "rangekv/options.h"
#include "remote/redis_client.h"
#include "service/store_service.h"

namespace rangekv::tools {
namespace {

struct ServeConfig {
  std::string dir;
  std::string socket;
  bool group = false;
  std::string quota = "16GiB";
  std::vector<std::string> tenant_quotas;  // tenant=bytes
  std::string store_capacity = "0";
  std::string durability = "periodic:200";
  uint32_t max_sessions = 256;
  uint32_t max_sessions_per_pid = service::ServiceOptions{}.max_sessions_per_pid;
  uint32_t max_sessions_per_uid = 0;
  uint64_t idle_timeout_s = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(service::ServiceOptions{}.idle_timeout)
          .count());
  uint64_t frame_timeout_ms =
      static_cast<uint64_t>(service::ServiceOptions{}.frame_timeout.count());
  uint64_t fence_ms = 1000;
  uint32_t spin_us = static_cast<uint32_t>(service::ServiceOptions{}.request_spin.count());
  bool follow_client_cpu = service::ServiceOptions{}.follow_client_cpu;
  uint32_t read_slots = engine_internal::NodeReadSlots(UsableCpus());  // --read-slots auto
  // The cluster tier (docs/scale-out.md).
  std::string remote;
  std::string remote_endpoint;
  std::string directory;
  std::string remote_region;
  std::string remote_ca_file;
  std::string remote_capacity = "0";
  std::string upload_rate = "0";
};

}  // namespace

CLI::Validator ReadSlotsAuto() {
  return CLI::Validator(
      [](std::string& s) {
        if (s == "auto") s = std::to_string(engine_internal::NodeReadSlots(UsableCpus()));
        return std::string();
      },
      "auto|N");
}

namespace {

[[noreturn]] void Exit(int code) { throw CLI::RuntimeError(code); }

void RunServe(const ServeConfig& c) {
  service::ServiceOptions o;
  o.root = c.dir;
  o.socket_path = c.socket;
  o.group_access = c.group;
  o.max_sessions = c.max_sessions;
  o.restart_fence_ms = c.fence_ms;
  o.request_spin = std::chrono::microseconds(c.spin_us);
  o.follow_client_cpu = c.follow_client_cpu;
  o.read_slots = c.read_slots;
  o.max_sessions_per_pid = c.max_sessions_per_pid;
  o.max_sessions_per_uid = c.max_sessions_per_uid;
  o.idle_timeout = std::chrono::seconds(c.idle_timeout_s);
  o.frame_timeout = std::chrono::milliseconds(c.frame_timeout_ms);
  auto usage = [](const std::string& what, const Status& s) {
    std::fprintf(stderr, "rangekv serve: %s: %s\n", what.c_str(), s.message().c_str());
    Exit(2);
  };
  auto quota = ParseByteSize(c.quota);
  if (!quota.ok()) usage("--quota", quota.status());
  o.default_quota_bytes = *quota;
  auto capacity = ParseByteSize(c.store_capacity);
  if (!capacity.ok()) usage("--store-capacity", capacity.status());
  o.store_capacity_bytes = *capacity;
  for (const std::string& tq : c.tenant_quotas) {
    const size_t eq = tq.find('=');
    if (eq == std::string::npos) usage("--tenant-quota " + tq, InvalidArgument("TENANT=BYTES"));
    const std::string tenant = tq.substr(0, eq);
    // A name no client could ever connect as (a path, an empty one) is a typo, not a quota.
    if (Status t = service::ValidateTenant(tenant); !t.ok()) usage("--tenant-quota " + tq, t);
    auto bytes = ParseByteSize(tq.substr(eq + 1));
    if (!bytes.ok()) usage("--tenant-quota " + tq, bytes.status());
    if (!o.quotas.emplace(tenant, *bytes).second) {
      usage("--tenant-quota " + tq, InvalidArgument("tenant " + tenant + " given twice"));
    }
  }
  Durability d;
  if (Status s = d.Set(c.durability); !s.ok()) {
    std::fprintf(stderr, "rangekv serve: --durability: %s\n", s.ToString().c_str());
    Exit(2);
  }
  o.journal.mode = d.mode == Durability::Mode::kEveryPublish
                       ? persist::DurabilityMode::kEveryPublish
                   : d.mode == Durability::Mode::kNone ? persist::DurabilityMode::kNone
                                                       : persist::DurabilityMode::kPeriodic;
  o.journal.period_ms = d.period_ms;
  if (!c.remote.empty()) {
    o.remote.url = c.remote;
    o.remote.endpoint = c.remote_endpoint;
    o.remote.directory = c.directory;
    o.remote.region = c.remote_region;
    o.remote.ca_file = c.remote_ca_file;
    auto cap = ParseByteSize(c.remote_capacity);
    auto rate = ParseByteSize(c.upload_rate);
    if (!cap.ok() || !rate.ok()) {
      std::fprintf(stderr, "rangekv serve: --remote-capacity / --upload-bytes-per-s: %s\n",
                   (!cap.ok() ? cap.status() : rate.status()).ToString().c_str());
      Exit(2);
    }
    o.remote.capacity_bytes = *cap;
    o.remote.upload_bytes_per_s = *rate;
    if (c.directory.empty()) {
      std::fprintf(stderr, "rangekv serve: --remote needs --directory redis://host:port/db\n");
      Exit(2);
    }
  }

  // Signals are taken synchronously by this thread; every other thread has them blocked.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto service = service::StoreService::Start(o);
  if (!service.ok()) {
    std::fprintf(stderr, "rangekv serve: %s\n", service.status().ToString().c_str());
    Exit(1);
  }
  if (!c.remote.empty()) {
    std::fprintf(stderr, "rangekv serve: publishing sealed packs to %s (%s), directory %s\n",
                 c.remote.c_str(), c.remote_endpoint.empty() ? "AWS S3" : c.remote_endpoint.c_str(),
                 [&] {
                   auto a = remote::ParseRedisUrl(c.directory);  // never prints a password
                   return a.ok() ? a->Describe() : std::string("?");
                 }()
                     .c_str());
  }
  std::fprintf(stderr,
               "rangekv serve: listening on %s (stores under %s, durability %s, %s); engines "
               "connect with store_service=\"unix://%s\"\n",
               (*service)->socket_path().c_str(), c.dir.c_str(), d.ToString().c_str(),
               c.read_slots == 0
                   ? "no read gate"
                   : ("read gate of " + std::to_string(c.read_slots) + " slots").c_str(),
               (*service)->socket_path().c_str());
  if (c.read_slots > 0 && c.max_sessions > service::kMaxGateHolders) {
    std::fprintf(stderr,
                 "rangekv serve: note: the read gate has room for %u sessions; sessions beyond "
                 "that (of --max-sessions %u) read ungated\n",
                 service::kMaxGateHolders, c.max_sessions);
  }
  int sig = 0;
  sigwait(&set, &sig);
  std::fprintf(stderr, "rangekv serve: %s: stopping\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  const service::ServiceStats st = (*service)->stats();
  Status stopped = (*service)->Stop();
  std::fprintf(stderr,
               "rangekv serve: sessions %llu accepted, %llu refused, %llu reclaimed, %llu closed "
               "idle, %llu timed out, %llu vanished; %llu requests; %llu malformed\n",
               static_cast<unsigned long long>(st.sessions_accepted),
               static_cast<unsigned long long>(st.sessions_refused),
               static_cast<unsigned long long>(st.sessions_reclaimed),
               static_cast<unsigned long long>(st.sessions_closed_idle),
               static_cast<unsigned long long>(st.sessions_closed_deadline),
               static_cast<unsigned long long>(st.sessions_vanished),
               static_cast<unsigned long long>(st.requests),
               static_cast<unsigned long long>(st.bad_frames));
  if (st.read_gate_slots > 0) {
    std::fprintf(stderr,
                 "rangekv serve: read gate of %llu slots: %llu sessions attached; %llu tickets "
                 "out, %llu holders, %llu marks of dead sessions reclaimed\n",
                 static_cast<unsigned long long>(st.read_gate_slots),
                 static_cast<unsigned long long>(st.read_gate_sessions),
                 static_cast<unsigned long long>(st.read_gate_outstanding),
                 static_cast<unsigned long long>(st.read_gate_holders),
                 static_cast<unsigned long long>(st.read_gate_marks_reclaimed));
  }
  if (!stopped.ok()) {
    std::fprintf(stderr, "rangekv serve: clean shutdown failed: %s\n", stopped.ToString().c_str());
    Exit(1);
  }
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto cfg = std::make_shared<ServeConfig>();
  CLI::App* serve = app.add_subcommand(
      "serve", "Run the node's store service: one store shared by every serving process");
  serve->add_option("--dir", cfg->dir, "Root directory of the stores (one per tenant/namespace)")
      ->required();
  serve->add_option("--socket", cfg->socket, "Unix socket path (default DIR/rangekv.sock)");
  serve->add_flag("--group", cfg->group,
                  "Socket 0660 and stores group-readable; peers of the service's group allowed");
  serve->add_option("--quota", cfg->quota, "Capacity per tenant (all its namespaces)")
      ->capture_default_str();
  serve->add_option("--tenant-quota", cfg->tenant_quotas, "TENANT=BYTES, repeatable");
  serve
      ->add_option("--store-capacity", cfg->store_capacity,
                   "Capacity of each store (BYTES, within its tenant's quota). 0: a new store "
                   "takes what its first client asks for; an existing store keeps its pack "
                   "file's, whatever a client asks")
      ->capture_default_str();
  serve->add_option("--durability", cfg->durability, "every_publish | periodic:<ms> | none")
      ->capture_default_str();
  serve->add_option("--max-sessions", cfg->max_sessions, "Connections at once")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  serve
      ->add_option("--max-sessions-per-pid", cfg->max_sessions_per_pid,
                   "Connections one client process may hold at once (0: no bound of its own)")
      ->capture_default_str();
  serve
      ->add_option("--max-sessions-per-uid", cfg->max_sessions_per_uid,
                   "Connections one user may hold at once (0: --max-sessions, or three "
                   "quarters of it with --group)")
      ->capture_default_str();
  serve
      ->add_option("--idle-timeout-s", cfg->idle_timeout_s,
                   "Close a session that holds nothing and sends nothing this long (its engine "
                   "reconnects on its next call); 0: never")
      ->check(CLI::Range(uint64_t{0}, uint64_t{30} * 24 * 3600))
      ->capture_default_str();
  serve
      ->add_option("--frame-timeout-ms", cfg->frame_timeout_ms,
                   "A request must arrive whole, a reply be taken, and a new connection say "
                   "hello within this; else the session is closed")
      ->check(CLI::Range(uint64_t{1}, uint64_t{3600} * 1000))
      ->capture_default_str();
  serve
      ->add_option("--restart-fence-ms", cfg->fence_ms,
                   "After reopening a store, refuse stores this long (late writes of old clients)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{3600} * 1000))
      ->capture_default_str();
  serve
      ->add_option("--spin-us", cfg->spin_us,
                   "After each reply, poll this long for the session's next request before "
                   "sleeping (spares the wake-up of a lookup's claim; costs CPU)")
      ->check(CLI::Range(0u, 10000u))
      ->capture_default_str();
  serve
      ->add_flag("--follow-client-cpu,!--no-follow-client-cpu", cfg->follow_client_cpu,
                 "Walk a lookup's or claim's tokens on the CPU its client wrote them from (the "
                 "session's thread moves there, when this process may run on it)")
      ->capture_default_str();
  serve
      ->add_option("--read-slots", cfg->read_slots,
                   "The node's read gate: read I/O pieces all engines that ask for it "
                   "(read_gate, on by default) keep in flight together; auto = what one "
                   "engine alone keeps on this node (" +
                       std::to_string(cfg->read_slots) + " here); 0 = no gate")
      ->transform(ReadSlotsAuto())
      ->check(CLI::Range(0u, service::kMaxGateSlots))
      ->default_str("auto");
  serve->add_option(
      "--remote", cfg->remote,
      "Cluster tier: publish sealed packs to s3://BUCKET[/PREFIX] (docs/scale-out.md)");
  serve->add_option("--remote-endpoint", cfg->remote_endpoint,
                    "S3 endpoint URL (http(s)://host:port; default AWS S3)");
  serve->add_option(
      "--directory", cfg->directory,
      "Cluster directory: redis://[[user]:password@]host:port[/db] (Redis or Valkey)");
  serve->add_option("--remote-region", cfg->remote_region, "SigV4 region (default: AWS chain)");
  serve->add_option("--remote-ca-file", cfg->remote_ca_file, "CA bundle for an https endpoint");
  serve
      ->add_option("--remote-capacity", cfg->remote_capacity,
                   "Bytes per tenant in the bucket prefix before LRU runs are retired (0: none)")
      ->capture_default_str();
  serve->add_option("--upload-bytes-per-s", cfg->upload_rate, "Upload bandwidth cap (0: none)")
      ->capture_default_str();
  serve->callback([cfg] { RunServe(*cfg); });
}

}  // namespace rangekv::tools
