// rangekv._baseline: the per-object MODEL of the stock KV storage path (tools/bench/baseline),
// for `rangekv bench ttft-hf`'s per-object arm. It is a benchmark instrument, not part of the
// public door: this file alone in python/ reaches internal headers (tools/bench/baseline,
// src/device, src/engine/paged_views.h), and it is a module of its own so that rangekv._core
// keeps to include/rangekv. Restores and stores are synchronous, one call per request, as the stock
// non-layerwise path's retrieve and store are; the GIL is released around them.
//
// Thread-safety: one call at a time per store (the model's own rule); calls are serialised by
// a mutex here (the store is looked up under it), so a misuse from two threads, close()
// included, waits instead of racing.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "binding.h"
#include "device/device.h"
#include "engine/paged_views.h"
#include "tools/bench/baseline/object_naming.h"
#include "tools/bench/baseline/per_object_store.h"

namespace rangekv::py {
namespace {

baseline::ObjectShape ParseShape(const std::string& name) {
  if (name == "chunk") return baseline::ObjectShape::kChunk;
  if (name == "chunk-layer") return baseline::ObjectShape::kChunkLayer;
  if (name == "chunk-layer-slice") return baseline::ObjectShape::kChunkLayerSlice;
  Throw(StatusCode::kInvalidArgument,
        "shape must be chunk, chunk-layer or chunk-layer-slice, got \"" + name + "\"");
}

nb::dict WorkDict(const baseline::PerObjectStats& w) {
  nb::dict d;
#define RANGEKV_PY_WORK_(name, doc) d[#name] = w.name;
  RANGEKV_PER_OBJECT_STATS_FIELDS(RANGEKV_PY_WORK_)
#undef RANGEKV_PY_WORK_
  return d;
}

class PyPerObjectStore {
 private:
  // Runs f(store) with the GIL released and the mutex held (calls from several threads take
  // turns; Close() waits for a running call); rangekv.ClosedError once closed. The store is
  // looked up under the mutex, so a Close() racing the call cannot free it underneath.
  template <typename F>
  auto WithStore(const char* what, F&& f) {
    using R = decltype(f(std::declval<baseline::PerObjectStore&>()));
    std::optional<R> r;
    {
      nb::gil_scoped_release release;
      std::lock_guard lock(mu_);
      if (store_ != nullptr) r.emplace(f(*store_));
    }
    if (!r) ThrowClosed(std::string("PerObjectStore.") + what);
    return std::move(*r);
  }

  struct Call {
    std::vector<int32_t> tokens;
    std::vector<int64_t> slots;
    baseline::ObjectNaming naming;
    BoundLayers layers;
    std::vector<kernels::PagedKvView> views;
  };

  baseline::ObjectNaming Naming(const std::string& shape, uint64_t tokens, uint32_t chunks) const {
    Result<baseline::ObjectNaming> n =
        baseline::MakeObjectNaming(info_.geometry, ParseShape(shape), 0, tokens, chunks);
    ThrowIfError(n.status());
    return *n;
  }

  // One put or get: the inputs checked, `f(store, call)` run without the GIL, its report's
  // status raised, and {objects, work} for the caller to complete.
  template <typename F>
  auto Transfer(const char* what, nb::handle tokens, const std::string& shape, uint32_t chunks,
                nb::handle kv_layers, nb::handle slot_mapping, bool writable, F&& f) {
    Call c = Prepare(tokens, shape, chunks, kv_layers, slot_mapping, writable);
    auto r = WithStore(what, [&](baseline::PerObjectStore& store) { return f(store, c); });
    ThrowIfError(r.status);
    nb::dict d;
    d["objects"] = r.objects;
    d["work"] = WorkDict(r.work);
    return std::pair{d, r};
  }

