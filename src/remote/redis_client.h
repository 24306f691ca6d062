// RedisClient: the directory side of the cluster tier (docs/scale-out.md), a Redis / Valkey
// client over hiredis (Debian's libhiredis). Commands go out pipelined: a caller hands a batch
// of commands, they are written back to back and their replies read in order, so a batch costs
// one network round trip whatever its size. Connections come from a bounded pool (each used by
// one caller at a time; a broken one is dropped and the next call reconnects).
//
// Addresses: redis://[[user]:password@]host:port[/db]. TLS (rediss://) is not supported: the
// hiredis of Debian 12 (0.14) has no TLS; run Redis on a private network or through a TLS
// tunnel (stunnel, a service mesh), and say so in the deployment (docs/scale-out.md).
//
// Deadlines: every batch carries one; connect, write and read are bounded by it (socket
// timeouts), and a batch past it fails with kUnavailable. Server errors (-ERR ...) are per
// command (RedisReply::error); connection failures fail the whole batch with kUnavailable.
// Logged messages name the host and command, never the password.
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/thread_annotations.h"
#include "rangekv/status.h"

namespace rangekv::remote {

struct RedisAddress {
  std::string host;
  uint16_t port = 6379;
  uint32_t db = 0;
  std::string user;
  std::string password;
  // host:port/db, never the password.
  std::string Describe() const;
};
// Parses redis://[[user]:password@]host[:port][/db]. kInvalidArgument with the reason.
Result<RedisAddress> ParseRedisUrl(std::string_view url);

// One reply, flattened: a status/string/integer/nil, or an array of them (one level deep is all
// the directory uses; deeper arrays are flattened into `elements` in order).
struct RedisReply {
  enum class Type : uint8_t { kNil, kString, kInteger, kArray, kStatus, kError };
  Type type = Type::kNil;
  std::string str;  // string, status or error text
  int64_t integer = 0;
  std::vector<RedisReply> elements;
  bool error() const { return type == Type::kError; }
  bool nil() const { return type == Type::kNil; }
};

using RedisCommand = std::vector<std::string>;  // argv, binary-safe

struct RedisStats {
  uint64_t round_trips = 0;  // pipelined batches sent (one network round trip each)
  uint64_t commands = 0;
  uint64_t failed_batches = 0;
  uint64_t connects = 0;
};

struct RedisOptions {
  RedisAddress address;
  uint32_t max_connections = 8;  // [1, 256]
  uint32_t connect_timeout_ms = 1000;
};

class RedisClient {
 public:
  static Result<std::unique_ptr<RedisClient>> Create(const RedisOptions& options);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Sends every command of `batch` pipelined and reads their replies in order (one round trip).
  // OK with one reply per command (server errors inside the replies); kUnavailable when the
  // connection failed or the deadline passed (nothing is known of which commands ran).
  Result<std::vector<RedisReply>> Run(std::span<const RedisCommand> batch,
                                      std::chrono::steady_clock::time_point deadline);
  Result<RedisReply> RunOne(const RedisCommand& command,
                            std::chrono::steady_clock::time_point deadline);

  RedisStats stats() const;
  const RedisOptions& options() const { return options_; }

 private:
  struct Connection;
  explicit RedisClient(const RedisOptions& options);
  Result<std::unique_ptr<Connection>> Connect(std::chrono::steady_clock::time_point deadline);
  std::unique_ptr<Connection> Take() EXCLUDES(mu_);
  void Give(std::unique_ptr<Connection> c) EXCLUDES(mu_);

  const RedisOptions options_;
  mutable Mutex mu_;
  CondVar cv_;
  std::vector<std::unique_ptr<Connection>> idle_ GUARDED_BY(mu_);
  uint32_t out_ GUARDED_BY(mu_) = 0;  // connections handed out
  RedisStats stats_ GUARDED_BY(mu_);
};

}  // namespace rangekv::remote
