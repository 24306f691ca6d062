#include "engine/options.h"

#include <gtest/gtest.h>

#include "base/units.h"

namespace rangekv::engine_internal {
namespace {

Geometry Geometry8B() {
  auto g = DeriveGeometry(Llama31_8BSpec());
  EXPECT_TRUE(g.ok());
  return *g;
}

EngineOptions Base() {
  EngineOptions o;
  o.store_dir = "/tmp/x";
  o.model = Llama31_8BSpec();
  return o;
}

TEST(ResolveOptionsTest, DefaultsAreThePapersOnCuda) {
  auto r = ResolveOptions(Base(), Geometry8B(), /*host_device=*/false, /*usable_cpus=*/16);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tuning.read_banks, 8u);
  EXPECT_EQ(r->tuning.read_bank_bytes, 32 * kMiB);
  EXPECT_EQ(r->tuning.read_workers, 4u);
  EXPECT_EQ(r->tuning.prefetch_banks, 7u);
  EXPECT_EQ(r->tuning.lookahead_layers, 4u);
  EXPECT_EQ(r->tuning.store_banks, 8u);
  EXPECT_EQ(r->tuning.store_bank_bytes, 256 * kMiB);
  EXPECT_EQ(r->tuning.group_workers, 8u);
  EXPECT_EQ(r->tuning.write_workers, 32u);
  EXPECT_EQ(r->tuning.layer_group, 4u);
  EXPECT_EQ(r->tuning.read_io_threads, 0u);  // auto, settled at Open (PlanReadIo)
  EXPECT_EQ(r->tuning.io_split_bytes, kIoSplitFillReads);
  auto packs = PackCountForCapacity(r->capacity_bytes, Geometry8B());
  ASSERT_TRUE(packs.ok());
  EXPECT_EQ(*packs, 16u);
}

// On the host device a gather is CPU work over the device's pool: no more concurrent gathers
// than cores, and groups of 2 so the first writes start sooner. Configured values are kept.
TEST(ResolveOptionsTest, TheStoreShapeFollowsTheHostDevicesCores) {
  auto r = ResolveOptions(Base(), Geometry8B(), /*host_device=*/true, /*usable_cpus=*/2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tuning.group_workers, 2u);
  EXPECT_EQ(r->tuning.layer_group, 2u);
  EXPECT_EQ(r->tuning.store_bank_bytes, 2 * 2 * 32 * kMiB);  // banks follow the resolved group
  r = ResolveOptions(Base(), Geometry8B(), true, 64);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tuning.group_workers, kAutoGroupWorkersCuda);  // never more than on CUDA
  r = ResolveOptions(Base(), Geometry8B(), true, 0);          // unknown CPUs: one worker
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tuning.group_workers, 1u);
  EngineOptions o = Base();
  o.tuning.group_workers = 5;
  o.tuning.layer_group = 3;
  r = ResolveOptions(o, Geometry8B(), true, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tuning.group_workers, 5u);
  EXPECT_EQ(r->tuning.layer_group, 3u);
  EXPECT_EQ(r->tuning.store_bank_bytes, 2 * 3 * 32 * kMiB);
  // A model shallower than the auto group: its layer count.
  ModelSpec shallow = Llama31_8BSpec();
  shallow.layers = 3;
  auto g = DeriveGeometry(shallow);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  r = ResolveOptions(Base(), *g, /*host_device=*/false, 16);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tuning.layer_group, 3u);
  shallow.layers = 1;
  g = DeriveGeometry(shallow);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  r = ResolveOptions(Base(), *g, /*host_device=*/true, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tuning.layer_group, 1u);
}

// The read window is clipped to the model: past its last layer it is the whole model, so the
// default (4) is no reason a shallower model fails.
TEST(ResolveOptionsTest, LookaheadPastTheLastLayerIsTheWholeModel) {
  EngineOptions o = Base();
  o.tuning.lookahead_layers = 33;
  auto r = ResolveOptions(o, Geometry8B());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tuning.lookahead_layers, 32u);
  ModelSpec shallow = Llama31_8BSpec();
  shallow.layers = 2;
  auto g = DeriveGeometry(shallow);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  o = Base();
  o.tuning.layer_group = 2;  // layer_group is checked against the model, not clipped
  r = ResolveOptions(o, *g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tuning.lookahead_layers, 2u);
}

void ExpectBad(EngineOptions o, std::string_view field) {
  auto r = ResolveOptions(o, Geometry8B());
  ASSERT_FALSE(r.ok()) << field;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().ToString();
}

