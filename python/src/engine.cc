// rangekv._core.Engine, RestoreHandle, StoreHandle and their outcomes over rangekv::Engine.
//
// Lifetimes. A handle holds a reference to its Python Engine object and to every tensor it was
// given, so neither the engine nor the memory the engine reads or writes can go away while a
// transfer may still touch it. A handle dropped without finish() is drained in its destructor
// (restore: cancel + finish; store: finish with detach) before the tensor references go.
// Blocking calls run with the GIL released. finish() waits for wait_* calls running on the same
// handle in other threads (the C++ API forbids Finish racing them).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "binding.h"

namespace rangekv::py {

namespace {

bool Finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// Runs `f` with the GIL released (held again when it returns), unless the interpreter is
// shutting down (destructors then keep it: no other thread can run).
template <typename F>
auto WithoutGil(F&& f) {
  if (Finalizing()) return f();
  nb::gil_scoped_release release;
  return f();
}

nb::tuple Interval(TokenInterval t) { return nb::make_tuple(t.begin, t.end); }

// A blocking wait from Python: `wait(slice)` (GIL released) in slices of at most 100 ms, with
// Python's signal handlers run between them, so Ctrl-C raises KeyboardInterrupt instead of
// leaving a process only SIGKILL ends. The handle stays as it was (the wait changed nothing):
// finish() or cancel() it, or drop it (its destructor drains it). `timeout_s`: None waits until
// done; otherwise DeadlineExceeded (also a TimeoutError) once it passed.
template <typename Wait>
void WaitInSlices(const char* what, std::optional<double> timeout_s, Wait&& wait) {
  using std::chrono::milliseconds;
  if (timeout_s && !(*timeout_s >= 0 && *timeout_s <= 1e9)) {
    Throw(StatusCode::kInvalidArgument,
          std::string(what) + ": timeout must be None or seconds in [0, 1e9]");
  }
  constexpr milliseconds kSlice(100);
  const auto start = std::chrono::steady_clock::now();
  const auto limit = std::chrono::duration_cast<milliseconds>(
      std::chrono::duration<double>(timeout_s.value_or(0)));
  for (;;) {
    milliseconds slice = kSlice;
    if (timeout_s) {
      const auto spent =
          std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
      slice = std::clamp(limit - spent, milliseconds(0), kSlice);
    }
    const Status st = wait(slice);
    if (st.code() != StatusCode::kDeadlineExceeded) {
      ThrowIfError(st);
      return;
    }
    if (timeout_s && std::chrono::steady_clock::now() - start >= limit) {
      Throw(StatusCode::kDeadlineExceeded,
            std::string(what) + ": not done within " + std::to_string(*timeout_s) + " s");
    }
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  }
}

const char* DispositionName(StoreDisposition d) {
  switch (d) {
    case StoreDisposition::kStoring:
      return "storing";
    case StoreDisposition::kJoined:
      return "joined";
    case StoreDisposition::kAlreadyCached:
      return "cached";
  }
  return "cached";
}

// ---- outcomes ---------------------------------------------------------------------------

struct PyRestoreOutcome {
  RestoreOutcome out;
};

struct PyStoreOutcome {
  StoreOutcome out;
};

class PyEngine;

// ---- handles ----------------------------------------------------------------------------

class PyRestore {
 public:
  PyRestore(RestoreHandle h, nb::object owner, PyEngine* eng)
      : h_(std::move(h)), owner_(std::move(owner)), eng_(eng), tokens_(h_.tokens()) {}
  ~PyRestore() {
    if (finished_.exchange(true)) return;
    WithoutGil([&] {
      h_.Cancel();
      std::unique_lock lock(use_);
      (void)h_.Finish();
      return 0;
    });
  }

  TokenInterval tokens() const { return tokens_; }
  bool finished() const { return finished_.load(); }
  bool bound() const { return bound_.load(); }

  void BindSlots(nb::handle kv_layers, nb::handle slot_mapping);
  void WaitLayer(uint32_t layer, std::optional<double> timeout_s) {
    if (!timeout_s && !bound_.load()) {
      // Without a deadline an unbound restore's wait fails at once (it blocked for ever; the
      // engine refuses it, or reports the cancellation of a cancelled one).
      Run("wait_layer", [&] { return h_.WaitLayer(layer); });
      return;
    }
    WaitInSlices("RestoreHandle.wait_layer", timeout_s, [&](std::chrono::milliseconds slice) {
      return RunStatus("wait_layer", [&] { return h_.WaitLayer(layer, slice); });
    });
  }
  void StreamWaitLayer(uint32_t layer, nb::handle stream);
  PyRestoreOutcome Finish() {
    if (finished_.exchange(true)) {
      Throw(StatusCode::kFailedPrecondition, "RestoreHandle.finish: already finished");
    }
    PyRestoreOutcome o{WithoutGil([&] {
      if (!bound_.load()) h_.Cancel();
      std::unique_lock lock(use_);
      return h_.Finish();
    })};
    bound_layers_ = BoundLayers{};
    return o;
  }
  void Cancel() {
    if (finished_.load()) return;
    WithoutGil([&] {
      std::shared_lock lock(use_);
      if (!finished_.load()) h_.Cancel();
      return 0;
    });
  }

