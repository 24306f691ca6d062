#include "pack/span_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "base/units.h"
#include "pack/format.h"

namespace rangekv {
namespace {

Geometry G(const ModelSpec& spec, uint64_t stripe_bytes = kDefaultStripeBytes) {
  auto g = DeriveGeometry(spec, stripe_bytes);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return *g;
}

ModelSpec WithTp(ModelSpec s, uint32_t tp_size) {
  s.tp_size = tp_size;
  s.tp_rank = tp_size - 1;
  return s;
}

ModelSpec Fp8(ModelSpec s) {
  s.dtype_bytes = 1;
  s.kv_dtype = "fp8";
  return s;
}

PackLayout Layout(const Geometry& g, uint64_t packs) {
  auto layout = PackLayout::Make(g, packs, pack_format::kDefaultDataOffset);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  return *layout;
}

// Cuts `physical` records at `chunks` near-equal boundaries of [begin, end): the same bytes,
// described as (at least) `chunks` logical objects.
std::vector<PackRecord> Describe(const std::vector<PackRecord>& physical, uint64_t begin,
                                 uint64_t end, uint64_t chunks) {
  std::vector<uint64_t> cuts;
  for (uint64_t i = 1; i < chunks; ++i) {
    const uint64_t c = begin + (end - begin) * i / chunks;
    if (cuts.empty() || cuts.back() != c) cuts.push_back(c);
  }
  std::vector<PackRecord> out;
  size_t ci = 0;
  for (const PackRecord& r : physical) {
    uint64_t at = r.path_token_begin;
    while (at < r.path_token_end()) {
      while (ci < cuts.size() && cuts[ci] <= at) ++ci;
      const uint64_t next =
          ci < cuts.size() ? std::min(cuts[ci], r.path_token_end()) : r.path_token_end();
      PackRecord piece = r;
      piece.path_token_begin = at;
      piece.pack_token_offset = r.pack_token_offset + (at - r.path_token_begin);
      piece.tokens = next - at;
      out.push_back(piece);
      at = next;
    }
  }
  return out;
}

// Plans layer group by layer group (layers split into `groups` near-equal ranges) and
// concatenates: what a layerwise consumer naming per-layer objects would get.
Status PlanByGroups(const PackLayout& layout, const std::vector<PackRecord>& records,
                    TokenRange tokens, uint32_t groups, const GenerationView& gens,
                    std::vector<Span>* out) {
  out->clear();
  const uint32_t L = layout.geometry().layers;
  std::vector<Span> part;
  SpanPlanOptions o;
  o.max_spans = 1u << 20;
  for (uint32_t i = 0; i < groups; ++i) {
    const LayerRange lr{static_cast<uint32_t>(uint64_t{L} * i / groups),
                        static_cast<uint32_t>(uint64_t{L} * (i + 1) / groups)};
    if (lr.begin == lr.end) continue;
    RANGEKV_RETURN_IF_ERROR(PlanReadSpans(layout, records, tokens, lr, gens, o, &part));
    out->insert(out->end(), part.begin(), part.end());
  }
  return OkStatus();
}

// Independent checks of one read plan: each span is aligned, inside its stripe and the file,
// carries exactly the bytes of its tokens, and per layer the spans tile `tokens` in order.
void CheckReadPlanInvariants(const PackLayout& layout, const std::vector<Span>& plan,
                             TokenRange tokens, LayerRange layers, uint64_t runs_per_layer) {
  const Geometry& g = layout.geometry();
  ASSERT_EQ(plan.size(), runs_per_layer * (layers.end - layers.begin));
  for (size_t i = 0; i < plan.size(); ++i) {
    const Span& s = plan[i];
    SCOPED_TRACE("span " + std::to_string(i));
    ASSERT_EQ(s.layer, layers.begin + i / runs_per_layer);
    const uint64_t stripe = layout.Address(s.pack_slot, s.layer, 0);
    ASSERT_EQ(s.file_offset % kIoAlignment, 0u);
    ASSERT_EQ(s.length_bytes % kIoAlignment, 0u);
    ASSERT_GE(s.file_offset, stripe);
    ASSERT_LE(s.file_offset + s.length_bytes, stripe + g.stripe_bytes);
    ASSERT_LE(s.file_offset + s.length_bytes, layout.file_bytes());
    ASSERT_LE(s.length_bytes, g.stripe_bytes);
    ASSERT_EQ(s.file_offset + s.payload_offset_bytes,
              layout.Address(s.pack_slot, s.layer, s.pack_token_begin));
    ASSERT_EQ(s.payload_bytes, s.tokens() * g.token_bytes);
    ASSERT_LE(s.payload_offset_bytes + s.payload_bytes, s.length_bytes);
    // Rounded out by less than one alignment unit on each side.
    ASSERT_LT(s.payload_offset_bytes, kIoAlignment);
    ASSERT_LT(s.length_bytes - s.payload_offset_bytes - s.payload_bytes, kIoAlignment);
    ASSERT_EQ(s.bank_offset_bytes, 0u);
    const uint64_t expect_begin =
        (i % runs_per_layer == 0) ? tokens.begin : plan[i - 1].path_token_end;
    ASSERT_EQ(s.path_token_begin, expect_begin);
    if (i % runs_per_layer == runs_per_layer - 1) {
      ASSERT_EQ(s.path_token_end, tokens.end);
    }
  }
}

// ---- the paper's running example ----------------------------------------------------------

struct PaperPayload {
  Geometry g = G(Llama31_8BSpec());  // s = 4096, W = 32 MiB, T = 8192, 1 GiB packs
  PackLayout layout = Layout(g, 16);
  std::vector<uint64_t> generations = std::vector<uint64_t>(16, 1);
  std::vector<uint32_t> slots = {4, 0, 7, 2, 15, 9};
  std::vector<PackRecord> physical;  // one record per pack: 6 x 8192 = 49,152 tokens
  PaperPayload() {
    for (size_t i = 0; i < slots.size(); ++i) {
      generations[slots[i]] = 10 + i;
      physical.push_back(PackRecord{slots[i], 10 + i, i * 8192, 0, 8192});
    }
  }
};

TEST(SpanPlan, PaperPrefixIs192StripeReadsOf32MiB) {
  PaperPayload p;
  GenerationTable gens(p.generations);
  std::vector<Span> plan;
  plan.reserve(256);
  ASSERT_TRUE(PlanReadSpans(p.layout, p.physical, {0, 49152}, {0, 32}, gens, {}, &plan).ok());
  ASSERT_EQ(plan.size(), 192u);
  uint64_t total = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Span& s = plan[i];
    const uint32_t layer = static_cast<uint32_t>(i / 6);
    const size_t pack = i % 6;
    EXPECT_EQ(s.layer, layer);
    EXPECT_EQ(s.pack_slot, p.slots[pack]);
    EXPECT_EQ(s.generation, 10 + pack);
    EXPECT_EQ(s.file_index, 0u);
    EXPECT_EQ(s.file_offset, 2 * kMiB + p.slots[pack] * kGiB + layer * 32 * kMiB);
    EXPECT_EQ(s.length_bytes, 32 * kMiB);
    EXPECT_EQ(s.payload_offset_bytes, 0u);
    EXPECT_EQ(s.payload_bytes, 32 * kMiB);
    EXPECT_EQ(s.path_token_begin, pack * 8192);
    EXPECT_EQ(s.path_token_end, (pack + 1) * 8192);
    total += s.length_bytes;
  }
  EXPECT_EQ(total, 6 * kGiB);
  CheckReadPlanInvariants(p.layout, plan, {0, 49152}, {0, 32}, 6);
}

// The defining property: the same 6 GiB named as 1, 192, 6,144 or 327,680 logical objects
// plans to the identical 192 spans.
TEST(SpanPlan, PaperPrefixPlanIsIndependentOfObjectCount) {
  PaperPayload p;
  GenerationTable gens(p.generations);
  std::vector<Span> reference;
  ASSERT_TRUE(PlanByGroups(p.layout, p.physical, {0, 49152}, 1, gens, &reference).ok());
  ASSERT_EQ(reference.size(), 192u);
  struct Naming {
    uint64_t objects, token_chunks;
    uint32_t layer_groups;
  };
  for (const Naming& n :
       {Naming{1, 1, 1}, Naming{192, 192, 1}, Naming{6144, 192, 32}, Naming{327680, 10240, 32}}) {
    SCOPED_TRACE(std::to_string(n.objects) + " objects");
    ASSERT_EQ(n.token_chunks * n.layer_groups, n.objects);
    const std::vector<PackRecord> records = Describe(p.physical, 0, 49152, n.token_chunks);
    // Cutting into chunks never joins packs: at least one record per pack.
    EXPECT_GE(records.size(), std::max<uint64_t>(n.token_chunks, 6));
    std::vector<Span> plan;
    ASSERT_TRUE(PlanByGroups(p.layout, records, {0, 49152}, n.layer_groups, gens, &plan).ok());
    EXPECT_EQ(plan.size(), 192u);
    EXPECT_EQ(plan, reference);
  }
}

// 70B at TP 8 (s = 512, T = 65,536): one rank's 128K-token prefix over 80 layers is 2 packs,
// 160 spans, whether named per rank as 512 x 80 = 40,960 chunk-layers or as 327,680 pieces.
TEST(SpanPlan, TpSliceOf128KTokensIs160SpansForAnyObjectCount) {
  const Geometry g = G(WithTp(Llama31_70BSpec(), 8));
  ASSERT_EQ(g.token_bytes, 512u);
  ASSERT_EQ(g.tokens_per_stripe, 65536u);
  const PackLayout layout = Layout(g, 4);
  std::vector<uint64_t> generations = {0, 3, 0, 8};
  GenerationTable gens(generations);
  const std::vector<PackRecord> physical = {{3, 8, 0, 0, 65536}, {1, 3, 65536, 0, 65536}};
  std::vector<Span> reference;
  ASSERT_TRUE(PlanByGroups(layout, physical, {0, 131072}, 1, gens, &reference).ok());
  CheckReadPlanInvariants(layout, reference, {0, 131072}, {0, 80}, 2);
  for (auto [chunks, groups] : {std::pair<uint64_t, uint32_t>{512, 80}, {4096, 80}}) {
    std::vector<Span> plan;
    ASSERT_TRUE(PlanByGroups(layout, Describe(physical, 0, 131072, chunks), {0, 131072}, groups,
                             gens, &plan)
                    .ok());
    EXPECT_EQ(plan, reference) << chunks * groups << " objects";
  }
}

// ---- seeded random payloads and geometries ------------------------------------------------

struct RandomPayload {
  Geometry g;
  PackLayout layout;
  std::vector<uint64_t> generations;
  std::vector<PackRecord> physical;  // physical runs: no two of them can merge
};

RandomPayload MakeRandomPayload(std::mt19937_64& rng, const Geometry& g) {
  const uint64_t packs = 8;
  RandomPayload p{g, Layout(g, packs), std::vector<uint64_t>(packs), {}};
  for (uint64_t& gen : p.generations) gen = rng() % 1000;
  std::vector<uint32_t> free_slots(packs);
  for (uint32_t i = 0; i < packs; ++i) free_slots[i] = i;
  std::shuffle(free_slots.begin(), free_slots.end(), rng);
  const uint64_t T = g.tokens_per_stripe;
  uint64_t path = rng() % 5000;
  const int placements = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < placements; ++i) {
    PackRecord r;
    const bool reuse = !p.physical.empty() && rng() % 3 == 0 &&
                       p.physical.back().pack_token_offset + p.physical.back().tokens + 1 < T;
    if (reuse) {
      // Same slot, a gap in pack tokens: a second fragment that must stay a separate span
      // even though its aligned range may share a page with the first.
      const PackRecord& prev = p.physical.back();
      r.pack_slot = prev.pack_slot;
      const uint64_t prev_end = prev.pack_token_offset + prev.tokens;
      r.pack_token_offset = prev_end + 1 + rng() % (T - prev_end - 1);
    } else {
      if (free_slots.empty()) break;
      r.pack_slot = free_slots.back();
      free_slots.pop_back();
      r.pack_token_offset = (rng() % 2 == 0) ? 0 : rng() % T;
    }
    const uint64_t room = T - r.pack_token_offset;
    r.tokens = (rng() % 2 == 0) ? room : 1 + rng() % room;
    r.generation = p.generations[r.pack_slot];
    r.path_token_begin = path;
    path += r.tokens;
    p.physical.push_back(r);
  }
  return p;
}