TEST(ResolveOptionsTest, EachBadFieldIsNamed) {
  EngineOptions o = Base();
  o.store_dir = "";
  ExpectBad(o, "store_dir");
  o = Base();
  o.capacity_bytes = 1 * kMiB;
  ExpectBad(o, "capacity_bytes");
  o = Base();
  o.tuning.read_banks = 0;
  ExpectBad(o, "read_banks");
  o = Base();
  o.tuning.read_bank_bytes = 16 * kMiB;  // below W
  ExpectBad(o, "read_bank_bytes");
  o = Base();
  o.tuning.read_bank_bytes = 32 * kMiB + 1;
  ExpectBad(o, "read_bank_bytes");
  o = Base();
  o.tuning.prefetch_banks = 8;
  ExpectBad(o, "prefetch_banks");
  o = Base();
  o.tuning.read_workers = 0;
  ExpectBad(o, "read_workers");
  o = Base();
  o.tuning.store_bank_bytes = 64 * kMiB;  // below 4 stripes
  ExpectBad(o, "store_bank_bytes");
  o = Base();
  o.tuning.layer_group = 9;  // more than a gather takes (0 is auto)
  ExpectBad(o, "layer_group");
  o = Base();
  o.tuning.write_workers = 0;
  ExpectBad(o, "write_workers");
  o = Base();
  o.tuning.max_inflight_restores = 0;
  ExpectBad(o, "max_inflight_restores");
  o = Base();
  o.max_request_tokens = 0;
  ExpectBad(o, "max_request_tokens");
  o = Base();
  o.tuning.read_banks = 1000;
  o.tuning.read_bank_bytes = 1 * kGiB;
  ExpectBad(o, "read_banks");
  o = Base();
  o.tuning.ablations.object_tokens = 0;
  ExpectBad(o, "object_tokens");
  o = Base();
  o.tuning.read_io_threads = 257;
  ExpectBad(o, "read_io_threads");
  o = Base();
  o.tuning.io_split_bytes = 100;
  ExpectBad(o, "io_split_bytes");
  o = Base();
  o.tuning.store_service_spin_us = 10001;
  ExpectBad(o, "store_service_spin_us");
}

TEST(PlanReadIoTest, AutoThreadsFollowTheCoresOnBufferedFilesAndTheWorkersOnDirectOnes) {
  EngineOptions o = Base();  // read_workers 4, read_io_threads auto, split fill_reads
  // The H200 VM: 16 hardware threads, tmpfs (buffered): 16 threads, 1 MiB read pieces.
  ReadIoPlan p = PlanReadIo(o, /*buffered=*/true, 16);
  EXPECT_EQ(p.threads, 16u);
  EXPECT_EQ(p.fill_split_bytes, kFillSplitBytes);
  EXPECT_EQ(p.why, "16 threads (auto: 16 usable CPUs, buffered)");
  // More cores than the cap.
  p = PlanReadIo(o, true, 128);
  EXPECT_EQ(p.threads, kMaxAutoReadIoThreads);
  EXPECT_EQ(p.fill_split_bytes, kFillSplitBytes);
  // The 2-core CPU machine: never fewer threads than read workers, and then no split (the
  // configuration the CPU runs were measured with).
  p = PlanReadIo(o, true, 2);
  EXPECT_EQ(p.threads, 4u);
  EXPECT_EQ(p.fill_split_bytes, 0u);
  p = PlanReadIo(o, true, 0);  // unknown: taken as 1
  EXPECT_EQ(p.threads, 4u);
  EXPECT_EQ(p.fill_split_bytes, 0u);
  // O_DIRECT: four threads per read worker and 1 MiB pieces, whatever the cores.
  for (uint32_t cores : {2u, 16u, 128u}) {
    p = PlanReadIo(o, /*buffered=*/false, cores);
    EXPECT_EQ(p.threads, 16u) << cores;
    EXPECT_EQ(p.fill_split_bytes, uint64_t{1} << 20) << cores;
    EXPECT_EQ(p.why, "16 threads (auto: 4 x read_workers, O_DIRECT)");
  }
  o.tuning.read_workers = 24;  // more workers than the cap: the workers
  p = PlanReadIo(o, true, 16);
  EXPECT_EQ(p.threads, 24u);
  EXPECT_EQ(p.fill_split_bytes, 0u);
}

TEST(PlanReadIoTest, TheNodesReadSlotsAreWhatOneDefaultEngineKeepsInFlight) {
  EXPECT_TRUE(
      EngineOptions{}.tuning.read_gate);  // engines pass a service's gate unless told not to
  // The dev VM (2 CPUs): O_DIRECT's 4 x 4 threads; the 16-CPU GPU hosts: 16 either way; a big
  // host: the buffered cap (also 16). Never fewer than one default engine's O_DIRECT threads.
  for (uint32_t cpus : {0u, 1u, 2u, 16u, 128u}) {
    EXPECT_EQ(NodeReadSlots(cpus), 16u) << cpus;
  }
  EXPECT_EQ(NodeReadSlots(16), PlanReadIo(EngineOptions{}, /*buffered=*/true, 16).threads);
}