 private:
  template <typename F>
  void Run(const char* what, F&& f) {
    ThrowIfError(RunStatus(what, std::forward<F>(f)));
  }
  // Run's status instead of an exception (a finished handle still raises).
  template <typename F>
  Status RunStatus(const char* what, F&& f) {
    bool was_finished = false;
    Status st = WithoutGil([&] {
      std::shared_lock lock(use_);
      if (finished_.load()) {
        was_finished = true;
        return OkStatus();
      }
      return f();
    });
    if (was_finished) {
      Throw(StatusCode::kFailedPrecondition,
            std::string("RestoreHandle.") + what + ": the handle is finished");
    }
    return st;
  }

  RestoreHandle h_;
  nb::object owner_;  // the Python Engine: keeps it (and its stream refs) alive
  PyEngine* eng_;
  TokenInterval tokens_;
  BoundLayers bound_layers_;  // the bound tensors, until finish
  std::shared_mutex use_;     // wait_* shared, finish exclusive
  std::atomic<bool> bound_{false};
  std::atomic<bool> finished_{false};
};

class PyStore {
 public:
  PyStore(StoreHandle h, nb::object owner, PyEngine* eng, BoundLayers layers)
      : h_(std::move(h)), owner_(std::move(owner)), eng_(eng), layers_(std::move(layers)) {
    disposition_ = h_.disposition();
    stored_ = h_.stored_tokens();
  }
  ~PyStore() {
    if (finished_.exchange(true)) return;
    WithoutGil([&] {
      std::unique_lock lock(use_);
      (void)h_.Finish(StoreWait::kDetach);
      return 0;
    });
  }

  const char* disposition() const { return DispositionName(disposition_); }
  TokenInterval stored_tokens() const { return stored_; }
  bool finished() const { return finished_.load(); }
  bool Extracted() {
    if (finished_.load()) return true;
    std::shared_lock lock(use_);
    return finished_.load() || h_.extracted();
  }
  void LayerProduced(uint32_t layer, nb::handle stream);
  void WaitExtracted(std::optional<double> timeout_s) {
    WaitInSlices("StoreHandle.wait_extracted", timeout_s, [&](std::chrono::milliseconds slice) {
      return RunStatus("wait_extracted", [&] { return h_.WaitExtracted(slice); });
    });
  }
  PyStoreOutcome Finish(bool detach) {
    if (finished_.exchange(true)) {
      Throw(StatusCode::kFailedPrecondition, "StoreHandle.finish: already finished");
    }
    PyStoreOutcome o{WithoutGil([&] {
      std::unique_lock lock(use_);
      return h_.Finish(detach ? StoreWait::kDetach : StoreWait::kUntilVisible);
    })};
    layers_ = BoundLayers{};
    return o;
  }

 private:
  template <typename F>
  void Run(const char* what, F&& f) {
    ThrowIfError(RunStatus(what, std::forward<F>(f)));
  }
  template <typename F>
  Status RunStatus(const char* what, F&& f) {
    bool was_finished = false;
    Status st = WithoutGil([&] {
      std::shared_lock lock(use_);
      if (finished_.load()) {
        was_finished = true;
        return OkStatus();
      }
      return f();
    });
    if (was_finished) {
      Throw(StatusCode::kFailedPrecondition,
            std::string("StoreHandle.") + what + ": the handle is finished");
    }
    return st;
  }

  StoreHandle h_;
  nb::object owner_;
  PyEngine* eng_;
  BoundLayers layers_;  // the source tensors, until finish
  StoreDisposition disposition_;
  TokenInterval stored_;
  std::shared_mutex use_;
  std::atomic<bool> finished_{false};
};

// ---- engine -----------------------------------------------------------------------------

struct EngineArgs {
  std::string store_dir;
  ModelSpec model;
  std::string layout;
  EngineOptions options;
};

class PyEngine {
 public:
  explicit PyEngine(EngineArgs args) : layout_name_(args.layout) {
    info_.layout = &LayoutByName(args.layout);
    if (info_.layout->mla != (args.model.mla_latent_size != 0)) {
      Throw(StatusCode::kGeometryMismatch,
            "layout " + std::string(info_.layout->name) +
                (info_.layout->mla ? " is for MLA models: pass mla_latent_size"
                                   : " is not for MLA models (mla_latent_size > 0 needs layout "
                                     "\"mla\")"));
    }
    args.model.layout = info_.layout->value;
    info_.dtype = args.model.kv_dtype;
    info_.cuda_device = static_cast<int32_t>(args.options.cuda_device_ordinal);
    args.options.store_dir = args.store_dir;
    args.options.model = args.model;
    auto opened = WithoutGil([&] { return Engine::Open(args.options); });
    if (!opened.ok()) ThrowStatus(opened.status());
    engine_ = std::move(opened).value();
    info_.geometry = engine_->geometry();
    backends_ = engine_->DescribeBackends();
    // The host device describes itself as "device=host"; a CUDA device names the GPU.
    info_.cuda = backends_.find("device=host") == std::string::npos;
  }

  ~PyEngine() {
    // The engine's destructor closes it (drains every transfer): not with the GIL held.
    WithoutGil([&] {
      engine_.reset();
      return 0;
    });
  }

  const EngineInfo& info() const { return info_; }
  bool closed() const { return closed_.load(); }

  Engine& Get(const char* what) {
    if (closed_.load()) ThrowClosed(what);
    return *engine_;
  }

  void Close() {
    if (closed_.exchange(true)) return;
    ThrowIfError(WithoutGil([&] { return engine_->Close(); }));
  }

