// Boundary conversions and checks: ints, envelopes, tickets, dtypes, streams and per-layer
// tensors (through nanobind's DLPack / buffer-protocol import: torch, numpy, anything exporting
// __dlpack__; no framework is linked).
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "binding.h"
#include "rangekv/build_info.h"

namespace rangekv::py {

namespace {

namespace dl = nb::dlpack;

std::string TypeName(nb::handle obj) {
  return nb::cast<std::string>(
      nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).attr("__name__"));
}

std::string Repr(nb::handle obj) { return nb::cast<std::string>(nb::repr(obj)); }

// A CUDA tensor handed to an engine on the host device: what would make it deliver into GPU
// memory. A build without CUDA kernels needs a reinstall; one with them, a CUDA device.
std::string HostEngineRemedy() {
  if (!GetBuildInfo().has_cuda_kernels()) {
    return ": this rangekv build has no CUDA kernels; " + std::string(kCudaKernelsRemedy);
  }
  return ": open the Engine with device=\"cuda\" (device=\"auto\" takes the host when no GPU "
         "is usable; the log says why)";
}

bool IsSequence(nb::handle obj) { return PyList_Check(obj.ptr()) || PyTuple_Check(obj.ptr()); }

std::string DeviceName(int type, int id) {
  switch (type) {
    case nb::device::cpu::value:
      return "cpu";
    case nb::device::cuda::value:
      return "cuda:" + std::to_string(id);
    case nb::device::cuda_host::value:
      return "cuda_host (pinned cpu)";
    case nb::device::cuda_managed::value:
      return "cuda_managed:" + std::to_string(id);
    default:
      return "device type " + std::to_string(type);
  }
}

bool OnHost(int type) {
  return type == nb::device::cpu::value || type == nb::device::cuda_host::value;
}

std::string DtypeName(dl::dtype t) {
  const auto code = static_cast<dl::dtype_code>(t.code);
  const std::string bits = std::to_string(t.bits);
  switch (code) {
    case dl::dtype_code::Int:
      return "int" + bits;
    case dl::dtype_code::UInt:
      return "uint" + bits;
    case dl::dtype_code::Float:
      return "float" + bits;
    case dl::dtype_code::Bfloat:
      return "bfloat" + bits;
    case dl::dtype_code::Bool:
      return "bool";
    case dl::dtype_code::Float8_E4M3FN:
      return "float8_e4m3fn";
    case dl::dtype_code::Float8_E5M2:
      return "float8_e5m2";
    default:
      return "dtype code " + std::to_string(t.code) + "/" + bits + " bits";
  }
}

// Element (signed) of a 1-D integer array.
int64_t ReadInt(const uint8_t* p, dl::dtype t) {
  const bool is_signed = static_cast<dl::dtype_code>(t.code) == dl::dtype_code::Int;
  switch (t.bits) {
    case 8:
      return is_signed ? int64_t{*reinterpret_cast<const int8_t*>(p)} : int64_t{*p};
    case 16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return is_signed ? int64_t{static_cast<int16_t>(v)} : int64_t{v};
    }
    case 32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return is_signed ? int64_t{static_cast<int32_t>(v)} : int64_t{v};
    }
    default: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;  // uint64 beyond int64 reads negative and fails the range check
    }
  }
}

