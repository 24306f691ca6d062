#include "tools/bench/concurrent_ceiling.h"

#include "base/units.h"
#include "tools/bench/stats.h"

namespace rangekv::tools {

void ConcurrentCeiling::Begin(const RunPlan& p, const std::string& pack_path,
                              uint32_t read_threads) {
  if (p.variant != Variant::kDistinct || (state_ && state_->n == p.n)) return;
  std::vector<CeilingPayload> payloads;
  for (uint32_t i = 0; i < p.prefixes; ++i) payloads.push_back({p.tokens, w_.PrefixSeed(p, i)});
  auto file = CeilingFile::ForPayloads(w_.device(), pack_path, w_.geometry(), payloads,
                                       w_.options().buffered);
  if (!file.ok()) ConcurrentFail("ceiling: " + file.status().ToString());
  State st;
  st.n = p.n;
  st.file = std::move(file).value();
  st.read_threads = read_threads;
  state_ = std::move(st);
  if (w_.options().ceiling_passes == "round") PickCell();
}

// The grid (one verified pass per cell) and its fastest cell.
void ConcurrentCeiling::PickCell() {
  State& st = *state_;
  const ConcurrentOptions& o = w_.options();
  std::vector<uint32_t> threads = {o.ceiling_threads != 0 ? o.ceiling_threads : st.read_threads};
  if (o.ceiling_threads == 0 && st.read_threads != 16) threads.push_back(16);
  const uint32_t n = st.n;
  auto cells = MeasureGrid(
      threads, {0, 4 * kMiB, 1 * kMiB},
      [&](uint32_t t, uint64_t request) -> Result<GridCell> {
        RANGEKV_ASSIGN_OR_RETURN(std::vector<double> gib_s, st.file->Measure(t, request, 0, 1));
        return GridCell{t, request, st.file->payload_bytes(), gib_s.front()};
      },
      [&](const GridCell& c) {
        ConcurrentProgress(o, "N=%u ceiling grid pread: %2u threads x %s: %.2f GiB/s", n, c.threads,
                           c.request_bytes == 0
                               ? "stripe extents"
                               : (std::to_string(c.request_bytes / kMiB) + " MiB").c_str(),
                           c.gib_s);
      });
  if (!cells.ok()) ConcurrentFail("ceiling: " + cells.status().ToString());
  const GridCell* best = BestCell(*cells);
  st.threads = best->threads;
  st.request = best->request_bytes;
  st.config = std::to_string(st.threads) + " threads x " +
              (st.request == 0 ? std::string("stripe extents")
                               : std::to_string(st.request / kMiB) + " MiB requests") +
              ", best of a grid of " + std::to_string(threads.size() * 3);
  ConcurrentProgress(o, "N=%u best ceiling cell: %s", n, st.config.c_str());
}

void ConcurrentCeiling::PassBeforeRound(uint32_t n, uint32_t round) {
  const ConcurrentOptions& o = w_.options();
  if (!state_ || state_->n != n || o.ceiling_passes != "round") return;
  State& st = *state_;
  auto c = st.file->Measure(st.threads, st.request, /*warmups=*/0, /*reps=*/1);
  if (!c.ok()) ConcurrentFail("ceiling: " + c.status().ToString());
  ConcurrentProgress(o, "N=%u ceiling pass before round %u: %.2f GiB/s%s", n, round, c->front(),
                     round < o.warmups ? " (warm-up)" : "");
  if (round >= o.warmups) st.samples.push_back(c->front());
}

void ConcurrentCeiling::KeepStore(const RunPlan& p, std::unique_ptr<ScratchDir> scratch) {
  if (state_ && state_->n == p.n && !state_->scratch) state_->scratch = std::move(scratch);
}

std::optional<ConcurrentCeiling::Measured> ConcurrentCeiling::Finish(uint32_t n) {
  const ConcurrentOptions& o = w_.options();
  std::optional<Measured> out;
  if (state_ && state_->n == n && o.ceiling_passes == "end") {
    PickCell();
    auto c = state_->file->Measure(state_->threads, state_->request, o.warmups, o.reps);
    if (!c.ok()) ConcurrentFail("ceiling: " + c.status().ToString());
    state_->samples = *c;
  }
  if (state_ && state_->n == n && !state_->samples.empty()) {
    out = Measured{Median(state_->samples), state_->config + ", median of " +
                                                std::to_string(state_->samples.size()) + " passes"};
  }
  state_.reset();  // closes the ceiling's file, removes the kept store
  return out;
}

}  // namespace rangekv::tools
