// The identity record: `identity.json` in a store directory. It says, readably, what the
// store's namespace was derived from (DeriveNamespace, include/rangekv/geometry.h: model id,
// revision, semantic config, KV dtype, paged layout, TP size and rank, tags; the geometry is
// the pack header's), so `rangekv inspect` can list every namespace's identity fields and
// check them: DeriveNamespace over the record's fields and the header's geometry must give the
// header's namespace, else the record is shown as not matching (stale or edited).
//
// Written by whoever creates or opens the store read-write (the embedded engine, or the store
// service from the identity its client sent at Hello), replaced atomically when absent or
// different. Informational: nothing that serves KV reads it, so a lost or damaged record costs
// only the readable listing. Format: docs/pack-format.md "Identity record".
//
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "persist/store_layout.h"
#include "rangekv/env.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv::persist {

inline constexpr uint32_t kIdentityRecordFormat = 1;
// Bound on a record (the store service's Hello carries it; larger ones are refused there).
inline constexpr uint64_t kMaxIdentityRecordBytes = 256 << 10;

// The record of a store whose namespace is `ns`, derived from `spec`: one JSON object,
//   {"format":1,"namespace":"<32 hex>","model_id":"..","revision":"..","semantic_config":"..",
//    "kv_dtype":"..","layout":"..","tp_size":N,"tp_rank":N,"tags":[".."]}
// with a trailing newline. Strings are JSON-escaped (control characters as \u00XX; bytes >= 0x80
// pass through, so UTF-8 stays UTF-8).
std::string RenderIdentityRecord(const ModelSpec& spec, const NamespaceId& ns);

// Makes `<dir>/identity.json` hold `record` (kept when it does already; else written to
// identity.json.tmp, fsynced, renamed, the directory fsynced). kInvalidArgument when the record
// exceeds kMaxIdentityRecordBytes.
Status WriteIdentityRecord(Env* env, const StorePaths& paths, const std::string& record,
                           uint32_t file_permissions);

// The record's text, or nullopt when the store has none (older stores, or an unreadable one).
std::optional<std::string> ReadIdentityRecord(Env* env, const StorePaths& paths);

}  // namespace rangekv::persist