  nb::dict Geometry() const {
    const auto& g = info_.geometry;
    nb::dict d;
    d["layers"] = g.layers;
    d["kv_heads_per_rank"] = g.kv_heads_per_rank;
    d["head_size"] = g.head_size;
    d["mla_latent_size"] = g.mla_latent_size;
    d["dtype_bytes"] = g.dtype_bytes;
    d["dtype"] = info_.dtype;
    d["block_size"] = g.block_size;
    d["token_bytes"] = g.token_bytes;
    d["stripe_bytes"] = g.stripe_bytes;
    d["tokens_per_stripe"] = g.tokens_per_stripe;
    d["pack_bytes"] = g.pack_bytes;
    d["layout"] = layout_name_;
    return d;
  }

  // The options as the engine resolved them at open (bank sizes and thread counts filled in):
  // what the engine actually allocated, for callers that budget memory around it.
  nb::dict Options() {
    const EngineOptions& o = Get("options").options();
    nb::dict d;
    d["stripe_bytes"] = o.stripe_bytes;
    d["capacity_bytes"] = o.capacity_bytes;
    d["read_banks"] = o.tuning.read_banks;
    d["read_bank_bytes"] = o.tuning.read_bank_bytes;
    d["prefetch_banks"] = o.tuning.prefetch_banks;
    d["read_workers"] = o.tuning.read_workers;
    d["read_io_threads"] = o.tuning.read_io_threads;
    d["share_reads"] = o.tuning.share_reads;
    d["read_gate"] = o.tuning.read_gate;
    d["lookahead_layers"] = o.tuning.lookahead_layers;
    d["store_banks"] = o.tuning.store_banks;
    d["store_bank_bytes"] = o.tuning.store_bank_bytes;
    d["layer_group"] = o.tuning.layer_group;
    d["group_workers"] = o.tuning.group_workers;
    d["write_workers"] = o.tuning.write_workers;
    d["max_inflight_restores"] = o.tuning.max_inflight_restores;
    d["max_inflight_stores"] = o.tuning.max_inflight_stores;
    d["max_request_tokens"] = o.max_request_tokens;
    return d;
  }

  nb::dict Recovery() {
    const StoreRecovery& r = Get("recovery").recovery();
    nb::dict d;
    d["loaded"] = r.loaded;
    d["created"] = r.created;
    d["reason"] = r.reason;
    d["detail"] = r.detail;
    d["packs_loaded"] = r.packs_loaded;
    d["packs_evicted_for_capacity"] = r.packs_evicted_for_capacity;
    d["store_epoch"] = r.store_epoch;
    return d;
  }

  std::string Namespace() { return Get("namespace").namespace_id().ToHex(); }
  const std::string& backends() const { return backends_; }
  const std::string& layout() const { return layout_name_; }

  nb::tuple Lookup(nb::handle tokens, nb::handle envelope, nb::handle granularity,
                   uint64_t local_tokens) {
    Engine& e = Get("lookup");
    std::vector<int32_t> t = ToTokens(tokens);
    RequestEnvelope env = ToEnvelope(envelope);
    uint64_t g = info_.geometry.block_size;
    if (!granularity.is_none()) g = nb::cast<uint64_t>(granularity);
    auto r = WithoutGil([&] { return e.Lookup(env, t, g, local_tokens); });
    if (!r.ok()) ThrowStatus(r.status());
    if (r->hit_tokens > 0) RememberTicket(r->ticket, r->hit_tokens, env);
    return nb::make_tuple(r->hit_tokens, nb::bytes(r->ticket.data(), r->ticket.size()));
  }

  void ReleaseRequest(nb::handle envelope) {
    Engine& e = Get("release_request");
    RequestEnvelope env = ToEnvelope(envelope);
    {
      std::lock_guard lock(mu_);
      for (auto it = tickets_.begin(); it != tickets_.end();) {
        it = it->second.envelope == env ? tickets_.erase(it) : std::next(it);
      }
    }
    WithoutGil([&] {
      e.ReleaseRequest(env);
      return 0;
    });
  }

  PyRestore* StartRestore(nb::handle self, nb::handle ticket, nb::handle envelope,
                          nb::handle tokens, uint64_t begin_token, nb::handle endpoint) {
    Engine& e = Get("start_restore");
    const std::string tk = ToTicket(ticket);
    RequestEnvelope env = ToEnvelope(envelope);
    std::vector<int32_t> t = ToTokens(tokens);
    uint64_t end = 0;
    if (endpoint.is_none()) {
      std::lock_guard lock(mu_);
      auto it = tickets_.find(tk);
      if (it == tickets_.end()) {
        Throw(StatusCode::kInvalidArgument,
              "start_restore: endpoint_tokens=None (the hit) works only for a ticket that this "
              "Engine's lookup() returned; pass the hit from lookup() as endpoint_tokens");
      }
      end = it->second.hit;
    } else {
      end = nb::cast<uint64_t>(endpoint);
    }
    RestoreRequest req;
    req.ticket = tk;
    req.envelope = env;
    req.tokens = t;
    req.begin_token = begin_token;
    req.endpoint_tokens = end;
    auto h = WithoutGil([&] { return e.StartRestore(req); });
    if (!h.ok()) ThrowStatus(h.status());
    {
      std::lock_guard lock(mu_);
      tickets_.erase(tk);
    }
    return new PyRestore(std::move(h).value(), nb::borrow(self), this);
  }

