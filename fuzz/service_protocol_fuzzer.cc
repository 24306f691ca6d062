// Fuzzes the store service's protocol decoders (service_proto/protocol.h): every message a client
// or the service reads from the Unix socket.
// Properties checked:
// - the frame header decoder and every request and reply body decoder never crash, read out of
//   bounds or allocate beyond what the input's bytes can hold (counts are checked against the
//   bytes left and against their caps before anything is allocated);
// - a request body that decodes re-encodes to exactly the input bytes (one encoding per value).
// Run: service_protocol_fuzzer -max_total_time=30 CORPUS_DIR   (CI: scripts/test.sh)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "service_proto/protocol.h"

namespace {

using namespace rangekv::service;

template <typename M>
void RoundTrip(std::span<const uint8_t> body) {
  M m;
  if (!Decode(body, &m).ok()) return;
  std::vector<uint8_t> again;
  Encode(m, &again);
  if (again.size() != body.size() || !std::equal(again.begin(), again.end(), body.begin())) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  auto header = DecodeHeader(bytes);
  if (header.ok() && size < kHeaderBytes) std::abort();
  if (size == 0) return 0;
  // First byte picks the message; the rest is its body.
  const std::span<const uint8_t> body = bytes.subspan(1);
  switch (data[0] % 20) {
    case 0:
      RoundTrip<HelloRequest>(body);
      break;
    case 1:
      RoundTrip<HelloReply>(body);
      break;
    case 2:
      RoundTrip<LookupRequest>(body);
      break;
    case 3:
      RoundTrip<LookupReply>(body);
      break;
    case 4:
      RoundTrip<ClaimRequest>(body);
      break;
    case 5:
      RoundTrip<ClaimReply>(body);
      break;
    case 6:
      RoundTrip<IdMessage>(body);
      break;
    case 7:
      RoundTrip<CancelRequest>(body);
      break;
    case 8:
      RoundTrip<ReserveRequest>(body);
      break;
    case 9:
      RoundTrip<ReserveReply>(body);
      break;
    case 10:
      RoundTrip<PublishRequest>(body);
      break;
    case 11:
      RoundTrip<PackRef>(body);
      break;
    case 12:
      RoundTrip<DigestsReply>(body);
      break;
    case 13:
      RoundTrip<StatsReply>(body);
      break;
    case 16:
      RoundTrip<AttachQueryBufferRequest>(body);
      break;
    case 17:
      RoundTrip<LookupSharedRequest>(body);
      break;
    case 18:
      RoundTrip<ClaimSharedRequest>(body);
      break;
    case 19:
      RoundTrip<AttachReadGateReply>(body);
      break;
    case 14: {
      rangekv::Status remote;
      std::span<const uint8_t> rest;
      rangekv::Status s = DecodeStatus(body, &remote, &rest);
      s.IgnoreError();
      break;
    }
    default:
      for (uint16_t t = 0; t <= 19; ++t) {
        rangekv::Status s = DecodeRequestBody(t, body);
        s.IgnoreError();
      }
  }
  return 0;
}