std::vector<Geometry> PropertyGeometries() {
  return {
      G(Llama31_8BSpec()),                        // s = 4096
      G(WithTp(Llama31_8BSpec(), 8)),             // s = 512: records start mid-page
      G(DeepSeekMlaSpec()),                       // s = 1152: T*s < W, unaligned tokens
      G(Fp8(Llama31_8BSpec())),                   // s = 2048
      G(WithTp(Llama31_70BSpec(), 4), 4 * kMiB),  // s = 1024, a small W
      G(DeepSeekMlaSpec(), 1 * kMiB),             // T = 910
  };
}

TEST(SpanPlan, RandomPayloadsPlanIdenticallyUnderAnyObjectNaming) {
  std::mt19937_64 rng(0x52414e4745ull);
  const std::vector<Geometry> geometries = PropertyGeometries();
  for (int iter = 0; iter < 120; ++iter) {
    const Geometry& g = geometries[iter % geometries.size()];
    RandomPayload p = MakeRandomPayload(rng, g);
    GenerationTable gens(p.generations);
    const uint64_t first = p.physical.front().path_token_begin;
    const uint64_t last = p.physical.back().path_token_end();
    // A random clip: a partial hit that starts or ends inside a record.
    TokenRange range{first, last};
    if (rng() % 2 == 0) range.begin = first + rng() % (last - first);
    if (rng() % 2 == 0) range.end = range.begin + 1 + rng() % (last - range.begin);
    uint64_t runs = 0;
    for (const PackRecord& r : p.physical) {
      if (r.path_token_begin < range.end && r.path_token_end() > range.begin) ++runs;
    }
    SCOPED_TRACE("iter " + std::to_string(iter) + " s=" + std::to_string(g.token_bytes) +
                 " tokens [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                 ") runs " + std::to_string(runs));

    std::vector<Span> reference;
    ASSERT_TRUE(PlanByGroups(p.layout, p.physical, range, 1, gens, &reference).ok());
    CheckReadPlanInvariants(p.layout, reference, range, {0, g.layers}, runs);

    const uint64_t tokens = range.end - range.begin;
    for (uint64_t objects : {uint64_t{192}, uint64_t{6144}, uint64_t{327680}}) {
      // The largest naming costs ~1/3 s per iteration in a sanitizer build; sample it.
      if (objects > 6144 && iter % 4 != 0) continue;
      // Split the objects into token chunks x layer groups as evenly as the shape allows.
      const uint32_t groups = static_cast<uint32_t>(std::min<uint64_t>(g.layers, 1 + rng() % 64));
      const uint64_t chunks = std::max<uint64_t>(1, std::min(tokens, objects / groups));
      std::vector<Span> plan;
      ASSERT_TRUE(PlanByGroups(p.layout, Describe(p.physical, range.begin, range.end, chunks),
                               range, groups, gens, &plan)
                      .ok());
      ASSERT_EQ(plan, reference) << objects << " objects as " << chunks << " x " << groups;
    }
  }
}