  PyStore* BeginStore(nb::handle self, nb::handle envelope, nb::handle tokens, nb::handle kv_layers,
                      nb::handle slot_mapping) {
    Engine& e = Get("begin_store");
    RequestEnvelope env = ToEnvelope(envelope);
    std::vector<int32_t> t = ToTokens(tokens);
    BoundLayers layers = ToLayers(info_, kv_layers, /*writable=*/false);
    std::vector<int64_t> slots = ToInt64s(slot_mapping, "slot_mapping");
    CheckSlots(info_, layers.kv, slots, t.size(), /*unique=*/false, "slot_mapping");
    StoreRequest req;
    req.envelope = env;
    req.tokens = t;
    req.kv = &layers.kv;
    req.slot_mapping = slots;
    auto h = WithoutGil([&] { return e.BeginStore(req); });
    if (!h.ok()) ThrowStatus(h.status());
    return new PyStore(std::move(h).value(), nb::borrow(self), this, std::move(layers));
  }

  nb::dict Stats() { return StatsDict(Get("stats").GetStats()); }
  nb::dict RemoteStats() {
    const RemoteTierStats r = Get("remote_stats").remote_stats();
    nb::dict d;
    d["enabled"] = r.enabled;
    d["lookups"] = r.lookups;
    d["lookup_hits"] = r.lookup_hits;
    d["lookup_timeouts"] = r.lookup_timeouts;
    d["directory_round_trips"] = r.directory_round_trips;
    d["runs_selected"] = r.runs_selected;
    d["manifest_fetches"] = r.manifest_fetches;
    d["gets"] = r.gets;
    d["get_bytes"] = r.get_bytes;
    d["failed_gets"] = r.failed_gets;
    d["verified_spans"] = r.verified_spans;
    d["quarantined"] = r.quarantined;
    d["packs_published"] = r.packs_published;
    d["packs_deduplicated"] = r.packs_deduplicated;
    d["publish_failures"] = r.publish_failures;
    d["bytes_uploaded"] = r.bytes_uploaded;
    d["objects_deleted"] = r.objects_deleted;
    d["directory_rebuilds"] = r.directory_rebuilds;
    return d;
  }
  nb::dict ReadShare() {
    const Engine::ReadShare r = Get("read_share").read_share();
    nb::dict d;
    d["readers"] = r.readers;
    d["read_workers"] = r.read_workers;
    d["read_io_threads"] = r.read_io_threads;
    d["gate_slots"] = r.gate_slots;
    d["gate_passes"] = r.gate_passes;
    d["gate_waited"] = r.gate_waited;
    d["gate_timed_out"] = r.gate_timed_out;
    return d;
  }

  // (slot, generation, begin, end, retired) per removed range, oldest first.
  nb::list DrainRemovedRanges(size_t max) {
    Engine& e = Get("drain_removed_ranges");
    std::vector<RemovedRange> ranges = e.DrainRemovedRanges(max);
    nb::list l;
    for (const RemovedRange& r : ranges) {
      l.append(
          nb::make_tuple(r.pack.slot, r.pack.generation, r.tokens.begin, r.tokens.end, r.retired));
    }
    return l;
  }

  // A stream ref for a native CUDA stream, wrapped once per handle value.
  DeviceStreamRef Stream(nb::handle stream) {
    Engine& e = Get("stream");
    const uintptr_t native = ToNativeStream(stream);
    std::lock_guard lock(mu_);
    auto it = streams_.find(native);
    if (it != streams_.end()) return it->second;
    auto ref = e.WrapNativeStream(reinterpret_cast<void*>(native));
    if (!ref.ok()) ThrowStatus(ref.status());
    streams_.emplace(native, *ref);
    return *ref;
  }

 private:
  struct TicketInfo {
    uint64_t hit = 0;
    RequestEnvelope envelope;
  };
  static constexpr size_t kMaxRememberedTickets = 4096;

  void RememberTicket(const std::string& ticket, uint64_t hit, const RequestEnvelope& env) {
    std::lock_guard lock(mu_);
    if (tickets_.size() >= kMaxRememberedTickets) tickets_.erase(tickets_.begin());
    tickets_[ticket] = TicketInfo{hit, env};
  }