// Integers of `obj` within [lo, hi], appended by `put`.
template <typename Out>
std::vector<Out> ToInts(nb::handle obj, std::string_view what, int64_t lo, int64_t hi) {
  std::vector<Out> out;
  auto check = [&](int64_t v, size_t i) {
    if (v < lo || v > hi) {
      Throw(StatusCode::kInvalidArgument, std::string(what) + "[" + std::to_string(i) +
                                              "] = " + std::to_string(v) + " does not fit [" +
                                              std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    out.push_back(static_cast<Out>(v));
  };
  nb::ndarray<nb::ro> arr;
  const bool is_array = !IsSequence(obj) && nb::try_cast(obj, arr, /*convert=*/false);
  const bool is_text =
      PyUnicode_Check(obj.ptr()) || PyBytes_Check(obj.ptr()) || PyByteArray_Check(obj.ptr());
  if (!is_array && !is_text && PySequence_Check(obj.ptr())) {  // list, tuple, range, ...
    nb::sequence seq = nb::borrow<nb::sequence>(obj);
    const size_t n = nb::len(seq);
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      nb::object item = seq[i];
      if (!PyLong_Check(item.ptr()) && !PyIndex_Check(item.ptr())) {
        Throw(StatusCode::kInvalidArgument, std::string(what) + "[" + std::to_string(i) +
                                                "] is a " + TypeName(item) + ", not an int");
      }
      int overflow = 0;
      nb::object as_int = nb::steal(PyNumber_Index(item.ptr()));
      if (!as_int.is_valid()) throw nb::python_error();
      const long long v = PyLong_AsLongLongAndOverflow(as_int.ptr(), &overflow);
      if (overflow != 0) {
        Throw(StatusCode::kInvalidArgument,
              std::string(what) + "[" + std::to_string(i) + "] does not fit 64 bits");
      }
      check(v, i);
    }
    return out;
  }
  if (!is_array) {
    Throw(StatusCode::kInvalidArgument,
          std::string(what) +
              " must be a 1-D sequence of ints (list, range, numpy array or "
              "CPU tensor), got " +
              TypeName(obj));
  }
  if (!OnHost(arr.device_type())) {
    Throw(StatusCode::kInvalidArgument, std::string(what) + " is on " +
                                            DeviceName(arr.device_type(), arr.device_id()) +
                                            "; pass a CPU tensor or array (e.g. .cpu())");
  }
  if (arr.ndim() != 1) {
    Throw(StatusCode::kInvalidArgument,
          std::string(what) + " must be 1-D, got " + std::to_string(arr.ndim()) + " dimensions");
  }
  const dl::dtype t = arr.dtype();
  const auto code = static_cast<dl::dtype_code>(t.code);
  if ((code != dl::dtype_code::Int && code != dl::dtype_code::UInt) || t.lanes != 1 ||
      (t.bits != 8 && t.bits != 16 && t.bits != 32 && t.bits != 64)) {
    Throw(StatusCode::kInvalidArgument,
          std::string(what) + " must hold integers, got " + DtypeName(t));
  }
  const size_t n = arr.shape(0);
  out.reserve(n);
  const auto* base = static_cast<const uint8_t*>(arr.data());
  const int64_t stride = arr.stride(0) * static_cast<int64_t>(arr.itemsize());
  for (size_t i = 0; i < n; ++i) {
    const int64_t v = ReadInt(base + static_cast<int64_t>(i) * stride, t);
    if (code == dl::dtype_code::UInt && t.bits == 64 && v < 0) {
      Throw(StatusCode::kInvalidArgument,
            std::string(what) + "[" + std::to_string(i) + "] does not fit 64 bits");
    }
    check(v, i);
  }
  return out;
}

// Whether tensor dtype `t` carries the engine's kv dtype (by kind and element size).
bool DtypeAccepted(const std::string& kv, dl::dtype t) {
  if (t.lanes != 1) return false;
  const auto code = static_cast<dl::dtype_code>(t.code);
  if (kv == "bf16") {
    // numpy has no bfloat16: uint16 is accepted as the raw bits of bf16 values.
    return t.bits == 16 && (code == dl::dtype_code::Bfloat || code == dl::dtype_code::UInt);
  }
  if (kv == "fp16") return t.bits == 16 && code == dl::dtype_code::Float;
  if (kv == "fp32") return t.bits == 32 && code == dl::dtype_code::Float;
  if (kv == "fp8_e4m3" || kv == "fp8_e5m2") {
    // vLLM keeps fp8 caches as uint8 tensors; int8 and the matching float8 type also work.
    if (t.bits != 8) return false;
    if (code == dl::dtype_code::UInt || code == dl::dtype_code::Int) return true;
    if (kv == "fp8_e4m3") {
      return code == dl::dtype_code::Float8_E4M3FN || code == dl::dtype_code::Float8_E4M3 ||
             code == dl::dtype_code::Float8_E4M3FNUZ;
    }
    return code == dl::dtype_code::Float8_E5M2 || code == dl::dtype_code::Float8_E5M2FNUZ;
  }
  return false;
}

std::string AcceptedDtypes(const std::string& kv) {
  if (kv == "bf16") return "bfloat16 (or uint16 holding bf16 bits, e.g. numpy)";
  if (kv == "fp16") return "float16";
  if (kv == "fp32") return "float32";
  if (kv == "fp8_e4m3") return "float8_e4m3fn, uint8 or int8";
  if (kv == "fp8_e5m2") return "float8_e5m2, uint8 or int8";
  return kv;
}

std::string ShapeString(const std::vector<int64_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + (dims.size() == 1 ? ",)" : ")");
}

int64_t DimSize(const Geometry& g, char sym, int64_t n) {
  switch (sym) {
    case '2':
      return 2;
    case 'N':
      return n;
    case 'B':
      return g.block_size;
    case 'H':
      return g.kv_heads_per_rank;
    case 'D':
      return g.head_size;
    case 'P':
      return int64_t{2} * g.head_size;
    case 'L':
      return g.mla_latent_size;
  }
  return -1;
}

// Shape of `order` (dims symbols) with n blocks.
std::vector<int64_t> ShapeOf(const Geometry& g, std::string_view order, int64_t n) {
  std::vector<int64_t> s;
  for (char c : order) s.push_back(DimSize(g, c, n));
  return s;
}

// Strides (elements) of a tensor of `order`'s shape whose memory is dense in `physical` order.
std::vector<int64_t> StridesOf(const Geometry& g, std::string_view physical, std::string_view order,
                               int64_t n) {
  const std::vector<int64_t> phys_shape = ShapeOf(g, physical, n);
  std::vector<int64_t> phys_stride(physical.size());
  int64_t acc = 1;
  for (size_t i = physical.size(); i-- > 0;) {
    phys_stride[i] = acc;
    acc *= phys_shape[i];
  }
  std::vector<int64_t> out;
  for (char c : order) out.push_back(phys_stride[physical.find(c)]);
  return out;
}

// Whether a layout's layers may come as strided views: two planes, not opaque blocks.
bool StridedCapable(const LayoutInfo& layout) {
  return !layout.mla && !IsBlockOpaque(layout.value);
}

// Byte strides of a strided view whose dimensions are named by `logical` ("2NBHD", "N2BHD" or
// "NHBP"), or nullopt when the innermost dimension (a head vector, or K|V of one head) is not
// contiguous or a stride is negative.
std::optional<PagedKvStrides> ExplicitStrides(const std::vector<int64_t>& shape,
                                              const std::vector<int64_t>& strides,
                                              std::string_view logical, int64_t itemsize) {
  PagedKvStrides out;
  for (size_t i = 0; i < logical.size(); ++i) {
    const int64_t st = strides[i];
    if (st < 0) return std::nullopt;
    switch (logical[i]) {
      case '2':
        out.plane = st * itemsize;
        break;
      case 'N':
        out.block = st * itemsize;
        break;
      case 'B':
        out.token = st * itemsize;
        break;
      case 'H':
        out.head = st * itemsize;
        break;
      case 'D':
        if (st != 1 && shape[i] != 1) return std::nullopt;
        break;
      case 'P':  // K|V of one head: K = [:D], V = [D:]
        if (st != 1) return std::nullopt;
        out.plane = shape[i] / 2 * itemsize;
        break;
      default:
        return std::nullopt;
    }
  }
  return out;
}

bool StridesMatch(const std::vector<int64_t>& shape, const std::vector<int64_t>& want,
                  const std::vector<int64_t>& have) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != 1 && want[i] != have[i]) return false;  // size-1 dims have no stride
  }
  return true;
}

}  // namespace