// ---- partial boundaries -------------------------------------------------------------------

TEST(SpanPlan, TpSliceRecordStartingMidPageIsRoundedOut) {
  const Geometry g = G(WithTp(Llama31_8BSpec(), 8));  // s = 512: 8 tokens per page
  const PackLayout layout = Layout(g, 2);
  std::vector<uint64_t> generations = {5, 5};
  GenerationTable gens(generations);
  // Pack tokens 3..19 of slot 1: bytes [1536, 10240) of each stripe.
  const std::vector<PackRecord> records = {{1, 5, 100, 3, 17}};
  std::vector<Span> plan;
  ASSERT_TRUE(PlanReadSpans(layout, records, {100, 117}, {0, 32}, gens, {}, &plan).ok());
  ASSERT_EQ(plan.size(), 32u);
  for (const Span& s : plan) {
    EXPECT_EQ(s.file_offset, layout.Address(1, s.layer, 0));
    EXPECT_EQ(s.payload_offset_bytes, 1536u);
    EXPECT_EQ(s.payload_bytes, 17u * 512);
    EXPECT_EQ(s.length_bytes, 12288u);  // [0, 10240) rounded up to 3 pages
  }
  // Buffered I/O can ask for the exact bytes instead.
  SpanPlanOptions exact;
  exact.io_alignment_bytes = 1;
  ASSERT_TRUE(PlanReadSpans(layout, records, {100, 117}, {0, 1}, gens, exact, &plan).ok());
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].file_offset, layout.Address(1, 0, 3));
  EXPECT_EQ(plan[0].payload_offset_bytes, 0u);
  EXPECT_EQ(plan[0].length_bytes, 17u * 512);
}

