// RemoteClients: what one process connects to for the cluster tier (docs/scale-out.md): the S3
// client, the Redis client and the cluster directory of one (bucket prefix, tenant, namespace),
// made from RemoteTierOptions (include/rangekv/remote.h) with credentials from the standard AWS
// chain read once here, at the edge. Shared (shared_ptr) by the engine's restore side and the
// publisher.
//
// Thread-safety: immutable after Connect; the clients are thread-safe.
#pragma once

#include <memory>
#include <string>

#include "rangekv/geometry.h"
#include "rangekv/remote.h"
#include "rangekv/status.h"
#include "remote/cluster_directory.h"
#include "remote/redis_client.h"
#include "remote/s3_client.h"

namespace rangekv::remote {

struct RemoteClients {
  RemoteTierOptions options;
  RemoteScope scope;
  std::shared_ptr<S3Client> s3;
  std::shared_ptr<RedisClient> redis;
  std::shared_ptr<ClusterDirectory> directory;
};

// Validates the options (kInvalidArgument naming the field), reads the credential chain
// (kNotFound without credentials) and makes the clients. Connects lazily: a server that is down
// now fails the first call, not this one. `tenant` is used when options.tenant is empty.
Result<std::shared_ptr<RemoteClients>> ConnectRemote(const RemoteTierOptions& options,
                                                     const std::string& tenant,
                                                     const NamespaceId& ns);

}  // namespace rangekv::remote