DtypeSpec ParseDtype(nb::handle dtype) {
  std::string name = PyUnicode_Check(dtype.ptr()) ? nb::cast<std::string>(dtype)
                                                  : nb::cast<std::string>(nb::str(dtype));
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name == "bfloat16" || name == "bf16") return {"bf16", 2};
  if (name == "float16" || name == "fp16" || name == "half") return {"fp16", 2};
  if (name == "float32" || name == "fp32" || name == "float") return {"fp32", 4};
  if (name == "fp8" || name == "fp8_e4m3" || name == "float8_e4m3fn") return {"fp8_e4m3", 1};
  if (name == "fp8_e5m2" || name == "float8_e5m2") return {"fp8_e5m2", 1};
  Throw(StatusCode::kInvalidArgument,
        "unknown dtype \"" + name +
            "\"; expected bfloat16/bf16, float16/fp16, float32, fp8 (= fp8_e4m3) or fp8_e5m2, or "
            "a torch.dtype of those");
}

std::vector<int32_t> ToTokens(nb::handle obj, std::string_view what) {
  return ToInts<int32_t>(obj, what, INT32_MIN, INT32_MAX);
}

std::vector<int64_t> ToInt64s(nb::handle obj, std::string_view what) {
  return ToInts<int64_t>(obj, what, INT64_MIN, INT64_MAX);
}

