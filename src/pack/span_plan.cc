#include "pack/span_plan.h"

#include <algorithm>
#include <string>

#include "base/units.h"

namespace rangekv {
namespace {

enum class PlanKind { kRead, kWrite };

std::string Str(uint64_t v) { return std::to_string(v); }

Status CheckPlanArgs(const PackLayout& layout, LayerRange layers, const SpanPlanOptions& o) {
  if (layers.begin >= layers.end || layers.end > layout.geometry().layers) {
    return InvalidArgument("span plan: layer range [" + Str(layers.begin) + ", " + Str(layers.end) +
                           ") is empty or beyond the " + Str(layout.geometry().layers) + " layers");
  }
  const uint64_t a = o.io_alignment_bytes;
  if (a == 0 || (a & (a - 1)) != 0 || a > kIoAlignment) {
    return InvalidArgument("span plan: I/O alignment " + Str(a) + " is not a power of two in [1, " +
                           Str(kIoAlignment) + "]");
  }
  if (o.bank_bytes == 0) return InvalidArgument("span plan: bank bytes is 0");
  if (o.read_block_tokens > layout.geometry().tokens_per_stripe) {
    return InvalidArgument("span plan: read block of " + Str(o.read_block_tokens) +
                           " tokens exceeds the T=" + Str(layout.geometry().tokens_per_stripe) +
                           " tokens of a stripe");
  }
  return OkStatus();
}

// Checks one record on its own and against its predecessor.
Status CheckRecord(const Geometry& g, std::span<const PackRecord> records, size_t i) {
  const PackRecord& r = records[i];
  if (r.tokens == 0) return InvalidArgument("span plan: record " + Str(i) + " has 0 tokens");
  if (!CheckedAdd(r.path_token_begin, r.tokens)) {
    return InvalidArgument("span plan: record " + Str(i) + " path token range overflows");
  }
  auto pack_end = CheckedAdd(r.pack_token_offset, r.tokens);
  if (!pack_end || *pack_end > g.tokens_per_stripe) {
    return InvalidArgument("span plan: record " + Str(i) + " (pack tokens [" +
                           Str(r.pack_token_offset) + ", +" + Str(r.tokens) +
                           ")) exceeds the T=" + Str(g.tokens_per_stripe) + " tokens of a stripe");
  }
  if (i > 0) {
    const PackRecord& p = records[i - 1];
    if (r.path_token_begin < p.path_token_begin) {
      return InvalidArgument("span plan: records not sorted by path token (record " + Str(i) +
                             " begins at " + Str(r.path_token_begin) + ", record " + Str(i - 1) +
                             " at " + Str(p.path_token_begin) + ")");
    }
    if (r.path_token_begin < p.path_token_end()) {
      return InvalidArgument("span plan: record " + Str(i) + " overlaps record " + Str(i - 1) +
                             " (path token " + Str(r.path_token_begin) + " < " +
                             Str(p.path_token_end()) + ")");
    }
  }
  return OkStatus();
}

// Adds path tokens [b, e) of record `r` to the run list in `out` (spans whose byte fields are
// not yet filled), merging with the previous run when it continues it physically and
// logically.
Status AddRun(const PackLayout& layout, const GenerationView& generations, PlanKind kind,
              const SpanPlanOptions& o, const PackRecord& r, uint64_t b, uint64_t e,
              std::vector<Span>* out) {
  auto location = layout.Locate(r.pack_slot);
  if (!location.ok()) return location.status().WithContext("span plan");
  const uint64_t current = generations.CurrentGeneration(r.pack_slot);
  if (current != r.generation) {
    return Status(
        StatusCode::kStaleGeneration,
        "span plan: pack slot " + Str(r.pack_slot) + " generation " + Str(r.generation) +
            " is stale (current " +
            (current == GenerationView::kNoGeneration ? std::string("none") : Str(current)) + ")");
  }
  const uint64_t pack_b = r.pack_token_offset + (b - r.path_token_begin);
  if (!out->empty()) {
    Span& last = out->back();
    if (last.pack_slot == r.pack_slot && last.generation == r.generation &&
        last.path_token_end == b && last.pack_token_begin + last.tokens() == pack_b) {
      last.path_token_end = e;
      return OkStatus();
    }
  }
  if (kind == PlanKind::kWrite &&
      !IsAligned(pack_b * layout.geometry().token_bytes, o.io_alignment_bytes)) {
    return InvalidArgument("span plan: write of pack slot " + Str(r.pack_slot) +
                           " starts at pack token " + Str(pack_b) + " (byte " +
                           Str(pack_b * layout.geometry().token_bytes) +
                           " of its stripe), not a multiple of the " + Str(o.io_alignment_bytes) +
                           "-byte alignment; rounding down would overwrite preceding tokens");
  }
  if (out->size() >= o.max_spans) {
    return ResourceExhausted("span plan: more than " + Str(o.max_spans) + " spans");
  }
  Span s;
  s.file_index = location->file_index;
  s.pack_slot = r.pack_slot;
  s.generation = r.generation;
  s.path_token_begin = b;
  s.path_token_end = e;
  s.pack_token_begin = pack_b;
  out->push_back(s);
  return OkStatus();
}

// Fills the byte fields of run `s` for layer `layer` and checks the span.
Status FillSpan(const PackLayout& layout, PlanKind kind, const SpanPlanOptions& o, uint32_t layer,
                Span* s) {
  const Geometry& g = layout.geometry();
  const uint64_t a = o.io_alignment_bytes;
  const uint64_t stripe_begin = layout.Address(s->pack_slot, layer, 0);
  const uint64_t stripe_end = stripe_begin + g.stripe_bytes;
  const uint64_t payload_begin = layout.Address(s->pack_slot, layer, s->pack_token_begin);
  const uint64_t payload_bytes = s->tokens() * g.token_bytes;
  // The byte range to transfer before alignment: the valid tokens, or for a read with digest
  // blocks the whole blocks they touch (pack tokens < T, D <= T: no overflow).
  uint64_t extent_begin = payload_begin;
  uint64_t extent_end = payload_begin + payload_bytes;
  if (kind == PlanKind::kRead && o.read_block_tokens > 0) {
    const uint64_t d = o.read_block_tokens;
    const uint64_t first = s->pack_token_begin / d * d;
    const uint64_t last =
        std::min((s->pack_token_begin + s->tokens() + d - 1) / d * d, g.tokens_per_stripe);
    extent_begin = stripe_begin + first * g.token_bytes;
    extent_end = stripe_begin + last * g.token_bytes;
  }
  const uint64_t start = AlignDown(extent_begin, a);
  // Stripes start aligned and W is a multiple of kIoAlignment, so this min never bites; it
  // keeps the "never leaves the stripe" promise local.
  const uint64_t end = std::min(AlignUp(extent_end, a), stripe_end);
  s->layer = layer;
  s->file_offset = start;
  s->length_bytes = end - start;
  s->payload_offset_bytes = payload_begin - start;
  s->payload_bytes = payload_bytes;
  s->bank_offset_bytes = 0;

  // Built only on failure: the success path allocates nothing.
  auto where = [&] {
    return "span plan: layer " + Str(layer) + " of pack slot " + Str(s->pack_slot) + ", bytes [" +
           Str(start) + ", " + Str(end) + ")";
  };
  if (start < stripe_begin || end > stripe_end || end < payload_begin + payload_bytes) {
    return Internal(where() + " leave the stripe [" + Str(stripe_begin) + ", " + Str(stripe_end) +
                    ")");
  }
  if (!IsAligned(start, a) || !IsAligned(end, a)) {
    return Internal(where() + " are not " + Str(a) + "-byte aligned");
  }
  if (start < layout.data_offset() || end > layout.file_bytes()) {
    return OutOfRange(where() + " lie outside the pack region [" + Str(layout.data_offset()) +
                      ", " + Str(layout.file_bytes()) + ") of the file");
  }
  if (kind == PlanKind::kRead && s->length_bytes > o.bank_bytes) {
    return OutOfRange(where() + ": " + Str(s->length_bytes) + " bytes exceed the " +
                      Str(o.bank_bytes) + "-byte read bank");
  }
  return OkStatus();
}

// Turns the run list in `out` (one entry per run, for no layer yet) into the layer-major plan.
Status ExpandLayers(const PackLayout& layout, PlanKind kind, LayerRange layers,
                    const SpanPlanOptions& o, std::vector<Span>* out) {
  const uint64_t runs = out->size();
  const uint64_t layer_count = layers.end - layers.begin;
  auto total = CheckedMul(runs, layer_count);
  if (!total || *total > o.max_spans) {
    return ResourceExhausted("span plan: " + Str(runs) + " runs x " + Str(layer_count) +
                             " layers exceed " + Str(o.max_spans) + " spans");
  }
  out->reserve(*total);
  for (uint32_t layer = layers.begin + 1; layer < layers.end; ++layer) {
    for (uint64_t i = 0; i < runs; ++i) {
      Span s = (*out)[i];
      RANGEKV_RETURN_IF_ERROR(FillSpan(layout, kind, o, layer, &s));
      out->push_back(s);
    }
  }
  for (uint64_t i = 0; i < runs; ++i) {
    RANGEKV_RETURN_IF_ERROR(FillSpan(layout, kind, o, layers.begin, &(*out)[i]));
  }
  if (kind == PlanKind::kWrite) {
    uint64_t bank_offset = 0;
    for (Span& s : *out) {
      s.bank_offset_bytes = bank_offset;
      bank_offset += s.length_bytes;  // <= max_spans * W: cannot overflow
    }
    if (bank_offset > o.bank_bytes) {
      return OutOfRange("span plan: the layer group's " + Str(out->size()) + " spans need " +
                        Str(bank_offset) + " bytes, more than the " + Str(o.bank_bytes) +
                        "-byte store bank");
    }
  }
  return OkStatus();
}

Status PlanRead(const PackLayout& layout, std::span<const PackRecord> records, TokenRange tokens,
                LayerRange layers, const GenerationView& generations, const SpanPlanOptions& o,
                std::vector<Span>* out) {
  RANGEKV_RETURN_IF_ERROR(CheckPlanArgs(layout, layers, o));
  if (tokens.begin >= tokens.end) {
    return InvalidArgument("span plan: token range [" + Str(tokens.begin) + ", " + Str(tokens.end) +
                           ") is empty");
  }
  uint64_t covered_to = tokens.begin;
  for (size_t i = 0; i < records.size(); ++i) {
    RANGEKV_RETURN_IF_ERROR(CheckRecord(layout.geometry(), records, i));
    const PackRecord& r = records[i];
    const uint64_t b = std::max(r.path_token_begin, tokens.begin);
    const uint64_t e = std::min(r.path_token_end(), tokens.end);
    if (b >= e) continue;
    if (b != covered_to) {
      return InvalidArgument("span plan: no record covers path tokens [" + Str(covered_to) + ", " +
                             Str(b) + ")");
    }
    RANGEKV_RETURN_IF_ERROR(AddRun(layout, generations, PlanKind::kRead, o, r, b, e, out));
    covered_to = e;
  }
  if (covered_to != tokens.end) {
    return InvalidArgument("span plan: no record covers path tokens [" + Str(covered_to) + ", " +
                           Str(tokens.end) + ")");
  }
  return ExpandLayers(layout, PlanKind::kRead, layers, o, out);
}

Status PlanWrite(const PackLayout& layout, std::span<const PackRecord> records, LayerRange layers,
                 const GenerationView& generations, const SpanPlanOptions& o,
                 std::vector<Span>* out) {
  RANGEKV_RETURN_IF_ERROR(CheckPlanArgs(layout, layers, o));
  if (records.empty()) return InvalidArgument("span plan: no records to write");
  for (size_t i = 0; i < records.size(); ++i) {
    RANGEKV_RETURN_IF_ERROR(CheckRecord(layout.geometry(), records, i));
    const PackRecord& r = records[i];
    RANGEKV_RETURN_IF_ERROR(AddRun(layout, generations, PlanKind::kWrite, o, r, r.path_token_begin,
                                   r.path_token_end(), out));
  }
  return ExpandLayers(layout, PlanKind::kWrite, layers, o, out);
}

}  // namespace

Status PlanReadSpans(const PackLayout& layout, std::span<const PackRecord> records,
                     TokenRange tokens, LayerRange layers, const GenerationView& generations,
                     const SpanPlanOptions& options, std::vector<Span>* out) {
  out->clear();
  Status s = PlanRead(layout, records, tokens, layers, generations, options, out);
  if (!s.ok()) out->clear();  // never a partial plan
  return s;
}

Status PlanWriteSpans(const PackLayout& layout, std::span<const PackRecord> records,
                      LayerRange layers, const GenerationView& generations,
                      const SpanPlanOptions& options, std::vector<Span>* out) {
  out->clear();
  Status s = PlanWrite(layout, records, layers, generations, options, out);
  if (!s.ok()) out->clear();
  return s;
}

}  // namespace rangekv
