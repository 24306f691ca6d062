// make_test_store DIR [flip|dirty]: writes a tiny clean store (TinyStore: 2 layers, 128-token
// packs, two prefixes sharing 100 tokens) into DIR for the `rangekv inspect` / `fsck` CLI test.
// "flip" then flips one payload byte of path token 132, layer 1; "dirty" leaves the store
// unclosed (dirty marker present). Test-only.
#include <cstdio>
#include <string>
#include <vector>

#include "persist/persist_test_util.h"

using namespace rangekv;
using namespace rangekv::persist;
using namespace rangekv::persist::testing;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_test_store DIR [flip|dirty]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const std::string mode = argc > 2 ? argv[2] : "";
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "make_test_store: %s\n", s.ToString().c_str());
    return 1;
  };
  if (Status s = DefaultEnv()->CreateDir(dir); !s.ok()) return fail(s);
  Result<TinyStore> store = TinyStore::Open(DefaultEnv(), dir, /*create=*/true);
  if (!store.ok()) return fail(store.status());
  const NamespaceId ns = TinyNamespace();
  std::vector<int32_t> a = Tokens(300, 1000);
  std::vector<int32_t> b = Tokens(200, 1000);
  for (size_t i = 100; i < b.size(); ++i) b[i] = 50000 + static_cast<int32_t>(i);
  if (Status s = store->Store(ns, a); !s.ok()) return fail(s);
  if (Status s = store->Store(ns, b); !s.ok()) return fail(s);
  if (mode == "dirty") return 0;
  if (Status s = store->SaveClean(); !s.ok()) return fail(s);
  if (mode == "flip") {
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
