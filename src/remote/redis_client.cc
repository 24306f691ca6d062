#include "remote/redis_client.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <charconv>

namespace rangekv::remote {

using SteadyClock = std::chrono::steady_clock;

std::string RedisAddress::Describe() const {
  return host + ":" + std::to_string(port) + "/" + std::to_string(db);
}

Result<RedisAddress> ParseRedisUrl(std::string_view url) {
  RedisAddress a;
  constexpr std::string_view kScheme = "redis://";
  if (!url.starts_with(kScheme)) {
    return InvalidArgument(
        "directory address must be redis://host:port/db (rediss:// is not "
        "supported: see docs/scale-out.md)");
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t at = rest.rfind('@');
  if (at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    const size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      a.password = std::string(userinfo);
    } else {
      a.user = std::string(userinfo.substr(0, colon));
      a.password = std::string(userinfo.substr(colon + 1));
    }
    rest = rest.substr(at + 1);
  }
  const size_t slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) {
      auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), a.db);
      if (ec != std::errc() || p != db.data() + db.size() || a.db > 65535) {
        return InvalidArgument("directory address: database '" + std::string(db) +
                               "' is not a number in [0, 65535]");
      }
    }
  }
  const size_t colon = hostport.rfind(':');
  if (colon != std::string_view::npos) {
    const std::string_view port = hostport.substr(colon + 1);
    uint32_t p32 = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), p32);
    if (ec != std::errc() || p != port.data() + port.size() || p32 == 0 || p32 > 65535) {
      return InvalidArgument("directory address: port '" + std::string(port) +
                             "' is not in [1, 65535]");
    }
    a.port = static_cast<uint16_t>(p32);
    hostport = hostport.substr(0, colon);
  }
  if (hostport.empty()) return InvalidArgument("directory address has no host");
  a.host = std::string(hostport);
  return a;
}

struct RedisClient::Connection {
  redisContext* ctx = nullptr;
  ~Connection() {
    if (ctx != nullptr) redisFree(ctx);
  }
};

namespace {

timeval Until(SteadyClock::time_point deadline) {
  const auto left = std::max<int64_t>(
      1,
      std::chrono::duration_cast<std::chrono::microseconds>(deadline - SteadyClock::now()).count());
  timeval tv;
  tv.tv_sec = left / 1000000;
  tv.tv_usec = left % 1000000;
  return tv;
}

RedisReply Convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(Convert(r->element[i]));
      break;
    default:
      out.type = RedisReply::Type::kNil;
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<RedisClient>> RedisClient::Create(const RedisOptions& options) {
  if (options.max_connections < 1 || options.max_connections > 256) {
    return InvalidArgument("redis max_connections must be in [1, 256]");
  }
  if (options.address.host.empty()) return InvalidArgument("redis address has no host");
  return std::unique_ptr<RedisClient>(new RedisClient(options));
}

RedisClient::RedisClient(const RedisOptions& options) : options_(options) {}
RedisClient::~RedisClient() = default;

Result<std::unique_ptr<RedisClient::Connection>> RedisClient::Connect(
    SteadyClock::time_point deadline) {
  const auto cap = SteadyClock::now() + std::chrono::milliseconds(options_.connect_timeout_ms);
  auto c = std::make_unique<Connection>();
  c->ctx = redisConnectWithTimeout(options_.address.host.c_str(), options_.address.port,
                                   Until(std::min(deadline, cap)));
  if (c->ctx == nullptr || c->ctx->err != 0) {
    return Unavailable("redis " + options_.address.Describe() + ": connect failed: " +
                       (c->ctx != nullptr ? std::string(c->ctx->errstr) : "out of memory"));
  }
  {
    MutexLock l(mu_);
    ++stats_.connects;
  }
  std::vector<RedisCommand> setup;
  if (!options_.address.password.empty()) {
    if (options_.address.user.empty()) {
      setup.push_back({"AUTH", options_.address.password});
    } else {
      setup.push_back({"AUTH", options_.address.user, options_.address.password});
    }
  }
  if (options_.address.db != 0) setup.push_back({"SELECT", std::to_string(options_.address.db)});
  for (const RedisCommand& cmd : setup) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& a : cmd) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    redisSetTimeout(c->ctx, Until(deadline));
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c->ctx, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (r == nullptr) {
      return Unavailable("redis " + options_.address.Describe() + ": " + cmd[0] +
                         " failed: " + c->ctx->errstr);
    }
    const bool bad = r->type == REDIS_REPLY_ERROR;
    const std::string text = bad ? std::string(r->str, r->len) : "";
    freeReplyObject(r);
    if (bad) {
      return Status(StatusCode::kUnsafePermissions,
                    "redis " + options_.address.Describe() + ": " + cmd[0] + " refused: " + text);
    }
  }
  return c;
}