TEST(SpanPlan, MlaStripeTailStaysInsideTheStripe) {
  const Geometry g = G(DeepSeekMlaSpec());  // s = 1152, T = 29127, T*s = W - 128
  ASSERT_EQ(g.tokens_per_stripe, 29127u);
  const PackLayout layout = Layout(g, 2);
  std::vector<uint64_t> generations = {1, 1};
  GenerationTable gens(generations);
  const std::vector<PackRecord> records = {{0, 1, 0, 29000, 127}};
  std::vector<Span> plan;
  ASSERT_TRUE(PlanReadSpans(layout, records, {0, 127}, {60, 61}, gens, {}, &plan).ok());
  ASSERT_EQ(plan.size(), 1u);
  const uint64_t stripe = layout.Address(0, 60, 0);
  EXPECT_EQ(plan[0].file_offset + plan[0].length_bytes, stripe + g.stripe_bytes);
  EXPECT_EQ(plan[0].file_offset, stripe + AlignDown(29000 * 1152, 4096));
  EXPECT_EQ(plan[0].file_offset + plan[0].payload_offset_bytes, stripe + 29000 * 1152);
}

TEST(SpanPlan, AdjacentRecordsMergeButFragmentsStaySeparate) {
  const Geometry g = G(Llama31_8BSpec());
  const PackLayout layout = Layout(g, 4);
  std::vector<uint64_t> generations = {1, 1, 1, 1};
  GenerationTable gens(generations);
  std::vector<Span> plan;
  // Two records continuing each other in slot 2 -> one span per layer.
  const std::vector<PackRecord> adjacent = {{2, 1, 0, 0, 100}, {2, 1, 100, 100, 50}};
  ASSERT_TRUE(PlanReadSpans(layout, adjacent, {0, 150}, {0, 2}, gens, {}, &plan).ok());
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].path_token_end, 150u);
  EXPECT_EQ(plan[0].payload_bytes, 150u * 4096);
  // Path-contiguous but with a gap inside the pack -> two spans per layer.
  const std::vector<PackRecord> gap = {{2, 1, 0, 0, 100}, {2, 1, 100, 101, 50}};
  ASSERT_TRUE(PlanReadSpans(layout, gap, {0, 150}, {0, 2}, gens, {}, &plan).ok());
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(plan[1].pack_token_begin, 101u);
  EXPECT_EQ(plan[2].layer, 1u);
  // Full stripes of consecutive layers of one pack are file-adjacent, yet never merged.
  const std::vector<PackRecord> full = {{0, 1, 0, 0, 8192}};
  ASSERT_TRUE(PlanReadSpans(layout, full, {0, 8192}, {0, 32}, gens, {}, &plan).ok());
  ASSERT_EQ(plan.size(), 32u);
  for (const Span& s : plan) EXPECT_EQ(s.length_bytes, g.stripe_bytes);
}

