#include "engine/stats.h"

#include <string>

namespace rangekv {

EngineStats operator-(const EngineStats& a, const EngineStats& b) {
  EngineStats d;
#define RANGEKV_STATS_SUB_(name, doc) d.name = a.name - b.name;
  RANGEKV_ENGINE_STATS_FIELDS(RANGEKV_STATS_SUB_)
#undef RANGEKV_STATS_SUB_
  return d;
}

std::string EngineStats::ToJson() const {
  std::string out = "{";
  bool first = true;
#define RANGEKV_STATS_JSON_(name, doc) \
  if (!first) out += ",";              \
  first = false;                       \
  out += "\"" #name "\":";             \
  out += std::to_string(name);
  RANGEKV_ENGINE_STATS_FIELDS(RANGEKV_STATS_JSON_)
#undef RANGEKV_STATS_JSON_
  out += "}";
  return out;
}

namespace engine_internal {

EngineStats Counters::Snapshot() const {
  EngineStats s;
#define RANGEKV_COUNTERS_LOAD_(name, doc) s.name = name.load(std::memory_order_relaxed);
  RANGEKV_ENGINE_STATS_FIELDS(RANGEKV_COUNTERS_LOAD_)
#undef RANGEKV_COUNTERS_LOAD_
  return s;
}

}  // namespace engine_internal
}  // namespace rangekv