  // The naming covers path tokens [0, len(slot_mapping)); tokens may run past it.
  Call Prepare(nb::handle tokens, const std::string& shape, uint32_t chunks, nb::handle kv_layers,
               nb::handle slot_mapping, bool writable) {
    Call c;
    c.tokens = ToTokens(tokens);
    c.slots = ToInt64s(slot_mapping, "slot_mapping");
    if (c.slots.empty() || c.slots.size() > c.tokens.size()) {
      Throw(StatusCode::kInvalidArgument, "slot_mapping has " + std::to_string(c.slots.size()) +
                                              " entries for " + std::to_string(c.tokens.size()) +
                                              " tokens (1..len(tokens) expected)");
    }
    c.naming = Naming(shape, c.slots.size(), chunks);
    c.layers = ToLayers(info_, kv_layers, writable);
    CheckSlots(info_, c.layers.kv, c.slots, c.slots.size(), /*unique=*/writable, "slot_mapping");
    ThrowIfError(engine_internal::MakeLayerViews(info_.geometry, info_.layout->value, c.layers.kv,
                                                 &c.views));
    return c;
  }

 public:
  PyPerObjectStore(std::string dir, uint32_t layers, uint32_t kv_heads, uint32_t head_size,
                   nb::handle dtype, uint32_t block_size, std::string layout, std::string device,
                   uint32_t cuda_device, bool direct_io, uint64_t file_bytes, uint64_t pool_bytes,
                   uint64_t max_tokens, std::string model_id) {
    const DtypeSpec dt = ParseDtype(dtype);
    ModelSpec spec;
    spec.model_id = model_id;
    spec.kv_dtype = dt.canonical;
    spec.dtype_bytes = dt.bytes;
    spec.layers = layers;
    spec.kv_heads = kv_heads;
    spec.head_size = head_size;
    spec.block_size = block_size;
    Result<Geometry> g = DeriveGeometry(spec);
    ThrowIfError(g.status());
    info_.geometry = *g;
    info_.layout = &LayoutByName(layout);
    if (info_.layout->mla) {
      Throw(StatusCode::kInvalidArgument,
            "the per-object model takes a non-MLA layout, got " + layout);
    }
    info_.dtype = dt.canonical;
    if (device != "host" && device != "cuda") {
      Throw(StatusCode::kInvalidArgument, "device must be host or cuda, got \"" + device + "\"");
    }
    info_.cuda = device == "cuda";
    info_.cuda_device = static_cast<int32_t>(cuda_device);
    Result<std::unique_ptr<Device>> dev =
        MakeDevice(info_.cuda ? DeviceKind::kCuda : DeviceKind::kHost, info_.cuda_device);
    ThrowIfError(dev.status());
    device_ = std::move(dev).value();
    baseline::PerObjectOptions po;
    po.dir = dir;
    po.model_name = model_id;
    po.kv_dtype = dt.canonical;
    po.geometry = info_.geometry;
    po.device = device_.get();
    po.direct = direct_io ? DirectIo::kPreferred : DirectIo::kOff;
    po.file_bytes = file_bytes;
    po.pool_bytes = pool_bytes;
    po.max_tokens = max_tokens;
    Result<std::unique_ptr<baseline::PerObjectStore>> s = [&] {
      nb::gil_scoped_release release;
      return baseline::PerObjectStore::Open(po);
    }();
    ThrowIfError(s.status());
    store_ = std::move(s).value();
  }

  ~PyPerObjectStore() { Close(); }

  // Frees the file, the payload pool and the device; later calls raise rangekv.ClosedError.
  void Close() {
    nb::gil_scoped_release release;
    std::lock_guard lock(mu_);
    store_.reset();
    device_.reset();
  }

  // Bytes the objects of a naming of `tokens` path tokens occupy (file and pool).
  uint64_t Footprint(const std::string& shape, uint64_t tokens, uint32_t chunks) {
    const baseline::ObjectNaming naming = Naming(shape, tokens, chunks);
    return WithStore("footprint", [&](baseline::PerObjectStore& store) {
      return baseline::PerObjectStore::FootprintBytes(naming, store.alignment_bytes());
    });
  }