RequestEnvelope ToEnvelope(nb::handle obj) {
  RequestEnvelope env;
  if (PyUnicode_Check(obj.ptr())) {
    env.request_id = nb::cast<std::string>(obj);
    return env;
  }
  if (!nb::hasattr(obj, "request_id")) {
    Throw(StatusCode::kInvalidArgument,
          "envelope must be a rangekv.Envelope (or a request id str), got " + TypeName(obj));
  }
  try {
    env.request_id = nb::cast<std::string>(obj.attr("request_id"));
    env.session_id = nb::cast<uint64_t>(obj.attr("session_id"));
    env.attempt = nb::cast<uint32_t>(obj.attr("attempt"));
    env.rank = nb::cast<uint32_t>(obj.attr("rank"));
  } catch (const nb::cast_error&) {
    Throw(StatusCode::kInvalidArgument,
          "envelope fields: request_id must be a str, session_id a uint64, attempt and rank "
          "uint32 (got " +
              Repr(obj) + ")");
  } catch (const nb::python_error&) {
    Throw(StatusCode::kInvalidArgument, "envelope lacks a field: " + Repr(obj));
  }
  return env;
}

std::string ToTicket(nb::handle obj) {
  if (PyBytes_Check(obj.ptr())) {
    return std::string(PyBytes_AS_STRING(obj.ptr()), PyBytes_GET_SIZE(obj.ptr()));
  }
  if (PyByteArray_Check(obj.ptr())) {
    return std::string(PyByteArray_AS_STRING(obj.ptr()), PyByteArray_GET_SIZE(obj.ptr()));
  }
  if (PyMemoryView_Check(obj.ptr())) {
    nb::object b = nb::steal(PyObject_CallMethod(obj.ptr(), "tobytes", nullptr));
    if (!b.is_valid()) throw nb::python_error();
    return ToTicket(b);
  }
  Throw(StatusCode::kInvalidArgument,
        "ticket must be bytes (as returned by Engine.lookup), got " + TypeName(obj));
}

