// make_test_store DIR [flip|dirty|journal|journal-flip]: writes a tiny clean store (TinyStore:
// 2 layers, 128-token packs, two prefixes sharing 100 tokens) into DIR for the `rangekv inspect`
// / `fsck` CLI test. "flip" then flips one payload byte of path token 132, layer 1; "dirty"
// leaves the store unclosed (dirty marker present); "journal" leaves it unclosed with both
// publications in its journal (every_publish), as a SIGKILLed engine would; "journal-flip"
// also flips that byte, in a pack only the journal names. Test-only.
#include <cstdio>
#include <string>
#include <vector>

#include "testing/tiny_store.h"

using namespace rangekv;
using namespace rangekv::persist;
using namespace rangekv::testing;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_test_store DIR [flip|dirty|journal|journal-flip]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const std::string mode = argc > 2 ? argv[2] : "";
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "make_test_store: %s\n", s.ToString().c_str());
    return 1;
  };
  if (Status s = DefaultEnv()->CreateDir(dir); !s.ok()) return fail(s);
  // "journal": the store dies dirty (no clean shutdown) with both publications in its journal
  // only; "journal-flip" also flips a payload byte of the second, journaled pack.
  const bool journaled = mode == "journal" || mode == "journal-flip";
  PersistenceOptions po;
  if (journaled) po.journal.mode = DurabilityMode::kEveryPublish;
  Result<TinyStore> store = TinyStore::Open(DefaultEnv(), dir, /*create=*/true, po);
  if (!store.ok()) return fail(store.status());
  const NamespaceId ns = TinyNamespace();
  std::vector<int32_t> a = Tokens(300, 1000);
  std::vector<int32_t> b = Tokens(200, 1000);
  for (size_t i = 100; i < b.size(); ++i) b[i] = 50000 + static_cast<int32_t>(i);
  if (Status s = store->Store(ns, a); !s.ok()) return fail(s);
  if (Status s = store->Store(ns, b); !s.ok()) return fail(s);
  if (mode == "dirty") return 0;
  if (journaled) {
    // Everything queued is committed; then the process "dies" (no snapshot, marker stays).
    if (Status s = store->index.persistence->journal()->Stop(); !s.ok()) return fail(s);
  } else if (Status s = store->SaveClean(); !s.ok()) {
    return fail(s);
  }
  if (mode == "journal") return 0;
  if (mode == "flip" || mode == "journal-flip") {
    for (const StoredPack& p : store->index.directory->ListPacks(ns)) {
      if (p.record.path_token_begin != 100) continue;
      const uint64_t at = store->pack->Address(p.record.pack_slot, 1, 32);
      uint8_t byte = 0;
      if (!store->pack->file()->ReadAt(at, &byte, 1).ok()) return 1;
      byte ^= 0x01;
      if (!store->pack->file()->WriteAt(at, &byte, 1).ok()) return 1;
    }
  }
  return 0;
}
