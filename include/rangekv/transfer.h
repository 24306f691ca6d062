// The values that cross the Engine API on a transfer: who a request is (RequestEnvelope),
// token intervals, the caller's paged KV (PagedKv) and device streams (DeviceStreamRef), and the
// request / outcome structs of lookup, restore and store (include/rangekv/engine.h takes and
// returns them). Thread-safety: plain values; the spans and pointers they hold are borrowed.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rangekv/geometry.h"
#include "rangekv/layout.h"
#include "rangekv/stats.h"
#include "rangekv/status.h"

namespace rangekv {

// Who a request is. Tickets are bound to it; a claim with another envelope fails kForeignOwner.
struct RequestEnvelope {
  std::string request_id;  // the serving engine's request id: 1..256 bytes
  uint64_t session_id = 0;
  uint32_t attempt = 0;
  uint32_t rank = 0;
  friend bool operator==(const RequestEnvelope&, const RequestEnvelope&) = default;
};

// Path tokens [begin, end).
struct TokenInterval {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
  friend bool operator==(const TokenInterval&, const TokenInterval&) = default;
};

// A pack of the store: its slot and the generation the slot was at when the pack was written
// (a slot reused for a new pack gets a new generation, so the pair names one pack for good).
struct PackId {
  uint32_t slot = 0;
  uint64_t generation = 0;
  friend bool operator==(const PackId&, const PackId&) = default;
};

// A pack and the path tokens it holds (StoreOutcome::packs).
struct PackRange {
  PackId pack;
  TokenInterval tokens;
  friend bool operator==(const PackRange&, const PackRange&) = default;
};

// Tokens that stopped being served because a visible pack left the index (eviction,
// invalidation), as Engine::DrainRemovedRanges reports them: path tokens `tokens` of namespace
// `ns`, held by `pack`. `retired`: the whole pack left (tokens.begin is its first token);
// otherwise it was clipped and keeps serving its head [pack's first token, tokens.begin), whose
// removal is reported later as another range of the same pack.
struct RemovedRange {
  NamespaceId ns;
  PackId pack;
  TokenInterval tokens;
  bool retired = true;
  friend bool operator==(const RemovedRange&, const RemovedRange&) = default;
};

// The destination (restore) or source (store) of a transfer: one device buffer per layer.
// Built by the caller from its framework tensors; the engine never sees framework types.
//   layer_base[l]   address of layer l's tensor in the engine's device memory space (for the
//                   host device: host memory; for CUDA: a device pointer). Each must stay
//                   valid and untouched by the caller in the slots it handed over until the
//                   transfer says so (restore: layer ready / Finish; store: extraction done).
//   num_blocks      blocks per layer tensor
// A slot is block * block_size + offset-in-block, exactly vLLM's slot_mapping convention.
//   strides         unset: every layer is dense in `layout`'s memory order. Set: every layer is
//                   a view with these byte strides (vLLM's cross-layer KV cache, where one
//                   allocation's blocks hold all layers and each layer is a strided view into
//                   it): K's head vector (block b, token t, head h) at layer_base[l] + b*block +
//                   t*token + h*head, V's at the same + plane, head vectors contiguous. Only for
//                   two-plane layouts (not kMla or kCpuBlock); the layers must interleave inside
//                   each block without sharing a byte. Either is refused with kInvalidArgument.
//                   What is stored does not depend on it: a stripe row is K heads then V heads
//                   whatever the paged memory's order.
struct PagedKvStrides {  // bytes, non-negative
  int64_t plane = 0;
  int64_t block = 0;
  int64_t token = 0;
  int64_t head = 0;
};
struct PagedKv {
  KvCacheLayout layout = KvCacheLayout::kFlashAttnNhd;
  uint64_t num_blocks = 0;
  std::vector<void*> layer_base;  // size == geometry().layers
  std::optional<PagedKvStrides> strides;
};

// A stream of the engine's device, as a caller names it: a ref returned by
// Engine::CreateStream() or Engine::WrapNativeStream() (never a raw cudaStream_t). A null ref
// means "no stream" (LayerProduced: the KV is already in memory).
struct DeviceStreamRef {
  void* native = nullptr;
  bool null() const { return native == nullptr; }
};

// ---- restore ----------------------------------------------------------------------------------

struct LookupResult {
  uint64_t hit_tokens = 0;  // reusable prefix, rounded down to the reuse granularity
  std::string ticket;       // serialized ticket; empty when hit_tokens == 0
  uint64_t records_selected = 0;
  bool prefetch_started = false;  // a prefetching restore job now waits for the claim
};

struct RestoreRequest {
  std::string_view ticket;  // bytes from LookupResult::ticket (may have crossed processes)
  RequestEnvelope envelope;
  std::span<const int32_t> tokens;  // the request's prompt tokens (at least endpoint of them)
  // Restore path tokens [begin_token, endpoint_tokens): begin_token > 0 skips tokens the
  // serving engine already holds (its own prefix cache); endpoint_tokens <= the ticket's hit.
  uint64_t begin_token = 0;
  uint64_t endpoint_tokens = 0;
};

struct RestoreOutcome {
  // OK when every requested token was delivered; otherwise the first error seen (kIoError,
  // kShortTransfer, kCorruption, kCancelled, ...), and `failed` names the tokens to recompute.
  Status status;
  TokenInterval requested;
  // Sorted, disjoint, merged: every token for which at least one layer was not delivered.
  // Their destination slots hold nothing the caller may use.
  std::vector<TokenInterval> failed;
  uint64_t delivered_tokens = 0;  // requested.size() minus the tokens in `failed`
  EngineStats work;               // this restore's share of the counters
};

// ---- store ------------------------------------------------------------------------------------

struct StoreRequest {
  RequestEnvelope envelope;
  std::span<const int32_t> tokens;  // the full token path; only the uncached suffix is stored
  const PagedKv* kv = nullptr;      // source of the KV
  // slot_mapping[i] is the slot holding path token i, for every token in `tokens`.
  std::span<const int64_t> slot_mapping;
};

enum class StoreDisposition : uint8_t {
  kStoring,        // new records reserved; this handle drives their writes. Also when an
                   // in-flight store covers only a prefix of the rest: this store then waits for
                   // it (the caller does not block) and reserves and writes the remainder
  kJoined,         // an in-flight store of the same tokens owns them; this one does no I/O
  kAlreadyCached,  // every token is already visible; nothing to do
};

enum class StoreWait : uint8_t {
  kUntilVisible,  // Finish blocks until the records are visible or the store failed
  kDetach,        // Finish returns once extraction is done; writes continue as bounded debt
};

struct StoreOutcome {
  // OK: visible (or joined / already cached). Otherwise the first error (kNoSpace, kIoError,
  // kCancelled when layers were never produced, ...): nothing of this store became visible.
  // Under kDetach: OK means "extracted, writes continue"; GetStats() reports the end.
  Status status;
  StoreDisposition disposition = StoreDisposition::kAlreadyCached;
  TokenInterval stored;  // the suffix this store reserved and wrote (empty unless kStoring)
  // kStoring: the packs this store reserved, in path order (covering `stored`); when the store
  // is visible, each is named again by Engine::DrainRemovedRanges when it leaves the index.
  std::vector<PackRange> packs;
  bool visible = false;
  // Under durability=every_publish with kUntilVisible: the publication is durable (a crash
  // keeps it). When the journal failed the store is visible but not durable and `status`
  // carries the journal's error. False under the other settings (their promise is the
  // window, not a per-store acknowledgement).
  bool durable = false;
  EngineStats work;
};

}  // namespace rangekv