BoundLayers ToLayers(const EngineInfo& info, nb::handle kv_layers, bool writable) {
  const Geometry& g = info.geometry;
  const LayoutInfo& layout = *info.layout;
  if (!IsSequence(kv_layers)) {
    Throw(StatusCode::kInvalidArgument, "kv_layers must be a list of " + std::to_string(g.layers) +
                                            " tensors (one per layer), got " + TypeName(kv_layers));
  }
  nb::sequence seq = nb::borrow<nb::sequence>(kv_layers);
  const size_t count = nb::len(seq);
  if (count != g.layers) {
    Throw(StatusCode::kGeometryMismatch, "kv_layers has " + std::to_string(count) +
                                             " tensors, the store's model has " +
                                             std::to_string(g.layers) + " layers");
  }
  BoundLayers out;
  out.kv.layout = layout.value;
  out.kv.layer_base.reserve(count);
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;  // [begin, end) per layer
  int64_t blocks = -1;
  for (size_t l = 0; l < count; ++l) {
    nb::object item = seq[l];
    const std::string who = "kv_layers[" + std::to_string(l) + "]";
    nb::ndarray<nb::ro> arr;
    if (!nb::try_cast(item, arr, /*convert=*/false)) {
      Throw(StatusCode::kInvalidArgument,
            who + ": expected a tensor (torch, numpy or any DLPack array), got " + TypeName(item) +
                " (a torch tensor that requires grad must be .detach()ed)");
    }
    if (writable) {
      nb::ndarray<> rw;
      if (!nb::try_cast(item, rw, /*convert=*/false)) {
        Throw(StatusCode::kInvalidArgument, who + " is read-only; a restore writes into it");
      }
    }
    // Device.
    const int dev = arr.device_type();
    const bool dev_ok =
        info.cuda ? (dev == nb::device::cuda::value && arr.device_id() == info.cuda_device)
                  : OnHost(dev);
    if (!dev_ok) {
      Throw(StatusCode::kInvalidArgument,
            who + " is on " + DeviceName(dev, arr.device_id()) + ", the engine's device is " +
                (info.cuda ? "cuda:" + std::to_string(info.cuda_device)
                           : std::string("the host (CPU tensors)")) +
                (!info.cuda && dev == nb::device::cuda::value ? HostEngineRemedy() : ""));
    }
    // Dtype.
    if (!DtypeAccepted(info.dtype, arr.dtype())) {
      Throw(StatusCode::kGeometryMismatch, who + " has dtype " + DtypeName(arr.dtype()) +
                                               ", the store's kv dtype " + info.dtype + " needs " +
                                               AcceptedDtypes(info.dtype));
    }
    // Shape and strides: the physical form, or the logical view over the same memory.
    std::vector<int64_t> shape(arr.ndim()), strides(arr.ndim());
    for (size_t i = 0; i < arr.ndim(); ++i) {
      shape[i] = static_cast<int64_t>(arr.shape(i));
      strides[i] = arr.stride(i);
    }
    const std::string_view phys = layout.physical, logi = layout.logical;
    bool shape_seen = false;
    bool accepted = false;
    int64_t n = -1;
    std::optional<PagedKvStrides> layer_strides;
    for (std::string_view order : {phys, logi}) {
      if (shape.size() != order.size()) continue;
      const int64_t cand_n = shape[order.find('N')];
      if (shape != ShapeOf(g, order, cand_n)) continue;
      shape_seen = true;
      if (StridesMatch(shape, StridesOf(g, phys, order, cand_n), strides)) {
        accepted = true;
        n = cand_n;
        break;
      }
    }
    if (!accepted && shape_seen && StridedCapable(layout)) {
      // Not dense in the layout's order: a strided view (vLLM's cross-layer KV cache). The
      // logical order names each dimension; the engine checks the views for aliasing.
      layer_strides = ExplicitStrides(shape, strides, logi, static_cast<int64_t>(arr.itemsize()));
      if (layer_strides.has_value()) {
        accepted = true;
        n = shape[logi.find('N')];
      }
    }
    if (l > 0 && layer_strides.has_value() != out.kv.strides.has_value()) {
      Throw(StatusCode::kInvalidArgument,
            who + " is " + (layer_strides ? "a strided view" : "dense") + " but kv_layers[0] is " +
                (out.kv.strides ? "a strided view" : "dense") +
                ": every layer needs the same memory order");
    }
    if (layer_strides.has_value()) {
      if (l == 0) {
        out.kv.strides = layer_strides;
      } else if (layer_strides->plane != out.kv.strides->plane ||
                 layer_strides->block != out.kv.strides->block ||
                 layer_strides->token != out.kv.strides->token ||
                 layer_strides->head != out.kv.strides->head) {
        Throw(StatusCode::kInvalidArgument,
              who + " has strides " + ShapeString(strides) +
                  " (elements), other than kv_layers[0]'s: every layer needs the same strides");
      }
    }
    if (!accepted) {
      const int64_t n_hint = shape.size() == phys.size() ? shape[phys.find('N')] : int64_t{-1};
      std::string want = "(" + std::string(phys) + ") = " + ShapeString(ShapeOf(g, phys, n_hint));
      if (logi != phys) {
        want +=
            " or its view (" + std::string(logi) + ") = " + ShapeString(ShapeOf(g, logi, n_hint));
      }
      if (!shape_seen) {
        Throw(StatusCode::kGeometryMismatch,
              who + " has shape " + ShapeString(shape) + "; layout " + std::string(layout.name) +
                  " with this geometry needs " + want + " (N = num_blocks; -1 = any)");
      }
      Throw(StatusCode::kInvalidArgument,
            who + " with shape " + ShapeString(shape) + " has strides " + ShapeString(strides) +
                " (elements): layout " + std::string(layout.name) +
                " needs memory dense in the order (" + std::string(phys) + ")" +
                (StridedCapable(layout)
                     ? " or a strided view of (" + std::string(logi) +
                           ") with the last dimension contiguous and no negative stride"
                     : ", i.e. a contiguous tensor (not a slice or a transposed view)"));
    }
    if (n < 1) Throw(StatusCode::kInvalidArgument, who + " has no blocks");
    if (blocks >= 0 && n != blocks) {
      Throw(StatusCode::kGeometryMismatch, who + " has " + std::to_string(n) +
                                               " blocks, kv_layers[0] has " +
                                               std::to_string(blocks));
    }
    blocks = n;
    auto* base = static_cast<uint8_t*>(const_cast<void*>(arr.data()));
    if (base == nullptr) Throw(StatusCode::kInvalidArgument, who + " has no data");
    ranges.emplace_back(reinterpret_cast<uintptr_t>(base),
                        reinterpret_cast<uintptr_t>(base) + arr.nbytes());
    out.kv.layer_base.push_back(base);
    out.keep.push_back(item);
    out.views.push_back(std::move(arr));
  }
  out.kv.num_blocks = static_cast<uint64_t>(blocks);
  // Strided layers interleave by design (one cross-layer allocation); the engine checks that
  // they share no byte (kernels::CheckStridedLayersDisjoint).
  if (writable && !out.kv.strides.has_value()) {
    std::vector<std::pair<uintptr_t, uintptr_t>> sorted = ranges;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 1; i < sorted.size(); ++i) {
      if (sorted[i].first < sorted[i - 1].second) {
        Throw(StatusCode::kInvalidArgument,
              "kv_layers overlap in memory: a restore needs one distinct tensor per layer");
      }
    }
  }
  return out;
}

