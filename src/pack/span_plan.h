// Span planning: pack records -> physical byte spans, the unit of native I/O.
//
// A restore names a token range of a prefix path and the pack records (directory entries,
// base/pack_record.h) that hold it; a store names the records it is about to make visible.
// The planners turn those into spans: one span is one byte range [file_offset, file_offset +
// length_bytes) inside ONE stripe (one layer of one pack slot), so length_bytes <= W. Records
// of the same slot and generation whose pack token ranges and path token ranges are both
// adjacent are merged into one span; consecutive layers are never merged (a span never
// crosses a stripe, because each stripe is scattered into its own layer). Hence a plan has
//   (number of physical runs of the token range) x (number of layers)
// spans, where a run is a maximal piece of one pack slot: the plan's size follows bytes and
// partial-boundary fragments, never how many logical objects (chunks, per-layer chunks, TP
// slices) the range was described as. For the paper's 6 GiB prefix of Llama-3.1-8B
// (49,152 tokens in 6 packs, 32 layers) the read plan is 192 spans of 32 MiB, whether the
// records were cut into 1 or 327,680 pieces.
//
// Alignment: native I/O must be aligned (O_DIRECT, GDS), so each span's range is the valid
// payload extent rounded out to `io_alignment_bytes`: start rounded down, end rounded up.
// Every stripe starts on a kIoAlignment boundary (PackLayout's invariant), so rounding never
// leaves the stripe. With s < 4096 (TP slices: s = 512) or s not a power of two (MLA:
// s = 1152) a record may start mid-page; the consumer finds its first valid byte at
// payload_offset_bytes inside the span's buffer.
//   Reads: bytes outside [payload_offset_bytes, +payload_bytes) are read but never used.
//   Writes: a write span always starts at its first valid byte (the planner rejects a write
//   whose start is not aligned, because rounding it down would overwrite the preceding
//   tokens of the same page, which may belong to a visible record). Its end is rounded up:
//   the bytes between the valid end and the rounded end are written as padding (the store
//   bank's contents there; zeros by convention) and are never interpreted, because no
//   record ever covers them until a later store overwrites them with its own aligned start.
//
// Validation happens before any I/O can be issued: every span is checked against the file
// bounds, its stripe, the alignment, the bank size and the slot's current generation, and
// on any failure the planner returns the error and leaves `out` empty (never a partial plan).
//
// Bounds: a plan holds at most options.max_spans spans (kResourceExhausted beyond). Planning
// appends into the caller's vector (reserve it to keep the data path allocation-free) and
// allocates nothing else.
//
// Thread-safety: the planners are pure functions of their arguments; the GenerationView is
// only read. Callers that need the generation check to stay true until I/O completes must
// hold the corresponding leases (directory/) across planning and I/O.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "base/pack_record.h"
#include "pack/pack_layout.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv {

// Path tokens [begin, end).
struct TokenRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Layers [begin, end).
struct LayerRange {
  uint32_t begin = 0;
  uint32_t end = 0;
};

struct Span {
  uint32_t file_index = 0;  // which file of the store (PackLocation::file_index)
  uint32_t layer = 0;
  uint32_t pack_slot = 0;
  uint64_t generation = 0;        // the slot generation the plan was checked against
  uint64_t file_offset = 0;       // aligned start of the native transfer
  uint64_t length_bytes = 0;      // aligned length of the native transfer, <= W
  uint64_t path_token_begin = 0;  // path tokens [path_token_begin, path_token_end) it carries
  uint64_t path_token_end = 0;
  uint64_t pack_token_begin = 0;  // the first of those tokens' offset inside the pack
  // First valid payload byte inside the span's buffer (file_offset maps to buffer byte 0).
  // Always 0 for write spans.
  uint64_t payload_offset_bytes = 0;
  uint64_t payload_bytes = 0;  // (path_token_end - path_token_begin) * s
  // Where the span's buffer begins inside its bank: 0 for read spans (one span per read
  // bank); for write spans, spans are laid out back to back in plan order in one store bank.
  uint64_t bank_offset_bytes = 0;

  uint64_t tokens() const { return path_token_end - path_token_begin; }
  friend bool operator==(const Span&, const Span&) = default;
};

// The current generation of each pack slot, as the caller (the pack store) knows it.
class GenerationView {
 public:
  // Returned for slots that have no readable generation (free, reserved by someone else, or
  // unknown). Never equal to a record's generation, so such a record is reported stale.
  static constexpr uint64_t kNoGeneration = std::numeric_limits<uint64_t>::max();

