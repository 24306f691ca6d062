#include "testing/tiny_store.h"

#include <string>
#include <vector>

#include "base/check.h"
#include "persist/store_layout.h"

namespace rangekv::testing {

Geometry TinyGeometry() {
  ModelSpec spec;
  spec.model_id = "tiny";
  spec.layers = 2;
  spec.kv_heads = 1;
  spec.head_size = 8;
  spec.dtype_bytes = 2;
  Result<Geometry> g = DeriveGeometry(spec, 4096);
  RANGEKV_CHECK(g.ok());
  return *g;
}

NamespaceId TinyNamespace(uint64_t salt) { return NamespaceId{0xAB00 + salt, 0xCD00 + salt}; }

uint8_t PayloadByte(int32_t v, uint64_t p, uint32_t l, uint64_t k) {
  uint64_t x = static_cast<uint64_t>(static_cast<uint32_t>(v)) * 0x9E3779B97F4A7C15ull;
  x ^= p * 0xC2B2AE3D27D4EB4Full + l * 0x165667B19E3779F9ull + k;
  x ^= x >> 29;
  return static_cast<uint8_t>(x);
}

std::vector<int32_t> Tokens(uint64_t n, int32_t first) {
  std::vector<int32_t> t(n);
  for (uint64_t i = 0; i < n; ++i) t[i] = first + static_cast<int32_t>(i);
  return t;
}

Result<TinyStore> TinyStore::Open(Env* env, const std::string& dir, bool create,
                                  const persist::PersistenceOptions& base_options,
                                  uint32_t pack_count, uint64_t salt) {
  const persist::StorePaths paths(dir);
  TinyStore s;
  if (create) {
    PackCreateOptions co;
    co.data_offset = 4096;
    RANGEKV_ASSIGN_OR_RETURN(PackFile p, PackFile::Create(env, paths.pack(), TinyGeometry(),
                                                          TinyNamespace(salt), pack_count, co));
    s.pack.emplace(std::move(p));
  } else {
    PackExpectation e;
    e.geometry = TinyGeometry();
    RANGEKV_ASSIGN_OR_RETURN(PackFile p, PackFile::Open(env, paths.pack(), e));
    s.pack.emplace(std::move(p));
  }
  persist::PersistenceOptions o = base_options;
  o.directory = DirectoryOptions::ForGeometry(s.pack->geometry(),
                                              static_cast<uint32_t>(s.pack->pack_count()));
  if (o.digest_block_tokens == 0) o.digest_block_tokens = 16;
  RANGEKV_ASSIGN_OR_RETURN(
      s.index,
      persist::OpenIndex(env, dir, *s.pack,
                         create ? persist::PackOrigin::kCreated : persist::PackOrigin::kOpened, o));
  return s;
}

Status TinyStore::Store(const NamespaceId& ns, std::span<const int32_t> tokens) {
  RANGEKV_RETURN_IF_ERROR(index.persistence->MarkDirty());
  Directory& dir = *index.directory;
  persist::DigestTable& digests = *index.digests;
  RANGEKV_ASSIGN_OR_RETURN(Reservation r, dir.Reserve(ns, tokens));
  if (r.outcome != ReserveOutcome::kReserved) return OkStatus();
  const Geometry& g = pack->geometry();
  const persist::DigestGeometry& dg = digests.geometry();
  std::vector<uint8_t> stripe;
  std::vector<uint64_t> d;
  for (const PackRecord& rec : r.records) {
    RANGEKV_RETURN_IF_ERROR(digests.Begin(rec.pack_slot, rec.generation, rec.tokens));
    for (uint32_t l = 0; l < g.layers; ++l) {
      stripe.assign(rec.tokens * g.token_bytes, 0);
      for (uint64_t i = 0; i < rec.tokens; ++i) {
        const uint64_t p = rec.path_token_begin + i;
        for (uint64_t k = 0; k < g.token_bytes; ++k) {
          stripe[i * g.token_bytes + k] = PayloadByte(tokens[p], p, l, k);
        }
      }
      const uint64_t offset = pack->Address(rec.pack_slot, l, rec.pack_token_offset);
      RANGEKV_ASSIGN_OR_RETURN(uint64_t n,
                               pack->file()->WriteAt(offset, stripe.data(), stripe.size()));
      if (n != stripe.size()) return Status(StatusCode::kShortTransfer, "test write");
      d.assign(dg.BlocksFor(rec.tokens), 0);
      RANGEKV_RETURN_IF_ERROR(persist::ComputeLayerDigests(dg, stripe.data(), rec.tokens, d));
      RANGEKV_RETURN_IF_ERROR(digests.RecordLayer(rec.pack_slot, rec.generation, l, d));
    }
    RANGEKV_RETURN_IF_ERROR(digests.CheckComplete(rec.pack_slot, rec.generation));
  }
  return dir.Publish(r.reservation_id);
}

Result<uint64_t> TinyStore::Restore(const NamespaceId& ns, std::span<const int32_t> tokens) {
  Directory& dir = *index.directory;
  const Envelope env{.request_id = "restore", .session = 1, .attempt = 0, .rank = 0};
  RANGEKV_ASSIGN_OR_RETURN(Ticket t, dir.Lookup(ns, tokens, env, 1));
  if (t.empty()) return uint64_t{0};
  RANGEKV_ASSIGN_OR_RETURN(ClaimedRange claimed, dir.Claim(ns, t, env, tokens, t.hit_tokens));
  const Geometry& g = pack->geometry();
  Status result = OkStatus();
  std::vector<uint8_t> buf;
  for (const PackRecord& rec : claimed.records) {
    for (uint32_t l = 0; l < g.layers && result.ok(); ++l) {
      Result<persist::VerifyPlan> plan = index.digests->PlanVerify(
          rec.pack_slot, rec.generation, rec.pack_token_offset, rec.pack_token_offset + rec.tokens);
      if (!plan.ok()) {
        result = plan.status();
        break;
      }
      buf.assign(plan->extent.size() * g.token_bytes, 0);
      const uint64_t offset = pack->Address(rec.pack_slot, l, plan->extent.begin);
      Result<uint64_t> n = pack->file()->ReadAt(offset, buf.data(), buf.size());
      if (!n.ok() || *n != buf.size()) {
        result = n.ok() ? Status(StatusCode::kShortTransfer, "test read") : n.status();
        break;
      }
      result = index.digests->VerifyHostBytes(rec.pack_slot, rec.generation, l, *plan, buf.data(),
                                              buf.size());
      for (uint64_t i = 0; i < rec.tokens && result.ok(); ++i) {
        const uint64_t p = rec.path_token_begin + i;
        const uint64_t at = (rec.pack_token_offset + i - plan->extent.begin) * g.token_bytes;
        for (uint64_t k = 0; k < g.token_bytes; ++k) {
          if (buf[at + k] != PayloadByte(tokens[p], p, l, k)) {
            result = Internal("restored byte differs at path token " + std::to_string(p) +
                              " layer " + std::to_string(l) + " (digest did not catch it)");
            break;
          }
        }
      }
    }
  }
  RANGEKV_RETURN_IF_ERROR(dir.Release(claimed.ticket_id));
  RANGEKV_RETURN_IF_ERROR(result);
  return claimed.endpoint_tokens;
}

Status TinyStore::SaveClean() {
  return index.persistence->SaveClean(*pack, *index.directory, *index.digests);
}

}  // namespace rangekv::testing