TEST(SpanPlan, ClipsRecordsToTheRequestedRangeAndSkipsOthers) {
  PaperPayload p;
  GenerationTable gens(p.generations);
  std::vector<Span> plan;
  // A partial hit from token 8000 to 16,500: the end of pack 0, all of pack 1, 116 of pack 2.
  ASSERT_TRUE(PlanReadSpans(p.layout, p.physical, {8000, 16500}, {5, 6}, gens, {}, &plan).ok());
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].pack_token_begin, 8000u);
  EXPECT_EQ(plan[0].length_bytes, 192u * 4096);
  EXPECT_EQ(plan[1].length_bytes, 32 * kMiB);
  EXPECT_EQ(plan[2].path_token_end, 16500u);
  EXPECT_EQ(plan[2].payload_bytes, 116u * 4096);
  CheckReadPlanInvariants(p.layout, plan, {8000, 16500}, {5, 6}, 3);
}

TEST(SpanPlan, ReadBlocksWidenPartialReadsToWholeBlocksInsideTheStripe) {
  PaperPayload p;  // s = 4096, T = 8192
  GenerationTable gens(p.generations);
  SpanPlanOptions o;
  o.read_block_tokens = 256;  // 1 MiB blocks, as the payload digests use
  std::vector<Span> plan;
  // Path tokens [8000, 16500): pack 0 from token 8000 (mid block 31), all of pack 1, pack 2 up
  // to token 116 (mid block 0).
  ASSERT_TRUE(PlanReadSpans(p.layout, p.physical, {8000, 16500}, {5, 7}, gens, o, &plan).ok());
  ASSERT_EQ(plan.size(), 6u);
  for (const Span& s : plan) {
    const uint64_t stripe = p.layout.Address(s.pack_slot, s.layer, 0);
    // The valid tokens are described exactly as without widening.
    EXPECT_EQ(s.file_offset + s.payload_offset_bytes,
              p.layout.Address(s.pack_slot, s.layer, s.pack_token_begin));
    EXPECT_EQ(s.payload_bytes, s.tokens() * 4096);
    EXPECT_LE(s.payload_offset_bytes + s.payload_bytes, s.length_bytes);
    EXPECT_GE(s.file_offset, stripe);
    EXPECT_LE(s.file_offset + s.length_bytes, stripe + p.g.stripe_bytes);
  }
  // Pack 0: block 31 = pack tokens [7936, 8192) whole.
  EXPECT_EQ(plan[0].file_offset, p.layout.Address(p.slots[0], 5, 7936));
  EXPECT_EQ(plan[0].payload_offset_bytes, 64u * 4096);
  EXPECT_EQ(plan[0].length_bytes, 256u * 4096);
  EXPECT_EQ(plan[1].length_bytes, 32 * kMiB);
  // Pack 2: block 0 = pack tokens [0, 256) whole, though only 116 are valid.
  EXPECT_EQ(plan[2].file_offset, p.layout.Address(p.slots[2], 5, 0));
  EXPECT_EQ(plan[2].payload_offset_bytes, 0u);
  EXPECT_EQ(plan[2].length_bytes, 256u * 4096);
  EXPECT_EQ(plan[3].layer, 6u);

  // A block size that does not divide T ends at the stripe's last token, never beyond.
  const Geometry g = G(DeepSeekMlaSpec());  // s = 1152, T = 29127
  const PackLayout layout = Layout(g, 2);
  std::vector<uint64_t> generations = {1, 1};
  GenerationTable mla_gens(generations);
  o.read_block_tokens = 910;  // floor(1 MiB / 1152): block 31 = [28210, 29120), 32 = [29120, ..)
  const std::vector<PackRecord> tail = {{0, 1, 0, 28300, 827}};  // to the stripe's last token
  ASSERT_TRUE(PlanReadSpans(layout, tail, {0, 50}, {3, 4}, mla_gens, o, &plan).ok());
  ASSERT_EQ(plan.size(), 1u);
  const uint64_t stripe = layout.Address(0, 3, 0);
  EXPECT_EQ(plan[0].file_offset, stripe + AlignDown(28210 * 1152, 4096));
  EXPECT_EQ(plan[0].file_offset + plan[0].payload_offset_bytes, stripe + 28300 * 1152);
  EXPECT_EQ(plan[0].payload_bytes, 50u * 1152);
  ASSERT_TRUE(PlanReadSpans(layout, tail, {0, 800}, {3, 4}, mla_gens, o, &plan).ok());
  EXPECT_EQ(plan[0].file_offset + plan[0].length_bytes, stripe + AlignUp(29120 * 1152, 4096));
  // Block 32 would end at 30030 > T: the read ends with the stripe.
  ASSERT_TRUE(PlanReadSpans(layout, tail, {0, 827}, {3, 4}, mla_gens, o, &plan).ok());
  EXPECT_EQ(plan[0].file_offset + plan[0].length_bytes, stripe + g.stripe_bytes);

  // Write plans ignore it; a block larger than a stripe is refused before planning.
  std::vector<PackRecord> fresh = {{1, 1, 0, 0, 100}};
  ASSERT_TRUE(PlanWriteSpans(layout, fresh, {0, 1}, mla_gens, o, &plan).ok());
  EXPECT_EQ(plan[0].length_bytes, AlignUp(100 * 1152, 4096));
  o.read_block_tokens = g.tokens_per_stripe + 1;
  EXPECT_EQ(PlanReadSpans(layout, tail, {0, 50}, {3, 4}, mla_gens, o, &plan).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(plan.empty());
}

// ---- validation: each failure is reported before any I/O, and no partial plan is left ----

class SpanPlanValidation : public ::testing::Test {
 protected:
  Status Plan(const std::vector<PackRecord>& records, TokenRange tokens = {0, 49152},
              LayerRange layers = {0, 32}, SpanPlanOptions o = {}) {
    GenerationTable gens(p_.generations);
    plan_.assign(3, Span{});  // junk that must be cleared
    Status s = PlanReadSpans(p_.layout, records, tokens, layers, gens, o, &plan_);
    if (!s.ok()) {
      EXPECT_TRUE(plan_.empty()) << "partial plan left after " << s.ToString();
    }
    return s;
  }
  PaperPayload p_;
  std::vector<Span> plan_;
};

TEST_F(SpanPlanValidation, SpanBeyondFileEnd) {
  std::vector<PackRecord> r = p_.physical;
  r.back().pack_slot = 16;  // the file has slots 0..15
  EXPECT_EQ(Plan(r).code(), StatusCode::kOutOfRange);
  r.back().pack_slot = ~uint32_t{0};
  EXPECT_EQ(Plan(r).code(), StatusCode::kOutOfRange);
}

TEST_F(SpanPlanValidation, StaleGeneration) {
  std::vector<PackRecord> r = p_.physical;
  r.back().generation -= 1;  // the last record: everything before it planned fine
  EXPECT_EQ(Plan(r).code(), StatusCode::kStaleGeneration);
  // A slot with no readable generation (free or reserved) is stale for every record.
  p_.generations[p_.slots[2]] = GenerationView::kNoGeneration;
  EXPECT_EQ(Plan(p_.physical).code(), StatusCode::kStaleGeneration);
  // Stale records outside the requested range do not matter.
  EXPECT_TRUE(Plan(p_.physical, {0, 8192}).ok());
}

TEST_F(SpanPlanValidation, BankTooSmall) {
  SpanPlanOptions o;
  o.bank_bytes = 16 * kMiB;
  EXPECT_EQ(Plan(p_.physical, {0, 49152}, {0, 32}, o).code(), StatusCode::kOutOfRange);
  // A range whose spans fit the small bank plans fine.
  EXPECT_TRUE(Plan(p_.physical, {0, 4096}, {0, 32}, o).ok());
  o.bank_bytes = 0;
  EXPECT_EQ(Plan(p_.physical, {0, 4096}, {0, 32}, o).code(), StatusCode::kInvalidArgument);
}

TEST_F(SpanPlanValidation, UnsortedOrOverlappingRecords) {
  std::vector<PackRecord> r = p_.physical;
  std::swap(r[2], r[3]);
  EXPECT_EQ(Plan(r).code(), StatusCode::kInvalidArgument);
  r = p_.physical;
  r[3].path_token_begin -= 1;  // overlaps record 2 by one token
  EXPECT_EQ(Plan(r).code(), StatusCode::kInvalidArgument);
}

TEST_F(SpanPlanValidation, RecordExceedingT) {
  std::vector<PackRecord> r = p_.physical;
  r[1].pack_token_offset = 1;  // 1 + 8192 > T
  EXPECT_EQ(Plan(r).code(), StatusCode::kInvalidArgument);
  r = p_.physical;
  r[1].pack_token_offset = ~uint64_t{0};  // would overflow
  EXPECT_EQ(Plan(r).code(), StatusCode::kInvalidArgument);
  r = p_.physical;
  r[1].tokens = 0;
  EXPECT_EQ(Plan(r).code(), StatusCode::kInvalidArgument);
}

TEST_F(SpanPlanValidation, UncoveredTokens) {
  std::vector<PackRecord> r = p_.physical;
  r.erase(r.begin() + 2);  // a hole in the middle
  EXPECT_EQ(Plan(r).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Plan(p_.physical, {0, 49153}).code(), StatusCode::kInvalidArgument);  // past the end
  EXPECT_EQ(Plan({}, {0, 1}).code(), StatusCode::kInvalidArgument);
}

TEST_F(SpanPlanValidation, BadRangesAndOptions) {
  EXPECT_EQ(Plan(p_.physical, {10, 10}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Plan(p_.physical, {10, 5}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Plan(p_.physical, {0, 49152}, {3, 3}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Plan(p_.physical, {0, 49152}, {0, 33}).code(), StatusCode::kInvalidArgument);
  SpanPlanOptions o;
  o.io_alignment_bytes = 3000;
  EXPECT_EQ(Plan(p_.physical, {0, 49152}, {0, 32}, o).code(), StatusCode::kInvalidArgument);
  o.io_alignment_bytes = 8192;
  EXPECT_EQ(Plan(p_.physical, {0, 49152}, {0, 32}, o).code(), StatusCode::kInvalidArgument);
}

TEST_F(SpanPlanValidation, MaxSpansIsEnforced) {
  SpanPlanOptions o;
  o.max_spans = 191;
  EXPECT_EQ(Plan(p_.physical, {0, 49152}, {0, 32}, o).code(), StatusCode::kResourceExhausted);
  o.max_spans = 192;
  EXPECT_TRUE(Plan(p_.physical, {0, 49152}, {0, 32}, o).ok());
  EXPECT_EQ(plan_.size(), 192u);
  o.max_spans = 5;  // fewer than the runs of one layer
  EXPECT_EQ(Plan(p_.physical, {0, 49152}, {0, 1}, o).code(), StatusCode::kResourceExhausted);
}

// ---- store-side planning ------------------------------------------------------------------

// The paper's suffix: 16,128 tokens = one full pack + a 7,936-token tail (31 MiB per layer).
// Groups of 4 layers: 8 spans of <= 32 MiB each fit one 256 MiB store bank; 64 writes total.
TEST(WritePlan, PaperSuffixIs64WritesIn8Groups) {
  const Geometry g = G(Llama31_8BSpec());
  const PackLayout layout = Layout(g, 16);
  std::vector<uint64_t> generations(16, 0);
  generations[7] = 2;
  generations[9] = 4;
  GenerationTable gens(generations);
  const std::vector<PackRecord> records = {{7, 2, 49152, 0, 8192}, {9, 4, 57344, 0, 7936}};
  SpanPlanOptions o;
  o.bank_bytes = 256 * kMiB;
  std::vector<Span> group;
  group.reserve(8);
  uint64_t writes = 0;
  for (uint32_t first = 0; first < 32; first += 4) {
    ASSERT_TRUE(PlanWriteSpans(layout, records, {first, first + 4}, gens, o, &group).ok());
    ASSERT_EQ(group.size(), 8u);
    uint64_t bank = 0;
    for (size_t i = 0; i < group.size(); ++i) {
      const Span& s = group[i];
      EXPECT_EQ(s.layer, first + i / 2);
      EXPECT_EQ(s.file_offset, layout.Address(s.pack_slot, s.layer, 0));
      EXPECT_EQ(s.length_bytes, i % 2 == 0 ? 32 * kMiB : 31 * kMiB);
      EXPECT_EQ(s.payload_bytes, s.length_bytes);
      EXPECT_EQ(s.payload_offset_bytes, 0u);
      EXPECT_EQ(s.bank_offset_bytes, bank);
      bank += s.length_bytes;
    }
    EXPECT_EQ(bank, 252 * kMiB);
    writes += group.size();
  }
  EXPECT_EQ(writes, 64u);
  // A bank that cannot hold the group is refused before any write.
  o.bank_bytes = 252 * kMiB - 4096;
  EXPECT_EQ(PlanWriteSpans(layout, records, {0, 4}, gens, o, &group).code(),
            StatusCode::kOutOfRange);
  EXPECT_TRUE(group.empty());
}

TEST(WritePlan, PartialTailIsRoundedUpToTheAlignment) {
  const Geometry g = G(DeepSeekMlaSpec());  // s = 1152
  const PackLayout layout = Layout(g, 2);
  std::vector<uint64_t> generations = {3, 3};
  GenerationTable gens(generations);
  const std::vector<PackRecord> records = {{1, 3, 0, 0, 100}};  // 115,200 valid bytes
  std::vector<Span> plan;
  ASSERT_TRUE(PlanWriteSpans(layout, records, {0, 61}, gens, {}, &plan).ok());
  ASSERT_EQ(plan.size(), 61u);
  for (const Span& s : plan) {
    EXPECT_EQ(s.payload_bytes, 115200u);
    EXPECT_EQ(s.length_bytes, 118784u);  // 29 pages; 3,584 bytes of padding
    EXPECT_EQ(s.file_offset, layout.Address(1, s.layer, 0));
  }
}

TEST(WritePlan, StartMustBeAlignedSoNeighboursAreNeverOverwritten) {
  const Geometry g = G(WithTp(Llama31_8BSpec(), 8));  // s = 512
  const PackLayout layout = Layout(g, 2);
  std::vector<uint64_t> generations = {1, 1};
  GenerationTable gens(generations);
  std::vector<Span> plan;
  // Token 8 of the pack = byte 4096: an aligned continuation of a pack.
  ASSERT_TRUE(PlanWriteSpans(layout, {{{0, 1, 0, 8, 10}}}, {0, 1}, gens, {}, &plan).ok());
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].file_offset, layout.Address(0, 0, 8));
  // Token 3 = byte 1536: rounding down would clobber tokens 0..2.
  EXPECT_EQ(PlanWriteSpans(layout, {{{0, 1, 0, 3, 10}}}, {0, 1}, gens, {}, &plan).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(plan.empty());
}

TEST(WritePlan, MergesOnlyWhenBothPackAndPathTokensContinue) {
  const Geometry g = G(WithTp(Llama31_8BSpec(), 8));  // s = 512: 8 tokens per page
  const PackLayout layout = Layout(g, 1);
  std::vector<uint64_t> generations = {1};
  GenerationTable gens(generations);
  std::vector<Span> plan;
  // Pack tokens 0..7 then 8..15, path tokens continuing: one span.
  ASSERT_TRUE(
      PlanWriteSpans(layout, {{{0, 1, 0, 0, 8}, {0, 1, 8, 8, 8}}}, {0, 1}, gens, {}, &plan).ok());
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].length_bytes, 8192u);
  // Same pack tokens, but the second piece carries path tokens 100..107: the consumer gathers
  // each span from one contiguous path range, so they must stay two spans.
  ASSERT_TRUE(
      PlanWriteSpans(layout, {{{0, 1, 0, 0, 8}, {0, 1, 100, 8, 8}}}, {0, 1}, gens, {}, &plan).ok());
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[1].path_token_begin, 100u);
  EXPECT_EQ(plan[1].file_offset, layout.Address(0, 0, 8));
  EXPECT_EQ(plan[1].bank_offset_bytes, 4096u);
}