  nb::dict Put(nb::handle tokens, const std::string& shape, uint32_t chunks, nb::handle kv_layers,
               nb::handle slot_mapping) {
    auto [d, r] = Transfer("put", tokens, shape, chunks, kv_layers, slot_mapping,
                           /*writable=*/false, [](baseline::PerObjectStore& s, const Call& c) {
                             return s.Put(c.tokens, c.naming, {c.views, c.slots});
                           });
    d["elapsed_s"] = static_cast<double>(r.elapsed_ns) / 1e9;
    return d;
  }

  nb::dict Get(nb::handle tokens, const std::string& shape, uint32_t chunks, nb::handle kv_layers,
               nb::handle slot_mapping) {
    auto [d, r] = Transfer("get", tokens, shape, chunks, kv_layers, slot_mapping,
                           /*writable=*/true, [](baseline::PerObjectStore& s, const Call& c) {
                             return s.Get(c.tokens, c.naming, {c.views, c.slots});
                           });
    d["first_layer_s"] = static_cast<double>(r.first_layer_ready_ns) / 1e9;
    d["last_layer_s"] = static_cast<double>(r.last_layer_ready_ns) / 1e9;
    return d;
  }

  void Clear() {
    WithStore("clear", [](baseline::PerObjectStore& store) {
      store.Clear();
      return 0;
    });
  }

  std::string Describe() {
    return WithStore("backends", [](baseline::PerObjectStore& store) { return store.Describe(); });
  }

 private:
  EngineInfo info_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<baseline::PerObjectStore> store_;
  std::mutex mu_;
};

}  // namespace
}  // namespace rangekv::py

NB_MODULE(_baseline, m) {
  using rangekv::py::PyPerObjectStore;
  namespace nb = nanobind;
  m.doc() =
      "The per-object model of the stock KV storage path (benchmarks only; private: see "
      "rangekv.bench.ttft_hf).";
  nb::class_<PyPerObjectStore>(m, "PerObjectStore",
                               "One object per chunk (or chunk x layer): one key, one index "
                               "probe, one allocation, one native I/O and one transfer call "
                               "per object. A benchmark model, not a cache.")
      .def(nb::init<std::string, uint32_t, uint32_t, uint32_t, nb::handle, uint32_t, std::string,
                    std::string, uint32_t, bool, uint64_t, uint64_t, uint64_t, std::string>(),
           nb::arg("dir"), nb::kw_only(), nb::arg("layers"), nb::arg("kv_heads"),
           nb::arg("head_size"), nb::arg("dtype"), nb::arg("block_size"),
           nb::arg("layout") = "flash_attn_nhd", nb::arg("device") = "host",
           nb::arg("cuda_device") = 0, nb::arg("direct_io") = true, nb::arg("file_bytes"),
           nb::arg("pool_bytes"), nb::arg("max_tokens"),
           nb::arg("model_id") = "rangekv-per-object-model")
      .def("footprint", &PyPerObjectStore::Footprint, nb::arg("shape"), nb::arg("tokens"),
           nb::arg("chunks"), "Bytes the objects of that naming take in the file and the pool.")
      .def("put", &PyPerObjectStore::Put, nb::arg("tokens"), nb::arg("shape"), nb::arg("chunks"),
           nb::arg("kv_layers"), nb::arg("slot_mapping"),
           "Stores path tokens [0, len(slot_mapping)) as `chunks` objects of `shape`.")
      .def("get", &PyPerObjectStore::Get, nb::arg("tokens"), nb::arg("shape"), nb::arg("chunks"),
           nb::arg("kv_layers"), nb::arg("slot_mapping"),
           "Restores them into kv_layers; returns when every object is delivered.")
      .def("clear", &PyPerObjectStore::Clear, "Forgets every object.")
      .def("close", &PyPerObjectStore::Close, "Frees the file, the pool and the device.")
      .def_prop_ro("backends", &PyPerObjectStore::Describe);
}
