// Shared declarations of the rangekv._core binding (python/src/*.cc).
//
// The binding is thin: it converts and validates Python inputs at the boundary (tokens, slot
// mappings, envelopes, tickets, framework tensors through DLPack), releases the GIL around
// every call that may block, and turns every non-OK rangekv::Status into the rangekv.Error
// subclass of its code (python/rangekv/_errors.py). It includes only the public headers
// (include/rangekv/*.h).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rangekv/engine.h"
#include "rangekv/geometry.h"
#include "rangekv/layout.h"
#include "rangekv/status.h"

namespace rangekv::py {

namespace nb = nanobind;

// ---- errors (errors.cc) --------------------------------------------------------------------

// Raises the rangekv.Error subclass for `status` (REQUIRES: !status.ok(), GIL held).
[[noreturn]] void ThrowStatus(const Status& status);
// Shorthand for ThrowStatus(Status(code, message)).
[[noreturn]] void Throw(StatusCode code, std::string message);
// Raises rangekv.ClosedError.
[[noreturn]] void ThrowClosed(std::string_view what);
// The exception instance for `status` (None when OK), without raising it.
nb::object StatusObject(const Status& status);
inline void ThrowIfError(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

// ---- layouts (layouts.cc) ------------------------------------------------------------------

// How a layer tensor of a layout is shaped. Dimension symbols: '2' the K/V planes, 'N' blocks,
// 'B' block size, 'H' kv heads per rank, 'D' head size, 'P' 2 x head size (K and V packed in
// the last dimension), 'L' the MLA latent size.
struct LayoutInfo {
  std::string_view name;      // the Python name, e.g. "flash_attn_hnd"
  std::string_view physical;  // dims in memory order, outermost first, e.g. "2NHBD"
  std::string_view logical;   // the shape frameworks show, e.g. "2NBHD" (a permutation)
  bool mla = false;           // the layout of an MLA model (one plane, latent)
  KvCacheLayout value;        // the engine's enum value
};

// The layout named `name`; kInvalidArgument listing the names otherwise.
const LayoutInfo& LayoutByName(std::string_view name);
// All layout names (for messages and docs).
std::string LayoutNames();

// ---- what handles need from their engine ---------------------------------------------------

struct EngineInfo {
  Geometry geometry;
  const LayoutInfo* layout = nullptr;
  std::string dtype;  // the canonical kv dtype: bf16, fp16, fp32, fp8_e4m3, fp8_e5m2
  bool cuda = false;  // the engine's device is CUDA (else the host device)
  int32_t cuda_device = 0;
};

// ---- conversions (convert.cc) --------------------------------------------------------------

// The dtype name (str, or torch.dtype / numpy dtype by their str()) -> canonical name and
// element bytes. kInvalidArgument for names it does not know.
struct DtypeSpec {
  std::string canonical;
  uint32_t bytes = 0;
};
DtypeSpec ParseDtype(nb::handle dtype);

// Any 1-D integer sequence: list/tuple of ints, numpy array, torch CPU tensor, any DLPack
// integer vector. `what` names the argument in errors.
std::vector<int32_t> ToTokens(nb::handle obj, std::string_view what = "tokens");
std::vector<int64_t> ToInt64s(nb::handle obj, std::string_view what);

// rangekv.Envelope (or any object with request_id, session_id, attempt, rank attributes), or a
// plain str as the request id.
RequestEnvelope ToEnvelope(nb::handle obj);

// bytes / bytearray / memoryview of bytes -> the ticket's bytes.
std::string ToTicket(nb::handle obj);

// A list of per-layer tensors validated against the engine's geometry, layout, dtype and
// device: the PagedKv to hand the engine and the arrays that keep the memory alive.
struct BoundLayers {
  PagedKv kv;
  std::vector<nb::object> keep;            // the caller's objects
  std::vector<nb::ndarray<nb::ro>> views;  // their imported DLPack views (own the memory)
};
// `writable`: the engine writes into them (restore): read-only arrays are refused and the
// layers must not overlap each other.
BoundLayers ToLayers(const EngineInfo& info, nb::handle kv_layers, bool writable);

// Checks a slot mapping against the layers: length `expected`, every slot in
// [0, num_blocks * block_size), and (`unique`) no slot twice.
void CheckSlots(const EngineInfo& info, const PagedKv& kv, const std::vector<int64_t>& slots,
                uint64_t expected, bool unique, std::string_view what);

// A CUDA stream argument: torch.cuda.Stream (its cuda_stream), an int handle, or an object
// with a `cuda_stream` / `ptr` attribute. 0 is the legacy default stream.
uintptr_t ToNativeStream(nb::handle stream);

// EngineStats as {name: int} in declaration order.
nb::dict StatsDict(const EngineStats& stats);

// ---- registration (engine.cc) -------------------------------------------------------------

void RegisterEngine(nb::module_& m);

}  // namespace rangekv::py
