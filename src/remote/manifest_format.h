// Constants of the cluster tier's two encoded values (docs/scale-out.md "Formats"): the pack
// manifest stored beside each published pack object, and the run entry the cluster directory
// keeps per published run. The codec is manifest.cc (base/coding.h, the one byte codec).
#pragma once

#include <cstdint>

namespace rangekv::remote::format {

// Manifest: "RANGEKVM", u32 version, u32 header_bytes, then fields (docs/scale-out.md).
inline constexpr uint64_t kManifestMagic = 0x4D564B45474E4152ull;  // "RANGEKVM" little-endian
inline constexpr uint32_t kManifestVersion = 1;
inline constexpr uint32_t kManifestHeaderBytes = 16;  // magic + version + header_bytes
inline constexpr uint64_t kManifestChecksumSeed = 0x52616E67654B564Dull;  // "RangeKVM"
// Run entry: "RKVR", u16 version, u16 flags.
inline constexpr uint32_t kRunMagic = 0x52564B52u;  // "RKVR"
inline constexpr uint16_t kRunVersion = 1;
inline constexpr uint64_t kRunChecksumSeed = 0x52616E67654B5652ull;  // "RangeKVR"

// Bounds a decoder checks before it allocates (far beyond real models and packs).
inline constexpr uint32_t kMaxLayers = 4096;
inline constexpr uint64_t kMaxStoredTokens = 1ull << 24;
inline constexpr uint32_t kMaxExtents = 4096;
inline constexpr uint64_t kMaxDigests = 1ull << 24;
inline constexpr uint32_t kMaxObjectIdBytes = 200;
inline constexpr uint64_t kMaxManifestBytes = 256ull << 20;
inline constexpr uint64_t kParentKeyBytes = 32;  // SHA-256

static_assert(kManifestHeaderBytes == 8 + 4 + 4);
static_assert(kMaxStoredTokens * 4 + kMaxDigests * 8 + kMaxExtents * 24 + 1024 <=
              kMaxManifestBytes);

}  // namespace rangekv::remote::format
