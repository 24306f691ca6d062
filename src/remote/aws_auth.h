// AWS request signing (Signature Version 4) and the standard credential chain, for the S3 client
// (s3_client.h). Written by hand: Debian 12 packages no AWS SDK for C++, and curl's
// CURLOPT_AWS_SIGV4 decides itself which headers and which payload hash it signs (it hashes a
// body it holds in memory; ours stream from a callback), so signing is kept as one pure,
// tested function (checked against AWS's published example in aws_auth_test.cc). The crypto is
// OpenSSL's (SHA-256, HMAC); this file only arranges the strings the algorithm defines.
//
// Nothing here logs. Credentials are values the caller keeps; Describe() prints the access key
// id's first 4 characters only, never the secret or the session token.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rangekv/status.h"

namespace rangekv::remote {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" unless temporary credentials
  std::string source;         // where they came from ("environment", "file:<path>[profile]")
  // For logs: "AKIA... (environment)"; the secret and the token never appear.
  std::string Describe() const;
};

// What the credential chain reads, injectable for tests: environment variables by name and
// whole files by path (nullopt: absent). Production uses ProcessAwsEnvironment().
struct AwsEnvironment {
  std::map<std::string, std::string> vars;
  std::map<std::string, std::string> files;
  std::optional<std::string> Var(const std::string& name) const;
  std::optional<std::string> File(const std::string& path) const;
};
// The process environment and the files the chain names, read once (at the edge, not per call).
AwsEnvironment ProcessAwsEnvironment();

// The standard chain, in the AWS SDKs' order for static credentials:
//   1. AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN);
//   2. the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials),
//      profile AWS_PROFILE (else "default"): aws_access_key_id, aws_secret_access_key,
//      aws_session_token;
//   3. the config file (AWS_CONFIG_FILE, else ~/.aws/config), section [profile P] (or
//      [default]), the same keys.
// Instance metadata (IMDS) and SSO are not read: on such hosts export the credentials (the
// AWS CLI's `aws configure export-credentials --format env`). kNotFound when nothing is set.
Result<AwsCredentials> LoadAwsCredentials(const AwsEnvironment& env);
// AWS_REGION, AWS_DEFAULT_REGION, the config file's `region` of the profile, else "us-east-1".
std::string LoadAwsRegion(const AwsEnvironment& env);

// One request to sign. `path` is the URI path as sent (already percent-encoded, '/'-separated);
// `query` the parameters unencoded (they are encoded and sorted here); `headers` lower-case
// names (host included) with their values.
struct SigV4Request {
  std::string method;
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_sha256_hex;  // or "UNSIGNED-PAYLOAD"
};

// "YYYYMMDDTHHMMSSZ" for a Unix time.
std::string AmzDate(int64_t unix_seconds);
// The Authorization header's value for `request` at `amz_date`, region and service.
std::string SigV4Authorization(const SigV4Request& request, const AwsCredentials& credentials,
                               std::string_view region, std::string_view service,
                               std::string_view amz_date);
// The query string as SigV4 canonicalises it (and as it must then be sent): each name and value
// percent-encoded (RFC 3986 unreserved characters kept), sorted by name then value.
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);
// RFC 3986 percent-encoding; '/' kept when `keep_slash` (object keys in paths).
std::string UriEncode(std::string_view s, bool keep_slash);

// Lower-case hex of SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);
inline constexpr std::string_view kEmptySha256Hex =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

}  // namespace rangekv::remote