  std::string layout_name_;
  EngineInfo info_;
  std::string backends_;
  std::unique_ptr<Engine> engine_;
  std::atomic<bool> closed_{false};
  std::mutex mu_;
  std::map<uintptr_t, DeviceStreamRef> streams_;         // guarded by mu_
  std::unordered_map<std::string, TicketInfo> tickets_;  // guarded by mu_
};

void PyRestore::BindSlots(nb::handle kv_layers, nb::handle slot_mapping) {
  if (finished_.load()) {
    Throw(StatusCode::kFailedPrecondition, "RestoreHandle.bind_slots: the handle is finished");
  }
  if (bound_.load()) {
    Throw(StatusCode::kFailedPrecondition, "RestoreHandle.bind_slots: slots are already bound");
  }
  BoundLayers layers = ToLayers(eng_->info(), kv_layers, /*writable=*/true);
  std::vector<int64_t> slots = ToInt64s(slot_mapping, "slot_mapping");
  CheckSlots(eng_->info(), layers.kv, slots, tokens_.size(), /*unique=*/true, "slot_mapping");
  Run("bind_slots", [&] { return h_.BindSlots(layers.kv, slots); });
  bound_layers_ = std::move(layers);
  bound_.store(true);
}

void PyRestore::StreamWaitLayer(uint32_t layer, nb::handle stream) {
  const DeviceStreamRef ref = eng_->Stream(stream);
  Run("stream_wait_layer", [&] { return h_.StreamWaitLayer(layer, ref); });
}

void PyStore::LayerProduced(uint32_t layer, nb::handle stream) {
  DeviceStreamRef ref;
  if (!stream.is_none()) ref = eng_->Stream(stream);
  Run("layer_produced", [&] { return h_.LayerProduced(layer, ref); });
}

EngineArgs MakeArgs(std::string store_dir, uint32_t layers, uint32_t kv_heads, uint32_t head_size,
                    nb::handle dtype, uint32_t block_size, std::string layout,
                    uint32_t mla_latent_size, std::string model_id, std::string revision,
                    std::string semantic_config, uint32_t tp_size, uint32_t tp_rank,
                    std::vector<std::string> tags) {
  EngineArgs a;
  a.store_dir = std::move(store_dir);
  a.layout = std::move(layout);
  const DtypeSpec d = ParseDtype(dtype);
  a.model.kv_dtype = d.canonical;
  a.model.dtype_bytes = d.bytes;
  a.model.layers = layers;
  a.model.kv_heads = kv_heads;
  a.model.head_size = head_size;
  a.model.mla_latent_size = mla_latent_size;
  a.model.block_size = block_size;
  a.model.model_id = std::move(model_id);
  a.model.revision = std::move(revision);
  a.model.semantic_config = std::move(semantic_config);
  a.model.tp_size = tp_size;
  a.model.tp_rank = tp_rank;
  a.model.tags = std::move(tags);
  return a;
}

void SetChoice(const std::string& v, const char* what,
               std::initializer_list<std::pair<const char*, int>> choices, int* out) {
  std::string names;
  for (const auto& [name, value] : choices) {
    if (v == name) {
      *out = value;
      return;
    }
    names += names.empty() ? "" : ", ";
    names += name;
  }
  Throw(StatusCode::kInvalidArgument, std::string(what) + "=\"" + v + "\" is not one of " + names);
}

}  // namespace

void RegisterEngine(nb::module_& m) {
  nb::class_<PyRestoreOutcome>(m, "RestoreOutcome",
                               "What a restore delivered (RestoreHandle.finish).")
      .def_prop_ro(
          "ok", [](const PyRestoreOutcome& o) { return o.out.status.ok(); },
          "True when every requested token was delivered.")
      .def_prop_ro(
          "status", [](const PyRestoreOutcome& o) { return StatusObject(o.out.status); },
          "None, or the rangekv.Error of the first failure.")
      .def_prop_ro(
          "requested", [](const PyRestoreOutcome& o) { return Interval(o.out.requested); },
          "(begin, end): the path tokens asked for.")
      .def_prop_ro(
          "failed",
          [](const PyRestoreOutcome& o) {
            nb::list l;
            for (const TokenInterval& t : o.out.failed) l.append(Interval(t));
            return l;
          },
          "Sorted, disjoint (begin, end) intervals to recompute; their slots hold nothing usable.")
      .def_prop_ro("delivered_tokens",
                   [](const PyRestoreOutcome& o) { return o.out.delivered_tokens; })
      .def_prop_ro(
          "work", [](const PyRestoreOutcome& o) { return StatsDict(o.out.work); },
          "This restore's share of the engine counters.")
      .def("__repr__", [](const PyRestoreOutcome& o) {
        return "RestoreOutcome(ok=" + std::string(o.out.status.ok() ? "True" : "False") +
               ", requested=(" + std::to_string(o.out.requested.begin) + ", " +
               std::to_string(o.out.requested.end) +
               "), delivered_tokens=" + std::to_string(o.out.delivered_tokens) +
               ", failed=" + std::to_string(o.out.failed.size()) + " intervals" +
               (o.out.status.ok() ? "" : ", status=" + o.out.status.ToString()) + ")";
      });

  nb::class_<PyStoreOutcome>(m, "StoreOutcome", "How a store ended (StoreHandle.finish).")
      .def_prop_ro("ok", [](const PyStoreOutcome& o) { return o.out.status.ok(); })
      .def_prop_ro("status", [](const PyStoreOutcome& o) { return StatusObject(o.out.status); })
      .def_prop_ro("disposition",
                   [](const PyStoreOutcome& o) { return DispositionName(o.out.disposition); })
      .def_prop_ro(
          "stored", [](const PyStoreOutcome& o) { return Interval(o.out.stored); },
          "(begin, end): the suffix this store wrote (empty unless 'storing').")
      .def_prop_ro("visible", [](const PyStoreOutcome& o) { return o.out.visible; })
      .def_prop_ro(
          "packs",
          [](const PyStoreOutcome& o) {
            nb::list l;
            for (const PackRange& p : o.out.packs) {
              l.append(
                  nb::make_tuple(p.pack.slot, p.pack.generation, p.tokens.begin, p.tokens.end));
            }
            return l;
          },
          "[(slot, generation, begin, end)]: the packs this store reserved, in path order "
          "(empty unless 'storing'); Engine.drain_removed_ranges names them when they leave.")
      .def_prop_ro("work", [](const PyStoreOutcome& o) { return StatsDict(o.out.work); })
      .def("__repr__", [](const PyStoreOutcome& o) {
        return "StoreOutcome(ok=" + std::string(o.out.status.ok() ? "True" : "False") +
               ", disposition='" + DispositionName(o.out.disposition) + "', stored=(" +
               std::to_string(o.out.stored.begin) + ", " + std::to_string(o.out.stored.end) +
               "), visible=" + (o.out.visible ? "True" : "False") +
               (o.out.status.ok() ? "" : ", status=" + o.out.status.ToString()) + ")";
      });

  nb::class_<PyRestore>(m, "RestoreHandle",
                        "A claimed restore (Engine.start_restore). Keeps the bound tensors alive "
                        "until finish(); a context manager that cancels and finishes on exit.")
      .def_prop_ro(
          "tokens", [](const PyRestore& h) { return Interval(h.tokens()); },
          "(begin, end): the path tokens this restore delivers.")
      .def_prop_ro("finished", &PyRestore::finished)
      .def_prop_ro("bound", &PyRestore::bound)
      .def("bind_slots", &PyRestore::BindSlots, nb::arg("kv_layers"), nb::arg("slot_mapping"),
           "Binds the destination: one tensor per layer (validated against the geometry, layout, "
           "dtype and device) and one slot per requested token (slot = block * block_size + "
           "offset; in range, no repeats).")
      .def("wait_layer", &PyRestore::WaitLayer, nb::arg("layer"), nb::arg("timeout") = nb::none(),
           "Blocks (GIL released) until the layer is delivered; raises the layer's error. "
           "Without a timeout, FailedPrecondition at once before bind_slots (an unbound "
           "restore delivers nothing). timeout: seconds (DeadlineExceeded when they pass; the "
           "restore goes on; another thread may bind meanwhile). Ctrl-C raises "
           "KeyboardInterrupt; the handle stays usable.")
      .def("stream_wait_layer", &PyRestore::StreamWaitLayer, nb::arg("layer"), nb::arg("stream"),
           "CUDA: makes `stream` (torch.cuda.Stream or int handle) wait for the layer.")
      .def("finish", &PyRestore::Finish,
           "Waits (GIL released) for every read and scatter to drain and reports; ends the "
           "handle and drops its tensor references. Unbound restores are cancelled first.")
      .def("cancel", &PyRestore::Cancel, "Stops the restore without waiting; idempotent.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](PyRestore& h, nb::args) {
        if (!h.finished()) {
          h.Cancel();
          (void)h.Finish();
        }
        return false;
      });

