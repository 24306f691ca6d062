// S3Client: the object-store side of the cluster tier (docs/scale-out.md), an S3 REST client
// over libcurl's multi interface. One client serves a whole process: its `io_threads` threads
// each drive one curl multi handle (non-blocking transfers, keep-alive connections reused from
// request to request, at most `max_connections` sockets in all), so a caller hands over a batch
// of requests (ranged GETs of one stripe, the parts of an upload) and waits for all of them
// while they run in parallel. Requests are signed with SigV4 (aws_auth.h); https endpoints use
// TLS with peer and host verification (libcurl + OpenSSL); http is for loopback test servers.
//
// Addressing: path style (<endpoint>/<bucket>/<key>) for an explicit endpoint (SeaweedFS, MinIO,
// Ceph RGW, or AWS itself); virtual-hosted style (https://<bucket>.s3.<region>.amazonaws.com/)
// when the endpoint is empty.
//
// Deadlines: every request carries one (Deadline); a transfer still running at its deadline is
// aborted and fails with kUnavailable ("deadline"), as does a refused or dropped connection. A
// response is checked before it is reported OK: HTTP status, and for a ranged GET exactly the
// requested byte count (more is kOutOfRange and never written past the buffer; fewer is
// kShortTransfer). Errors: 404 -> kNotFound, 403 -> kUnsafePermissions ("access denied"), 416 ->
// kOutOfRange, 5xx / connection / timeout -> kUnavailable, others kIoError; the message names
// the method, key and S3 error code, never a credential.
//
// Thread-safety: all methods are thread-safe; a batch's requests belong to the caller again
// when Execute returns.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rangekv/status.h"
#include "remote/aws_auth.h"

namespace rangekv::remote {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline DeadlineIn(std::chrono::milliseconds ms) { return Clock::now() + ms; }

struct S3Options {
  // "" = AWS (virtual-hosted style, https). Else a URL: http(s)://host[:port][/base].
  std::string endpoint;
  std::string region = "us-east-1";
  AwsCredentials credentials;
  uint32_t io_threads = 2;        // multi handles, one thread each. [1, 64]
  uint32_t max_connections = 32;  // sockets in all (split across threads). [1, 1024]
  uint32_t connect_timeout_ms = 2000;
  // TLS: verify the peer and host name (always on for https); a CA bundle other than the
  // system's, for private CAs (Ceph RGW, MinIO with their own certificates).
  std::string ca_file;
};

enum class S3Method : uint8_t { kGet, kPut, kPost, kDelete, kHead };

// One S3 call. The caller owns it and every buffer it names until Execute returns.
struct S3Request {
  S3Method method = S3Method::kGet;
  std::string bucket;
  std::string key;  // "" for bucket-level calls
  std::vector<std::pair<std::string, std::string>> query;
  // GET of bytes [range_offset, range_offset + range_length) when range_length > 0.
  uint64_t range_offset = 0;
  uint64_t range_length = 0;
  // Where a GET's body goes: into `into` (exactly range_length bytes for a ranged GET, at most
  // into.size() otherwise), or, when `into` is empty, into `body` (at most max_body_bytes).
  std::span<uint8_t> into;
  // Or, for a ranged GET only: into several buffers (one GET landing in several read banks).
  // Each segment takes the body bytes [offset, offset + into.size()) of the range; segments are
  // ascending and disjoint; body bytes no segment covers (a small gap between two) are read and
  // dropped. `into` must then be empty.
  struct Segment {
    uint64_t offset = 0;
    std::span<uint8_t> into;
  };
  std::vector<Segment> segments;
  uint64_t max_body_bytes = 16u << 20;
  // A PUT or POST body (not copied).
  std::span<const uint8_t> upload;
  std::string content_type;

  // Results.
  Status status;
  long http_status = 0;
  uint64_t bytes = 0;         // body bytes received (GET) or sent (PUT/POST)
  std::vector<uint8_t> body;  // when `into` is empty
  std::string etag;           // the ETag response header, quotes kept
};

struct S3Stats {
  uint64_t requests = 0;
  uint64_t gets = 0;  // ranged or whole GETs
  uint64_t puts = 0;  // PUT object and UploadPart
  uint64_t other = 0;
  uint64_t failed = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t connections_opened = 0;  // new sockets (keep-alive reuse keeps this low)
};

class S3Client {
 public:
  static Result<std::unique_ptr<S3Client>> Create(const S3Options& options);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // Runs every request of the batch in parallel (up to the connection bound) and returns when
  // all completed; each request's `status` says how it went. Returns the first failure (OK
  // when all succeeded). Requests still running at `deadline` fail with kUnavailable.
  Status Execute(std::span<S3Request* const> batch, Deadline deadline);
  Status Execute(S3Request& request, Deadline deadline) {
    S3Request* one[] = {&request};
    return Execute(one, deadline);
  }

  // Conveniences over Execute.
  Status CreateBucket(std::string_view bucket, Deadline deadline);
  Status PutObject(std::string_view bucket, std::string_view key, std::span<const uint8_t> bytes,
                   Deadline deadline);
  // The whole object (at most max_bytes: larger is kOutOfRange).
  Result<std::vector<uint8_t>> GetObject(std::string_view bucket, std::string_view key,
                                         uint64_t max_bytes, Deadline deadline);
  Status DeleteObject(std::string_view bucket, std::string_view key, Deadline deadline);
  // Multipart upload: Create -> UploadPart (numbers from 1, any order, in parallel) ->
  // Complete (the object appears atomically) or Abort (nothing appears).
  Result<std::string> CreateMultipartUpload(std::string_view bucket, std::string_view key,
                                            Deadline deadline);
  Status CompleteMultipartUpload(std::string_view bucket, std::string_view key,
                                 std::string_view upload_id, std::span<const std::string> etags,
                                 Deadline deadline);
  Status AbortMultipartUpload(std::string_view bucket, std::string_view key,
                              std::string_view upload_id, Deadline deadline);
  struct ListedObject {
    std::string key;
    uint64_t size = 0;
  };
  // One page of ListObjectsV2 under `prefix`; `*next` is the continuation token ("" at the end).
  Result<std::vector<ListedObject>> ListObjects(std::string_view bucket, std::string_view prefix,
                                                std::string_view continuation, std::string* next,
                                                Deadline deadline);

  S3Stats stats() const;
  const S3Options& options() const { return options_; }

 private:
  class Driver;
  explicit S3Client(const S3Options& options);
  Status Init();
  std::string Url(const S3Request& r, std::string* host, std::string* path) const;

  const S3Options options_;
  std::string scheme_;  // "http" / "https"
  std::string host_;    // host[:port] of the endpoint
  std::string base_;    // path prefix of the endpoint ("" or "/x")
  bool virtual_hosted_ = false;
  std::vector<std::unique_ptr<Driver>> drivers_;
  std::atomic<uint32_t> next_driver_{0};
  friend class S3ClientStatsAccess;
};

// Pulls the text of the first <tag>...</tag> of a small XML response (S3's replies are flat
// enough for this: UploadId, Code, Message, NextContinuationToken); "" when absent. XML entities
// &amp; &lt; &gt; &quot; &apos; are decoded.
std::string XmlText(std::string_view xml, std::string_view tag, size_t from = 0,
                    size_t* end = nullptr);

}  // namespace rangekv::remote