std::unique_ptr<RedisClient::Connection> RedisClient::Take() {
  MutexLock l(mu_);
  cv_.Wait(l, [&]() REQUIRES(mu_) { return !idle_.empty() || out_ < options_.max_connections; });
  ++out_;
  if (idle_.empty()) return nullptr;  // the caller connects
  auto c = std::move(idle_.back());
  idle_.pop_back();
  return c;
}

void RedisClient::Give(std::unique_ptr<Connection> c) {
  MutexLock l(mu_);
  --out_;
  if (c != nullptr) idle_.push_back(std::move(c));
  cv_.NotifyOne();
}

Result<std::vector<RedisReply>> RedisClient::Run(std::span<const RedisCommand> batch,
                                                 SteadyClock::time_point deadline) {
  std::vector<RedisReply> replies;
  if (batch.empty()) return replies;
  std::unique_ptr<Connection> c = Take();
  auto fail = [&](const std::string& why) -> Status {
    Give(nullptr);  // a connection that failed mid-batch is dropped (its stream is unknown)
    MutexLock l(mu_);
    ++stats_.failed_batches;
    return Unavailable("redis " + options_.address.Describe() + ": " + why);
  };
  if (SteadyClock::now() >= deadline) return fail("deadline passed before the batch was sent");
  if (c == nullptr) {
    auto made = Connect(deadline);
    if (!made.ok()) {
      Give(nullptr);
      MutexLock l(mu_);
      ++stats_.failed_batches;
      return made.status();
    }
    c = std::move(made).value();
  }
  redisSetTimeout(c->ctx, Until(deadline));
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const RedisCommand& cmd : batch) {
    argv.clear();
    lens.clear();
    for (const std::string& a : cmd) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(c->ctx, static_cast<int>(argv.size()), argv.data(), lens.data()) !=
        REDIS_OK) {
      return fail(std::string("queueing ") + (cmd.empty() ? "?" : cmd[0]) + " failed");
    }
  }
  replies.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(c->ctx, &raw) != REDIS_OK || raw == nullptr) {
      const bool timeout = SteadyClock::now() >= deadline;
      return fail(std::string(timeout ? "deadline passed" : "connection failed") + " (" +
                  c->ctx->errstr + ") after " + std::to_string(i) + " of " +
                  std::to_string(batch.size()) + " replies");
    }
    replies.push_back(Convert(static_cast<redisReply*>(raw)));
    freeReplyObject(raw);
  }
  {
    MutexLock l(mu_);
    ++stats_.round_trips;
    stats_.commands += batch.size();
  }
  Give(std::move(c));
  return replies;
}

Result<RedisReply> RedisClient::RunOne(const RedisCommand& command,
                                       SteadyClock::time_point deadline) {
  RANGEKV_ASSIGN_OR_RETURN(auto replies, Run(std::span<const RedisCommand>(&command, 1), deadline));
  return std::move(replies.front());
}

RedisStats RedisClient::stats() const {
  MutexLock l(mu_);
  return stats_;
}

}  // namespace rangekv::remote