  nb::class_<PyStore>(m, "StoreHandle",
                      "A store of a request's uncached suffix (Engine.begin_store). Keeps the "
                      "source tensors alive until finish().")
      .def_prop_ro("disposition", &PyStore::disposition, "'storing', 'joined' or 'cached'.")
      .def_prop_ro("stored_tokens", [](const PyStore& s) { return Interval(s.stored_tokens()); })
      .def_prop_ro("extracted", &PyStore::Extracted, "True once the source slots may be reused.")
      .def_prop_ro("finished", &PyStore::finished)
      .def("layer_produced", &PyStore::LayerProduced, nb::arg("layer"),
           nb::arg("stream") = nb::none(),
           "Layer `layer` of the source KV is written (on `stream`, CUDA, or already in memory).")
      .def("wait_extracted", &PyStore::WaitExtracted, nb::arg("timeout") = nb::none(),
           "Blocks (GIL released) until extracted; raises the store's first error. timeout: "
           "seconds (DeadlineExceeded when they pass). Ctrl-C raises KeyboardInterrupt.")
      .def("finish", &PyStore::Finish, nb::arg("detach") = false,
           "Waits until visible (detach=False) or extracted (detach=True), GIL released, and "
           "reports; ends the handle. Unproduced layers abort the store.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](PyStore& s, nb::args) {
        if (!s.finished()) (void)s.Finish(false);
        return false;
      });

  nb::class_<PyEngine>(m, "Engine",
                       "One rank's RangeKV engine over one store directory (see the package "
                       "docstring). A context manager; close() drains and saves.")
      .def(
          "__init__",
          [](PyEngine* self, std::string store_dir, uint32_t layers, uint32_t kv_heads,
             uint32_t head_size, nb::handle dtype, uint32_t block_size, std::string layout,
             uint32_t mla_latent_size, std::string model_id, std::string revision,
             std::string semantic_config, uint32_t tp_size, uint32_t tp_rank,
             std::vector<std::string> tags, uint64_t stripe_bytes, uint64_t capacity_bytes,
             std::string device, uint32_t cuda_device, std::string io_engine, bool direct_io,
             std::string checksum, std::string durability, uint64_t checkpoint_interval_ms,
             std::string ablations, uint32_t read_banks, uint64_t read_bank_bytes,
             uint32_t read_workers, uint32_t read_io_threads, uint32_t prefetch_banks,
             uint32_t lookahead_layers, uint32_t max_inflight_restores, uint32_t store_banks,
             uint64_t store_bank_bytes, uint32_t group_workers, uint32_t write_workers,
             uint32_t layer_group, uint32_t max_inflight_stores, uint64_t max_request_tokens,
             uint64_t max_removed_ranges, std::string store_service, std::string tenant,
             uint32_t store_service_spin_us, bool share_reads, bool read_gate, std::string remote,
             std::string remote_endpoint, std::string directory, bool remote_publish,
             uint64_t remote_get_bytes, uint32_t remote_lookup_timeout_ms,
             uint32_t remote_read_timeout_ms, uint64_t remote_capacity_bytes,
             uint64_t upload_bytes_per_s, uint32_t store_service_timeout_ms,
             std::string on_store_mismatch) {
            EngineArgs a = MakeArgs(std::move(store_dir), layers, kv_heads, head_size, dtype,
                                    block_size, std::move(layout), mla_latent_size,
                                    std::move(model_id), std::move(revision),
                                    std::move(semantic_config), tp_size, tp_rank, std::move(tags));
            EngineOptions& o = a.options;
            o.stripe_bytes = stripe_bytes;
            o.capacity_bytes = capacity_bytes;
            int v = 0;
            SetChoice(device, "device",
                      {{"auto", int(DeviceSelection::kAuto)},
                       {"host", int(DeviceSelection::kHost)},
                       {"cuda", int(DeviceSelection::kCuda)}},
                      &v);
            o.device = static_cast<DeviceSelection>(v);
            o.cuda_device_ordinal = cuda_device;
            SetChoice(io_engine, "io_engine",
                      {{"auto", int(IoEngineSelection::kAuto)},
                       {"posix", int(IoEngineSelection::kPosix)},
                       {"uring", int(IoEngineSelection::kUring)}},
                      &v);
            o.io_engine = static_cast<IoEngineSelection>(v);
            o.direct_io = direct_io ? DirectIo::kPreferred : DirectIo::kOff;
            SetChoice(
                checksum, "checksum",
                {{"always", int(ChecksumPolicy::kAlways)}, {"off", int(ChecksumPolicy::kOff)}}, &v);
            o.checksum = static_cast<ChecksumPolicy>(v);
            ThrowIfError(o.durability.Set(durability));
            o.durability.checkpoint_interval_ms = checkpoint_interval_ms;
            size_t pos = 0;
            while (pos < ablations.size()) {
              size_t comma = ablations.find(',', pos);
              if (comma == std::string::npos) comma = ablations.size();
              std::string item = ablations.substr(pos, comma - pos);
              pos = comma + 1;
              item.erase(0, item.find_first_not_of(' '));
              item.erase(item.find_last_not_of(' ') + 1);
              if (item.empty()) continue;
              ThrowIfError(o.tuning.ablations.Set(item));
            }
            o.tuning.read_banks = read_banks;
            o.tuning.read_bank_bytes = read_bank_bytes;
            o.tuning.read_workers = read_workers;
            o.tuning.read_io_threads = read_io_threads;
            o.tuning.prefetch_banks = prefetch_banks;
            o.tuning.lookahead_layers = lookahead_layers;
            o.tuning.max_inflight_restores = max_inflight_restores;
            o.tuning.store_banks = store_banks;
            o.tuning.store_bank_bytes = store_bank_bytes;
            o.tuning.group_workers = group_workers;
            o.tuning.write_workers = write_workers;
            o.tuning.layer_group = layer_group;
            o.tuning.max_inflight_stores = max_inflight_stores;
            o.max_request_tokens = max_request_tokens;
            o.tuning.max_removed_ranges = max_removed_ranges;
            o.store_service = std::move(store_service);
            o.tenant = std::move(tenant);
            o.tuning.store_service_spin_us = store_service_spin_us;
            o.tuning.share_reads = share_reads;
            o.tuning.read_gate = read_gate;
            o.remote.url = std::move(remote);
            o.remote.endpoint = std::move(remote_endpoint);
            o.remote.directory = std::move(directory);
            o.remote.publish = remote_publish;
            o.remote.get_bytes = remote_get_bytes;
            o.remote.lookup_timeout_ms = remote_lookup_timeout_ms;
            o.remote.read_timeout_ms = remote_read_timeout_ms;
            o.remote.capacity_bytes = remote_capacity_bytes;
            o.remote.upload_bytes_per_s = upload_bytes_per_s;
            o.tuning.store_service_timeout_ms = store_service_timeout_ms;
            SetChoice(
                on_store_mismatch, "on_store_mismatch",
                {{"fail", int(StoreMismatch::kFail)}, {"replace", int(StoreMismatch::kReplace)}},
                &v);
            o.on_store_mismatch = static_cast<StoreMismatch>(v);
            new (self) PyEngine(std::move(a));
          },
          nb::arg("store_dir"), nb::kw_only(), nb::arg("layers"), nb::arg("kv_heads"),
          nb::arg("head_size"), nb::arg("dtype") = "bfloat16", nb::arg("block_size") = 16,
          nb::arg("layout") = "flash_attn_nhd", nb::arg("mla_latent_size") = 0,
          nb::arg("model_id") = "", nb::arg("revision") = "", nb::arg("semantic_config") = "",
          nb::arg("tp_size") = 1, nb::arg("tp_rank") = 0,
          nb::arg("tags") = std::vector<std::string>{}, nb::arg("stripe_bytes") = 32ull << 20,
          nb::arg("capacity_bytes") = 16ull << 30, nb::arg("device") = "auto",
          nb::arg("cuda_device") = 0, nb::arg("io_engine") = "auto", nb::arg("direct_io") = true,
          nb::arg("checksum") = "always", nb::arg("durability") = "periodic:200",
          nb::arg("checkpoint_interval_ms") = 60000, nb::arg("ablations") = "",
          nb::arg("read_banks") = 8, nb::arg("read_bank_bytes") = 0, nb::arg("read_workers") = 4,
          nb::arg("read_io_threads") = 0, nb::arg("prefetch_banks") = 7,
          nb::arg("lookahead_layers") = 4, nb::arg("max_inflight_restores") = 16,
          nb::arg("store_banks") = 8, nb::arg("store_bank_bytes") = 0, nb::arg("group_workers") = 0,
          nb::arg("write_workers") = 32, nb::arg("layer_group") = 0,
          nb::arg("max_inflight_stores") = 16, nb::arg("max_request_tokens") = 262144,
          nb::arg("max_removed_ranges") = 4096, nb::arg("store_service") = "",
          nb::arg("tenant") = "default", nb::arg("store_service_spin_us") = 200,
          nb::arg("share_reads") = false, nb::arg("read_gate") = true, nb::arg("remote") = "",
          nb::arg("remote_endpoint") = "", nb::arg("directory") = "",
          nb::arg("remote_publish") = true, nb::arg("remote_get_bytes") = 0,
          nb::arg("remote_lookup_timeout_ms") = 250, nb::arg("remote_read_timeout_ms") = 10000,
          nb::arg("remote_capacity_bytes") = 0, nb::arg("upload_bytes_per_s") = 0,
          nb::arg("store_service_timeout_ms") = 60000, nb::arg("on_store_mismatch") = "fail",
          "Opens (or creates) the store in store_dir for this model; raises rangekv.Error. "
          "remote='s3://bucket/prefix' with remote_endpoint and directory='redis://host:port/db' "
          "turns on the cluster tier (docs/scale-out.md).")
      .def_prop_ro("geometry", &PyEngine::Geometry, "The per-rank KV shape (dict).")
      .def_prop_ro("namespace", &PyEngine::Namespace, "The namespace id (32 hex digits).")
      .def_prop_ro("recovery", &PyEngine::Recovery, "What open found in the store directory.")
      .def_prop_ro("options", &PyEngine::Options,
                   "The options as resolved at open (bank sizes and thread counts filled in).")
      .def_prop_ro("backends", &PyEngine::backends, "e.g. 'device=host io=uring ...'.")
      .def_prop_ro("layout", &PyEngine::layout, "The KV cache layout name.")
      .def_prop_ro("closed", &PyEngine::closed)
      .def("lookup", &PyEngine::Lookup, nb::arg("tokens"), nb::arg("envelope"),
           nb::arg("granularity") = nb::none(), nb::arg("local_tokens") = 0,
           "Longest cached prefix of tokens (rounded down to granularity, default block_size) "
           "-> (hit_tokens, ticket bytes; b'' on a miss). local_tokens: leading tokens the "
           "caller already holds; a prefetch reads only past them.")
      .def("release_request", &PyEngine::ReleaseRequest, nb::arg("envelope"),
           "The request finished or aborted: its unclaimed ticket is cancelled.")
      .def(
          "start_restore",
          [](nb::handle self, nb::handle ticket, nb::handle envelope, nb::handle tokens,
             uint64_t begin_token, nb::handle endpoint_tokens) {
            return nb::cast<PyEngine&>(self).StartRestore(self, ticket, envelope, tokens,
                                                          begin_token, endpoint_tokens);
          },
          nb::arg("ticket"), nb::arg("envelope"), nb::arg("tokens"), nb::arg("begin_token") = 0,
          nb::arg("endpoint_tokens") = nb::none(), nb::rv_policy::take_ownership,
          "Claims the ticket and starts the restore of tokens [begin_token, endpoint_tokens).")
      .def(
          "begin_store",
          [](nb::handle self, nb::handle envelope, nb::handle tokens, nb::handle kv_layers,
             nb::handle slot_mapping) {
            return nb::cast<PyEngine&>(self).BeginStore(self, envelope, tokens, kv_layers,
                                                        slot_mapping);
          },
          nb::arg("envelope"), nb::arg("tokens"), nb::arg("kv_layers"), nb::arg("slot_mapping"),
          nb::rv_policy::take_ownership,
          "Reserves the uncached suffix of tokens; slot_mapping has one slot per token.")
      .def("stats", &PyEngine::Stats, "The engine's work counters (dict).")
      .def("remote_stats", &PyEngine::RemoteStats,
           "The cluster tier's counters (dict; enabled=False without remote).")
      .def("read_share", &PyEngine::ReadShare,
           "The read concurrency in effect (dict: readers the store service last reported, "
           "stripe reads and read I/O pieces kept in flight; share_reads; the node's read gate "
           "slots this engine passes, reads that waited for one and waits that ran out; "
           "read_gate).")
      .def("drain_removed_ranges", &PyEngine::DrainRemovedRanges, nb::arg("max") = 4096,
           "Takes up to `max` of the oldest ranges of tokens that stopped being served (a pack "
           "evicted, invalidated or clipped): [(slot, generation, begin, end, retired)], the "
           "pack as StoreOutcome.packs named it and the path tokens [begin, end) it no longer "
           "serves; retired=False: it keeps serving its head [pack begin, begin). At most "
           "max_removed_ranges wait; older ones are dropped (stats()['removed_events_dropped']).")
      .def("close", &PyEngine::Close,
           "Drains every transfer and saves the index; raises on failure (first call only). "
           "Idempotent; later engine calls raise rangekv.ClosedError.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](PyEngine& e, nb::args) {
        e.Close();
        return false;
      });
}

}  // namespace rangekv::py
