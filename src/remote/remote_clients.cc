#include "remote/remote_clients.h"

#include "base/log.h"

namespace rangekv::remote {

Result<std::shared_ptr<RemoteClients>> ConnectRemote(const RemoteTierOptions& options,
                                                     const std::string& tenant,
                                                     const NamespaceId& ns) {
  auto c = std::make_shared<RemoteClients>();
  c->options = options;
  RANGEKV_ASSIGN_OR_RETURN(c->scope, ParseS3Url(options.url));
  c->scope.tenant = options.tenant.empty() ? tenant : options.tenant;
  if (!ValidTenant(c->scope.tenant)) {
    return InvalidArgument("remote tenant '" + c->scope.tenant +
                           "' must be 1-64 of [A-Za-z0-9._-]");
  }
  c->scope.ns = ns;
  if (options.directory.empty()) {
    return InvalidArgument("the cluster tier needs a directory (redis://host:port/db)");
  }
  if (options.get_bytes != 0 &&
      (options.get_bytes < (64u << 10) || options.get_bytes > (1u << 30))) {
    return InvalidArgument("remote get_bytes must be 0 or in [64 KiB, 1 GiB]");
  }
  if (options.lookup_timeout_ms == 0 || options.read_timeout_ms == 0 || options.lease_ms == 0) {
    return InvalidArgument("remote timeouts and lease_ms must be > 0");
  }
  if (options.part_bytes < (5u << 20)) return InvalidArgument("remote part_bytes must be >= 5 MiB");
  const AwsEnvironment env = ProcessAwsEnvironment();
  RANGEKV_ASSIGN_OR_RETURN(AwsCredentials creds, LoadAwsCredentials(env));
  S3Options so;
  so.endpoint = options.endpoint;
  so.region = options.region.empty() ? LoadAwsRegion(env) : options.region;
  so.credentials = std::move(creds);
  so.io_threads = options.io_threads;
  so.max_connections = options.connections;
  so.ca_file = options.ca_file;
  RANGEKV_ASSIGN_OR_RETURN(auto s3, S3Client::Create(so));
  c->s3 = std::move(s3);
  RedisOptions ro;
  RANGEKV_ASSIGN_OR_RETURN(ro.address, ParseRedisUrl(options.directory));
  ro.max_connections = 8;
  RANGEKV_ASSIGN_OR_RETURN(auto redis, RedisClient::Create(ro));
  c->redis = std::move(redis);
  ClusterDirectoryOptions dopt;
  dopt.lease_ms = options.lease_ms;
  c->directory = std::make_shared<ClusterDirectory>(c->redis, c->scope, dopt);
  Log(LogLevel::kInfo, "cluster tier: s3://" + c->scope.bucket + "/" + c->scope.PacksPrefix() +
                           " at " + (options.endpoint.empty() ? "AWS S3" : options.endpoint) +
                           ", directory " + ro.address.Describe() + ", credentials " +
                           so.credentials.Describe());
  return c;
}

}  // namespace rangekv::remote