TEST(PlanReadIoTest, ConfiguredThreadsAndOtherSplitsAreKept) {
  EngineOptions o = Base();
  o.tuning.read_io_threads = 8;
  ReadIoPlan p = PlanReadIo(o, /*buffered=*/false, 16);
  EXPECT_EQ(p.threads, 8u);
  EXPECT_EQ(p.why, "8 threads (configured)");
  EXPECT_EQ(p.fill_split_bytes, kFillSplitBytesDirect);  // configured threads fill too
  p = PlanReadIo(o, true, 2);
  EXPECT_EQ(p.threads, 8u);
  EXPECT_EQ(p.fill_split_bytes, kFillSplitBytes);
  o.tuning.read_io_threads = 4;  // no more threads than workers: nothing to fill
  EXPECT_EQ(PlanReadIo(o, true, 16).fill_split_bytes, 0u);
  EXPECT_EQ(PlanReadIo(o, false, 16).fill_split_bytes, 0u);
  // Only fill_reads derives a split; off, auto and sizes are the caller's (ResolveIoSplit).
  o.tuning.read_io_threads = 16;
  for (uint64_t split : {kIoSplitOff, kIoSplitAuto, uint64_t{4} << 20}) {
    o.tuning.io_split_bytes = split;
    EXPECT_EQ(PlanReadIo(o, true, 16).fill_split_bytes, 0u) << split;
    EXPECT_EQ(PlanReadIo(o, true, 16).threads, 16u);
  }
}

TEST(AblationsTest, SetAndToStringRoundTrip) {
  Ablations a;
  EXPECT_EQ(a.ToString(),
            "index=tree,read_issue=stripe,delivery=layer,prefetch=lookup,object_tokens=256,"
            "objects=chunk");
  ASSERT_TRUE(a.Set("index=scalar").ok());
  ASSERT_TRUE(a.Set("read_issue=object").ok());
  ASSERT_TRUE(a.Set("delivery=barrier").ok());
  ASSERT_TRUE(a.Set("prefetch=dispatch").ok());
  ASSERT_TRUE(a.Set("object_tokens=64").ok());
  ASSERT_TRUE(a.Set("objects=chunk_layer").ok());
  EXPECT_EQ(a.ToString(),
            "index=scalar,read_issue=object,delivery=barrier,prefetch=dispatch,object_tokens=64,"
            "objects=chunk_layer");
  EXPECT_EQ(a.Set("index=hash").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Set("colour=red").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Set("noequals").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Set("object_tokens=0").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Set("object_tokens=12x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.index, Ablations::Index::kScalar);  // failed sets change nothing
}

TEST(DurabilityTest, ParsesEverySettingAndRefusesTheRest) {
  Durability d;
  EXPECT_EQ(d.ToString(), "periodic:200");  // the default
  ASSERT_TRUE(d.Set("every_publish").ok());
  EXPECT_EQ(d.mode, Durability::Mode::kEveryPublish);
  EXPECT_EQ(d.ToString(), "every_publish");
  ASSERT_TRUE(d.Set("periodic:50").ok());
  EXPECT_EQ(d.mode, Durability::Mode::kPeriodic);
  EXPECT_EQ(d.period_ms, 50u);
  EXPECT_EQ(d.ToString(), "periodic:50");
  ASSERT_TRUE(d.Set("none").ok());
  EXPECT_EQ(d.ToString(), "none");
  ASSERT_TRUE(d.Set("periodic").ok());
  EXPECT_EQ(d.ToString(), "periodic:200");
  for (const char* bad : {"", "always", "periodic:", "periodic:0", "periodic:60001", "periodic:5x",
                          "periodic:-1", "every-publish"}) {
    const Durability before = d;
    EXPECT_EQ(d.Set(bad).code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(d, before) << bad;  // a failed call changes nothing
  }
  d.checkpoint_interval_ms = 5000;
  ASSERT_TRUE(d.Set("every_publish").ok());
  EXPECT_EQ(d.checkpoint_interval_ms, 5000u);  // Set names the mode only
}

TEST(DurabilityTest, CheckpointIntervalIsBoundedToADay) {
  EngineOptions o = Base();
  o.durability.checkpoint_interval_ms = 0;  // off
  EXPECT_TRUE(ResolveOptions(o, Geometry8B()).ok());
  o.durability.checkpoint_interval_ms = 86'400'000;
  EXPECT_TRUE(ResolveOptions(o, Geometry8B()).ok());
  o.durability.checkpoint_interval_ms = 86'400'001;
  ExpectBad(o, "durability.checkpoint_interval_ms");
}

TEST(EngineStatsTest, DifferenceAndJson) {
  EngineStats a, b;
  a.native_reads = 200;
  b.native_reads = 8;
  a.ready_events = 32;
  EngineStats d = a - b;
  EXPECT_EQ(d.native_reads, 192u);
  EXPECT_EQ(d.ready_events, 32u);
  const std::string json = d.ToJson();
  EXPECT_EQ(json.rfind("{\"lookups\":0,", 0), 0u) << json;
  EXPECT_NE(json.find("\"native_reads\":192"), std::string::npos);
  EXPECT_EQ(json.back(), '}');
}

}  // namespace
}  // namespace rangekv::engine_internal
