#include "remote/aws_auth.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

extern char** environ;

namespace rangekv::remote {
namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static const char* k = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = k[p[i] >> 4];
    out[2 * i + 1] = k[p[i] & 15];
  }
  return out;
}

std::string Hmac(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string Trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t' || s[a] == '\r')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\r')) --b;
  return std::string(s.substr(a, b - a));
}

// key = value pairs of section `section` of an INI file.
std::map<std::string, std::string> IniSection(const std::string& text, const std::string& section) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      inside = Trim(std::string_view(t).substr(1, t.size() - 2)) == section;
      continue;
    }
    if (!inside) continue;
    const size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    out[Trim(std::string_view(t).substr(0, eq))] = Trim(std::string_view(t).substr(eq + 1));
  }
  return out;
}

std::string HomeFile(const AwsEnvironment& env, const char* var, const char* rel) {
  if (auto v = env.Var(var); v && !v->empty()) return *v;
  const auto home = env.Var("HOME");
  return home ? *home + "/" + rel : std::string();
}

std::string Profile(const AwsEnvironment& env) {
  auto p = env.Var("AWS_PROFILE");
  return p && !p->empty() ? *p : "default";
}

}  // namespace

std::string AwsCredentials::Describe() const {
  return access_key_id.substr(0, std::min<size_t>(4, access_key_id.size())) + "... (" + source +
         ")";
}

std::optional<std::string> AwsEnvironment::Var(const std::string& name) const {
  auto it = vars.find(name);
  if (it == vars.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> AwsEnvironment::File(const std::string& path) const {
  auto it = files.find(path);
  if (it == files.end()) return std::nullopt;
  return it->second;
}

AwsEnvironment ProcessAwsEnvironment() {
  AwsEnvironment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = kv.substr(0, eq);
    if (name.starts_with("AWS_") || name == "HOME") {
      env.vars[std::string(name)] = std::string(kv.substr(eq + 1));
    }
  }
  for (const std::string& path : {HomeFile(env, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"),
                                  HomeFile(env, "AWS_CONFIG_FILE", ".aws/config")}) {
    if (path.empty()) continue;
    std::ifstream f(path);
    if (!f) continue;
    std::ostringstream s;
    s << f.rdbuf();
    env.files[path] = s.str();
  }
  return env;
}

Result<AwsCredentials> LoadAwsCredentials(const AwsEnvironment& env) {
  AwsCredentials c;
  const auto id = env.Var("AWS_ACCESS_KEY_ID");
  const auto secret = env.Var("AWS_SECRET_ACCESS_KEY");
  if (id && secret && !id->empty() && !secret->empty()) {
    c.access_key_id = *id;
    c.secret_access_key = *secret;
    c.session_token = env.Var("AWS_SESSION_TOKEN").value_or("");
    c.source = "environment";
    return c;
  }
  const std::string profile = Profile(env);
  const std::string cred_path = HomeFile(env, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  const std::string config_path = HomeFile(env, "AWS_CONFIG_FILE", ".aws/config");
  const std::pair<std::string, std::string> places[] = {
      {cred_path, profile}, {config_path, profile == "default" ? "default" : "profile " + profile}};
  for (const auto& [path, section] : places) {
    if (path.empty()) continue;
    const auto text = env.File(path);
    if (!text) continue;
    auto kv = IniSection(*text, section);
    if (!kv["aws_access_key_id"].empty() && !kv["aws_secret_access_key"].empty()) {
      c.access_key_id = kv["aws_access_key_id"];
      c.secret_access_key = kv["aws_secret_access_key"];
      c.session_token = kv["aws_session_token"];
      c.source = "file:" + path + "[" + section + "]";
      return c;
    }
  }
  return NotFound(
      "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in "
      "~/.aws/credentials (AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE)");
}

std::string LoadAwsRegion(const AwsEnvironment& env) {
  for (const char* v : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (auto r = env.Var(v); r && !r->empty()) return *r;
  }
  const std::string profile = Profile(env);
  const std::string config_path = HomeFile(env, "AWS_CONFIG_FILE", ".aws/config");
  if (const auto text = env.File(config_path)) {
    auto kv = IniSection(*text, profile == "default" ? "default" : "profile " + profile);
    if (!kv["region"].empty()) return kv["region"];
  }
  return "us-east-1";
}

std::string Sha256Hex(std::string_view data) {
  unsigned char out[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), out);
  return Hex(out, sizeof out);
}

std::string UriEncode(std::string_view s, bool keep_slash) {
  static const char* k = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3);
  for (unsigned char c : s) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
                            c == '~' || (keep_slash && c == '/');
    if (unreserved) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(k[c >> 4]);
      out.push_back(k[c & 15]);
    }
  }
  return out;
}

std::string AmzDate(int64_t unix_seconds) {
  const time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> q;
  q.reserve(query.size());
  for (const auto& [k, v] : query) q.emplace_back(UriEncode(k, false), UriEncode(v, false));
  std::sort(q.begin(), q.end());
  std::string out;
  for (const auto& [k, v] : q) {
    if (!out.empty()) out += '&';
    out += k + "=" + v;
  }
  return out;
}

std::string SigV4Authorization(const SigV4Request& r, const AwsCredentials& c,
                               std::string_view region, std::string_view service,
                               std::string_view amz_date) {
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& [k, v] : r.headers) headers.emplace_back(k, Trim(v));
  std::sort(headers.begin(), headers.end());
  std::string canonical_headers, signed_headers;
  for (const auto& [k, v] : headers) {
    canonical_headers += k + ":" + v + "\n";
    if (!signed_headers.empty()) signed_headers += ';';
    signed_headers += k;
  }
  const std::string canonical = r.method + "\n" + r.path + "\n" + CanonicalQuery(r.query) + "\n" +
                                canonical_headers + "\n" + signed_headers + "\n" +
                                r.payload_sha256_hex;
  const std::string date(amz_date.substr(0, 8));
  const std::string scope =
      date + "/" + std::string(region) + "/" + std::string(service) + "/aws4_request";
  const std::string to_sign =
      "AWS4-HMAC-SHA256\n" + std::string(amz_date) + "\n" + scope + "\n" + Sha256Hex(canonical);
  std::string key = Hmac("AWS4" + c.secret_access_key, date);
  key = Hmac(key, region);
  key = Hmac(key, service);
  key = Hmac(key, "aws4_request");
  const std::string sig = Hmac(key, to_sign);
  return "AWS4-HMAC-SHA256 Credential=" + c.access_key_id + "/" + scope +
         ", SignedHeaders=" + signed_headers +
         ", Signature=" + Hex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size());
}

}  // namespace rangekv::remote