TEST(WritePlan, ValidatesLikeTheReadPlanner) {
  const Geometry g = G(Llama31_8BSpec());
  const PackLayout layout = Layout(g, 2);
  std::vector<uint64_t> generations = {1, 1};
  GenerationTable gens(generations);
  std::vector<Span> plan;
  EXPECT_EQ(PlanWriteSpans(layout, {{{2, 1, 0, 0, 10}}}, {0, 4}, gens, {}, &plan).code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(PlanWriteSpans(layout, {{{1, 0, 0, 0, 10}}}, {0, 4}, gens, {}, &plan).code(),
            StatusCode::kStaleGeneration);
  EXPECT_EQ(PlanWriteSpans(layout, {{{1, 1, 0, 0, 8193}}}, {0, 4}, gens, {}, &plan).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanWriteSpans(layout, {}, {0, 4}, gens, {}, &plan).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanWriteSpans(layout, {{{0, 1, 50, 0, 10}, {1, 1, 0, 0, 10}}}, {0, 4}, gens, {}, &plan)
                .code(),
            StatusCode::kInvalidArgument);  // unsorted
  SpanPlanOptions o;
  o.max_spans = 7;
  EXPECT_EQ(PlanWriteSpans(layout, {{{0, 1, 0, 0, 10}, {1, 1, 10, 0, 10}}}, {0, 4}, gens, o, &plan)
                .code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(plan.empty());
}

}  // namespace
}  // namespace rangekv