void CheckSlots(const EngineInfo& info, const PagedKv& kv, const std::vector<int64_t>& slots,
                uint64_t expected, bool unique, std::string_view what) {
  if (slots.size() != expected) {
    Throw(StatusCode::kInvalidArgument, std::string(what) + " has " + std::to_string(slots.size()) +
                                            " entries, expected " + std::to_string(expected) +
                                            " (one slot per token)");
  }
  const uint64_t num_slots = kv.num_blocks * info.geometry.block_size;
  std::vector<bool> seen(unique ? num_slots : 0);
  // The message is formatted only on failure: a 64K-token restore binds 64K slots, and a
  // string per slot cost ~10 ms of the request's time to first token.
  auto at = [&](size_t i) {
    return std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(slots[i]);
  };
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t s = slots[i];
    if (s < 0) {
      Throw(StatusCode::kInvalidArgument, at(i) + " is negative: every token needs a slot");
    }
    if (static_cast<uint64_t>(s) >= num_slots) {
      Throw(StatusCode::kOutOfRange,
            at(i) + " is outside [0, num_blocks * block_size = " + std::to_string(num_slots) + ")");
    }
    if (unique) {
      if (seen[s]) Throw(StatusCode::kInvalidArgument, at(i) + " repeats an earlier slot");
      seen[s] = true;
    }
  }
}

uintptr_t ToNativeStream(nb::handle stream) {
  nb::handle h = stream;
  nb::object attr;
  if (!PyLong_Check(h.ptr())) {
    if (nb::hasattr(h, "cuda_stream")) {
      attr = h.attr("cuda_stream");  // torch.cuda.Stream
    } else if (nb::hasattr(h, "ptr")) {
      attr = h.attr("ptr");  // cupy
    } else {
      Throw(StatusCode::kInvalidArgument,
            "stream must be a torch.cuda.Stream or an int cudaStream_t handle, got " +
                TypeName(stream));
    }
    h = attr;
  }
  try {
    return nb::cast<uintptr_t>(h);
  } catch (const nb::cast_error&) {
    Throw(StatusCode::kInvalidArgument, "stream handle is not a non-negative int");
  }
}

nb::dict StatsDict(const EngineStats& stats) {
  nb::dict d;
#define RANGEKV_PY_STAT_(name, doc) d[#name] = stats.name;
  RANGEKV_ENGINE_STATS_FIELDS(RANGEKV_PY_STAT_)
#undef RANGEKV_PY_STAT_
  return d;
}

}  // namespace rangekv::py
