// Golden span-digest vectors shared by the CPU tests and kernels_gpu_test. The digest is
// persisted (snapshot checksums), so these values pin its definition: if one changes, the
// on-disk format changed. Test-only.
#pragma once

#include <cstdint>
#include <vector>

namespace rangekv::kernels {

struct DigestVector {
  uint64_t bytes;
  uint64_t seed;
  uint64_t digest;
};

// The vectors' data: byte i = (i * 131 + 17) ^ (i >> 8), truncated to 8 bits.
inline std::vector<uint8_t> DigestVectorBytes(uint64_t n) {
  std::vector<uint8_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 131 + 17) ^ (i >> 8));
  return v;
}

inline constexpr DigestVector kDigestVectors[] = {
    {0, 0x0000000000000000ull, 0x231B281A059D08A3ull},
    {0, 0x243F6A8885A308D3ull, 0x222B4559D404B548ull},
    {1, 0x0000000000000000ull, 0x0F8836D3F6A5B413ull},
    {1, 0x243F6A8885A308D3ull, 0x8E1AF85801346922ull},
    {7, 0x0000000000000000ull, 0x82A17CC3EFBF746Dull},
    {7, 0x243F6A8885A308D3ull, 0x0167F6D9143962CFull},
    {8, 0x0000000000000000ull, 0x6D8555F6823DC3B2ull},
    {8, 0x243F6A8885A308D3ull, 0x787E7B02A22B1F96ull},
    {9, 0x0000000000000000ull, 0x616EFF9788BE2C70ull},
    {9, 0x243F6A8885A308D3ull, 0x26F79876CE220BF0ull},
    {16, 0x0000000000000000ull, 0x02045224E9DCA503ull},
    {16, 0x243F6A8885A308D3ull, 0x1E8F02F64FC0A8D4ull},
    {17, 0x0000000000000000ull, 0xE6AA2CDE43DFFA5Dull},
    {17, 0x243F6A8885A308D3ull, 0xA592A4493DBEBD6Dull},
    {4096, 0x0000000000000000ull, 0xDEDAEE5ED7BFD983ull},
    {4096, 0x243F6A8885A308D3ull, 0xEE6A629864E310BEull},
    {4099, 0x0000000000000000ull, 0xAFD1DF0844ACFB31ull},
    {4099, 0x243F6A8885A308D3ull, 0x1B66091A472D3BAFull},
    {1048576, 0x0000000000000000ull, 0x1E37A578A4D12F17ull},
    {1048576, 0x243F6A8885A308D3ull, 0x79A0358E2A1727A5ull},
};

}  // namespace rangekv::kernels
