#include "tools/bench/requests.h"

#include "tools/bench/util.h"

namespace rangekv::tools {

Status TimedStore(Engine& engine, const PagedKvSpace& kv, std::span<const int32_t> tokens,
                  const std::string& id, std::optional<uint64_t> expect_begin, RequestTimeline* t) {
  StoreRequest rq;
  rq.envelope = BenchEnvelope(id);
  rq.tokens = tokens;
  rq.kv = &kv.engine_kv();
  rq.slot_mapping = std::span<const int64_t>(kv.slots()).first(tokens.size());
  t->start = NowSeconds();
  RANGEKV_ASSIGN_OR_RETURN(StoreHandle h, engine.BeginStore(rq));
  t->looked_up = t->bound = NowSeconds();
  if (expect_begin.has_value()) {
    if (h.disposition() != StoreDisposition::kStoring) {
      return Internal("store of " + id + " did not reserve new records");
    }
    const TokenInterval stored = h.stored_tokens();
    if (stored.begin != *expect_begin || stored.end != tokens.size()) {
      return Internal("store of " + id + " reserved tokens [" + std::to_string(stored.begin) +
                      ", " + std::to_string(stored.end) + "), expected [" +
                      std::to_string(*expect_begin) + ", " + std::to_string(tokens.size()) + ")");
    }
  }
  for (uint32_t l = 0; l < kv.engine_kv().layer_base.size(); ++l) {
    RANGEKV_RETURN_IF_ERROR(h.LayerProduced(l));
  }
  StoreOutcome out = h.Finish(StoreWait::kUntilVisible);
  t->first = t->last = t->end = NowSeconds();
  RANGEKV_RETURN_IF_ERROR(out.status);
  if (!out.visible) return Internal("store of " + id + " did not become visible");
  return OkStatus();
}

Status TimedRestore(Engine& engine, const PagedKvSpace& kv, std::span<const int32_t> prompt,
                    uint64_t granularity, uint64_t begin, uint64_t end, const std::string& id,
                    bool measure_cpu, RequestTimeline* t) {
  const RequestEnvelope env = BenchEnvelope(id);
  t->start = NowSeconds();
  const double cpu0 = measure_cpu ? ProcessCpuSeconds() : 0;
  RANGEKV_ASSIGN_OR_RETURN(LookupResult lr, engine.Lookup(env, prompt, granularity));
  t->looked_up = NowSeconds();
  if (lr.hit_tokens < end) {
    engine.ReleaseRequest(env);
    return Internal("lookup of " + id + " hit " + std::to_string(lr.hit_tokens) +
                    " tokens, expected " + std::to_string(end));
  }
  RestoreRequest rq;
  rq.ticket = lr.ticket;
  rq.envelope = env;
  rq.tokens = prompt;
  rq.begin_token = begin;
  rq.endpoint_tokens = end;
  RANGEKV_ASSIGN_OR_RETURN(RestoreHandle h, engine.StartRestore(rq));
  RANGEKV_RETURN_IF_ERROR(h.BindSlots(
      kv.engine_kv(), std::span<const int64_t>(kv.slots()).subspan(begin, end - begin)));
  t->bound = NowSeconds();
  const uint32_t layers = static_cast<uint32_t>(kv.engine_kv().layer_base.size());
  for (uint32_t l = 0; l < layers; ++l) {
    RANGEKV_RETURN_IF_ERROR(h.WaitLayer(l));
    if (l == 0) t->first = NowSeconds();
  }
  t->last = NowSeconds();
  if (measure_cpu) t->cpu_s = ProcessCpuSeconds() - cpu0;
  RestoreOutcome out = h.Finish();
  engine.ReleaseRequest(env);
  t->end = NowSeconds();
  RANGEKV_RETURN_IF_ERROR(out.status);
  if (out.delivered_tokens != end - begin) {
    return Internal("restore of " + id + " delivered " + std::to_string(out.delivered_tokens) +
                    " of " + std::to_string(end - begin) + " tokens");
  }
  return OkStatus();
}

}  // namespace rangekv::tools
