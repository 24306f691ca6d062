// Fuzzes the cluster tier's decoders (remote/manifest.h): DecodeManifest (a pack manifest read
// from the bucket) and DecodeRunEntry (a run entry read from the cluster directory). Both come
// from shared services another node writes, so they are untrusted bytes.
//
// Each input is decoded as given and with its trailing checksum recomputed (so the structural
// checks behind the checksum are reached). Properties: never a crash, an out-of-bounds read or an
// allocation beyond what the input's counts allow (the decoders check counts against the
// remaining bytes first); a successful decode re-encodes to exactly the input bytes (one
// encoding per value), and a decoded manifest's layer offsets lie inside its object.
// Run: remote_manifest_fuzzer -max_total_time=30 CORPUS_DIR   (CI: scripts/test.sh)
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "base/coding.h"
#include "base/digest.h"
#include "remote/manifest.h"
#include "remote/manifest_format.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void TryManifest(std::span<const uint8_t> in) {
  auto m = rangekv::remote::DecodeManifest(in);
  if (!m.ok()) return;
  Check(rangekv::remote::EncodeManifest(*m) == std::vector<uint8_t>(in.begin(), in.end()));
  for (uint32_t l = 0; l < m->geometry.layers; ++l) {
    Check(m->LayerOffset(l) + m->stripe_pitch <= m->object_bytes);
  }
}

void TryRun(std::span<const uint8_t> in) {
  auto e = rangekv::remote::DecodeRunEntry(in);
  if (!e.ok()) return;
  Check(rangekv::remote::EncodeRunEntry(*e) == std::vector<uint8_t>(in.begin(), in.end()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  TryManifest(in);
  TryRun(in);
  if (size >= 16) {
    std::vector<uint8_t> fixed(data, data + size);
    namespace f = rangekv::remote::format;
    rangekv::coding::StoreU64(fixed.data() + size - 8,
                              rangekv::Hash64(fixed.data(), size - 8, f::kManifestChecksumSeed));
    TryManifest(fixed);
    rangekv::coding::StoreU64(fixed.data() + size - 8,
                              rangekv::Hash64(fixed.data(), size - 8, f::kRunChecksumSeed));
    TryRun(fixed);
  }
  return 0;
}