  virtual ~GenerationView() = default;
  // REQUIRES: slot < the layout's pack count (the planner checks this first).
  virtual uint64_t CurrentGeneration(uint32_t slot) const = 0;
};

// A GenerationView over a table indexed by slot; slots beyond the table have kNoGeneration.
// The table must outlive the view.
class GenerationTable final : public GenerationView {
 public:
  explicit GenerationTable(std::span<const uint64_t> generation_by_slot)
      : table_(generation_by_slot) {}
  uint64_t CurrentGeneration(uint32_t slot) const override {
    return slot < table_.size() ? table_[slot] : kNoGeneration;
  }

 private:
  std::span<const uint64_t> table_;
};

inline constexpr uint64_t kDefaultMaxPlanSpans = 16384;

struct SpanPlanOptions {
  // Read plans: every span must fit one read bank (default W = 32 MiB).
  // Write plans: all spans of the plan (one layer group) must fit one store bank together.
  uint64_t bank_bytes = kDefaultStripeBytes;
  // A power of two in [1, kIoAlignment]; 1 plans exact (unrounded) ranges for buffered I/O.
  uint64_t io_alignment_bytes = kIoAlignment;
  uint64_t max_spans = kDefaultMaxPlanSpans;
  // Read plans only; 0 = off. Each span's read range is first widened, in pack tokens, to
  // whole blocks of read_block_tokens tokens ([floor(a/D)*D, min(ceil(b/D)*D, T)) for valid
  // pack tokens [a, b)), then rounded to the I/O alignment. A payload digest covers a whole
  // block (persist/payload_digests.h), so a restore that starts or ends mid-block (a clipped
  // hit, a skipped local prefix) must read the block whole to check it. The widening stays in
  // the stripe; bytes beyond what the pack stored are read and ignored. payload_offset_bytes
  // and payload_bytes still name exactly the valid tokens. Must be <= T.
  uint64_t read_block_tokens = 0;
};

// Plans the reads that restore path tokens `tokens` of layers `layers`.
//
// `records` must be sorted by path_token_begin and non-overlapping; each must satisfy
// tokens > 0 and pack_token_offset + tokens <= T. Records are clipped to `tokens`; records
// wholly outside it are skipped (but still validated); the clipped records must cover every
// token of `tokens` (no gap). Output: `out` is cleared, then filled layer-major (all spans of
// layers.begin in path order, then the next layer, ...); every layer has the same number of
// spans. Each span satisfies length_bytes <= min(W, options.bank_bytes), bank_offset_bytes 0.
//
// With options.read_block_tokens = D > 0 each span is widened to whole D-token blocks first
// (see SpanPlanOptions); it still never leaves its stripe.
//
// Errors (out left empty):
//   kInvalidArgument   empty or reversed token/layer range, layer beyond L, bad options,
//                      unsorted or overlapping records, a record with 0 tokens or exceeding
//                      T, tokens of the range not covered by any record
//   kOutOfRange        a span beyond the file end (slot >= pack count), or a span larger
//                      than the read bank
//   kStaleGeneration   a record's generation differs from generations.CurrentGeneration
//   kResourceExhausted the plan would exceed options.max_spans
Status PlanReadSpans(const PackLayout& layout, std::span<const PackRecord> records,
                     TokenRange tokens, LayerRange layers, const GenerationView& generations,
                     const SpanPlanOptions& options, std::vector<Span>* out);

// Plans the writes that store `records` (new records of a reserved slot, e.g. one pack of a
// prefix's suffix and its partial tail) for layers `layers` (a layer group), so that the
// group's gathered stripes can be written from one store bank.
//
// `records` must be sorted and non-overlapping as above (gaps between them are allowed), each
// with tokens > 0, pack_token_offset + tokens <= T, and pack_token_offset * s a multiple of
// the I/O alignment. Output: `out` cleared, then filled layer-major; spans start at their first
// valid byte (payload_offset_bytes 0) and end at the valid end rounded up to the alignment
// (see the file comment for the padding); bank_offset_bytes lays the spans out back to back.
//
// Errors (out left empty): as PlanReadSpans, plus kInvalidArgument for an unaligned write
// start, and kOutOfRange when the spans together exceed options.bank_bytes.
Status PlanWriteSpans(const PackLayout& layout, std::span<const PackRecord> records,
                      LayerRange layers, const GenerationView& generations,
                      const SpanPlanOptions& options, std::vector<Span>* out);

}  // namespace rangekv
