// Shapes shared by service_test and service_client_driver: the model, the client options,
// each client's prefix (a head all clients share plus a tail of their own), and a raw session.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "service_proto/protocol.h"
#include "service_proto/unix_socket.h"
#include "testing/engine_fixture.h"

namespace rangekv::testing {

// 4 layers, 2 heads x 16 x bf16: s = 128 bytes; W = 8 KiB: T = 64 tokens per stripe.
inline constexpr uint64_t kW = 8192;
inline constexpr uint64_t kT = 64;
inline constexpr uint64_t kSeed = 11;
inline constexpr uint64_t kGranularity = 16;
inline constexpr uint64_t kPacks = 32;

inline ModelSpec Model() { return testing::SmallModel(4, 2, 16); }

inline EngineOptions ClientOptions(const std::string& socket,
                                   const std::string& tenant = "default") {
  EngineOptions o = testing::SmallOptions("", Model(), kW, kPacks);
  o.store_service = "unix://" + socket;
  o.tenant = tenant;
  return o;
}

// Client c's prefix: 3 packs + 10 tokens shared by every client, then 2 packs + 5 of its own.
inline std::vector<int32_t> ClientTokens(int client) {
  std::vector<int32_t> t = testing::RandomTokens(3 * kT + 10, 1000);
  const auto tail = testing::RandomTokens(2 * kT + 5, 2000 + client);
  t.insert(t.end(), tail.begin(), tail.end());
  return t;
}

inline std::vector<int32_t> HeldTokens() { return testing::RandomTokens(2 * kT, 9999); }

// A session opened by hand (no engine): Hello for Model(), the passed pack descriptor closed.
// Returns the connected socket.
inline Result<int> RawHello(const std::string& socket) {
  RANGEKV_ASSIGN_OR_RETURN(int fd, service::ConnectUnix(socket));
  service::HelloRequest h;
  RANGEKV_ASSIGN_OR_RETURN(h.geometry, DeriveGeometry(Model(), kW));
  h.ns = DeriveNamespace(Model(), h.geometry);
  h.capacity_bytes = kPacks * h.geometry.pack_bytes;
  std::vector<uint8_t> body;
  service::Encode(h, &body);
  RANGEKV_RETURN_IF_ERROR(
      service::SendFrame(fd, static_cast<uint16_t>(service::MessageType::kHello), body));
  RANGEKV_ASSIGN_OR_RETURN(service::ReceivedFrame f, service::ReceiveFrame(fd));
  if (f.passed_fd >= 0) ::close(f.passed_fd);
  Status remote;
  std::span<const uint8_t> rest;
  RANGEKV_RETURN_IF_ERROR(service::DecodeStatus(f.body, &remote, &rest));
  RANGEKV_RETURN_IF_ERROR(remote);
  return fd;
}

}  // namespace rangekv::testing
