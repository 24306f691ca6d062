// RemoteServers: the real servers of the cluster tier's tests, started for a test binary and
// stopped at its end: a SeaweedFS S3 gateway and a redis-server on 127.0.0.1, free ports, data
// in a temporary directory (testing/remote/servers.sh does the work; the Python tests and the
// shell tests use the same script). Missing server binaries make the tests skip with the
// reason (servers.sh exits 77); any other start failure fails them.
//
// Thread-safety: Start()/Get() from the test's main thread.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "testing/temp_dir.h"

namespace rangekv::testing {

class RemoteServers {
 public:
  // The binary's servers, started at the first call (about 7 s), stopped at exit. Null with
  // *skip_reason set when the binaries are missing; null with *error set when starting failed.
  static RemoteServers* Shared(std::string* skip_reason, std::string* error);
  ~RemoteServers();

  const std::string& s3_endpoint() const { return env_.at("RANGEKV_TEST_S3_ENDPOINT"); }
  const std::string& bucket() const { return env_.at("RANGEKV_TEST_S3_BUCKET"); }
  const std::string& redis_url() const { return env_.at("RANGEKV_TEST_REDIS"); }
  const std::string& access_key() const { return env_.at("AWS_ACCESS_KEY_ID"); }
  const std::string& secret_key() const { return env_.at("AWS_SECRET_ACCESS_KEY"); }
  // SIGKILLs the S3 server (failure tests); later S3 calls fail. Last in a binary: the
  // server is not started again.
  void KillS3();

 private:
  RemoteServers() = default;
  bool Start(std::string* skip_reason, std::string* error);
  std::unique_ptr<TempDir> dir_;
  std::map<std::string, std::string> env_;
};

}  // namespace rangekv::testing
