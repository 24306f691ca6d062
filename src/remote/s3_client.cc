#include "remote/s3_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <thread>

#include "base/thread_annotations.h"

namespace rangekv::remote {
namespace {

// curl_global_init once per process, before any thread uses libcurl.
struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
};
const CurlGlobal& EnsureCurl() {
  static const CurlGlobal g;
  return g;
}

const char* MethodName(S3Method m) {
  switch (m) {
    case S3Method::kGet:
      return "GET";
    case S3Method::kPut:
      return "PUT";
    case S3Method::kPost:
      return "POST";
    case S3Method::kDelete:
      return "DELETE";
    case S3Method::kHead:
      return "HEAD";
  }
  return "?";
}

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string Decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '&') {
      const std::pair<std::string_view, char> ents[] = {
          {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
      bool done = false;
      for (const auto& [e, c] : ents) {
        if (s.substr(i, e.size()) == e) {
          out.push_back(c);
          i += e.size() - 1;
          done = true;
          break;
        }
      }
      if (done) continue;
    }
    out.push_back(s[i]);
  }
  return out;
}

Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }

Status CheckSegments(const S3Request& r) {
  if (r.segments.empty()) return OkStatus();
  if (r.method != S3Method::kGet || r.range_length == 0 || !r.into.empty()) {
    return InvalidArgument("S3 request segments need a ranged GET and no `into` buffer");
  }
  uint64_t at = 0;
  for (const S3Request::Segment& s : r.segments) {
    if (s.offset < at || s.into.size() > r.range_length - std::min(s.offset, r.range_length)) {
      return InvalidArgument("S3 request segments overlap, descend or pass the range's end");
    }
    at = s.offset + s.into.size();
  }
  return OkStatus();
}

}  // namespace

std::string XmlText(std::string_view xml, std::string_view tag, size_t from, size_t* end) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  const size_t a = xml.find(open, from);
  if (a == std::string_view::npos) {
    if (end) *end = std::string_view::npos;
    return "";
  }
  const size_t b = xml.find(close, a + open.size());
  if (b == std::string_view::npos) {
    if (end) *end = std::string_view::npos;
    return "";
  }
  if (end) *end = b + close.size();
  return Decode(xml.substr(a + open.size(), b - a - open.size()));
}

// One thread driving one curl multi handle: callers queue transfers and wait on their batch.
class S3Client::Driver {
 public:
  struct Batch {
    Mutex mu;
    CondVar cv;
    size_t remaining GUARDED_BY(mu) = 0;
  };
  struct Transfer {
    S3Request* req = nullptr;
    Batch* batch = nullptr;
    Deadline deadline;
    std::string url;
    std::vector<std::string> header_lines;  // "Name: value"
    CURL* easy = nullptr;
    curl_slist* headers = nullptr;
    uint64_t upload_pos = 0;
    size_t segment = 0;  // the segment OnWrite fills next
    bool overflow = false;
  };

  Driver(S3Client* owner, uint32_t connections) : owner_(owner), connections_(connections) {}
  ~Driver() { Stop(); }

  Status Start() {
    multi_ = curl_multi_init();
    if (multi_ == nullptr) return Internal("curl_multi_init failed");
    curl_multi_setopt(multi_, CURLMOPT_MAX_TOTAL_CONNECTIONS, static_cast<long>(connections_));
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(connections_));
    thread_ = std::thread([this] { Run(); });
    return OkStatus();
  }

  void Stop() {
    {
      MutexLock l(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    if (multi_ != nullptr) curl_multi_wakeup(multi_);
    if (thread_.joinable()) thread_.join();
    for (CURL* e : idle_) curl_easy_cleanup(e);
    idle_.clear();
    if (multi_ != nullptr) curl_multi_cleanup(multi_);
    multi_ = nullptr;
  }

  void Submit(std::vector<std::unique_ptr<Transfer>> transfers) {
    {
      MutexLock l(mu_);
      for (auto& t : transfers) queue_.push_back(std::move(t));
    }
    curl_multi_wakeup(multi_);
  }

  S3Stats stats() const {
    MutexLock l(mu_);
    return stats_;
  }

 private:
  static size_t OnWrite(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    S3Request& r = *t->req;
    const uint64_t len = size * n;
    if (!r.segments.empty()) {
      if (r.bytes + len > r.range_length) {
        t->overflow = true;
        return 0;
      }
      // The piece [pos, pos + len) of the range, copied where it meets the segments.
      uint64_t pos = r.bytes;
      const char* p = data;
      const uint64_t end = r.bytes + len;
      while (pos < end && t->segment < r.segments.size()) {
        const S3Request::Segment& seg = r.segments[t->segment];
        const uint64_t seg_end = seg.offset + seg.into.size();
        if (pos >= seg_end) {
          ++t->segment;
          continue;
        }
        if (pos < seg.offset) {  // a gap: dropped
          const uint64_t skip = std::min(end, seg.offset) - pos;
          pos += skip;
          p += skip;
          continue;
        }
        const uint64_t k = std::min(end, seg_end) - pos;
        std::memcpy(seg.into.data() + (pos - seg.offset), p, k);
        pos += k;
        p += k;
      }
    } else if (!r.into.empty()) {
      if (r.bytes + len > r.into.size()) {
        t->overflow = true;
        return 0;  // aborts the transfer: never write past the caller's buffer
      }
      std::memcpy(r.into.data() + r.bytes, data, len);
    } else {
      if (r.body.size() + len > r.max_body_bytes) {
        t->overflow = true;
        return 0;
      }
      r.body.insert(r.body.end(), data, data + len);
    }
    r.bytes += len;
    return len;
  }
  static size_t OnRead(char* out, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const std::span<const uint8_t> up = t->req->upload;
    const uint64_t len = std::min<uint64_t>(size * n, up.size() - t->upload_pos);
    std::memcpy(out, up.data() + t->upload_pos, len);
    t->upload_pos += len;
    return len;
  }
  static size_t OnHeader(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    std::string_view line(data, size * n);
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos && IEquals(line.substr(0, colon), "etag")) {
      std::string_view v = line.substr(colon + 1);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) {
        v.remove_suffix(1);
      }
      t->req->etag = std::string(v);
    }
    return size * n;
  }

  CURL* TakeEasy() {
    if (!idle_.empty()) {
      CURL* e = idle_.back();
      idle_.pop_back();
      curl_easy_reset(e);
      return e;
    }
    return curl_easy_init();
  }

  void Begin(std::unique_ptr<Transfer> t) {
    S3Request& r = *t->req;
    const auto now = Clock::now();
    if (now >= t->deadline) {
      Finish(*t, Unavailable(std::string(MethodName(r.method)) + " " + r.key +
                             ": deadline passed before the request was sent"));
      return;
    }
    CURL* e = TakeEasy();
    if (e == nullptr) {
      Finish(*t, Internal("curl_easy_init failed"));
      return;
    }
    t->easy = e;
    for (const std::string& h : t->header_lines)
      t->headers = curl_slist_append(t->headers, h.c_str());
    t->headers = curl_slist_append(t->headers, "Expect:");  // no 100-continue round trip
    curl_easy_setopt(e, CURLOPT_URL, t->url.c_str());
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &OnWrite);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &OnHeader);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(owner_->options_.connect_timeout_ms));
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t->deadline - now);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(1, left.count())));
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!owner_->options_.ca_file.empty()) {
      curl_easy_setopt(e, CURLOPT_CAINFO, owner_->options_.ca_file.c_str());
    }
    switch (r.method) {
      case S3Method::kGet:
        break;
      case S3Method::kHead:
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        break;
      case S3Method::kDelete:
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
        break;
      case S3Method::kPut:
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.upload.size()));
        curl_easy_setopt(e, CURLOPT_READFUNCTION, &OnRead);
        curl_easy_setopt(e, CURLOPT_READDATA, t.get());
        break;
      case S3Method::kPost:
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.upload.size()));
        curl_easy_setopt(e, CURLOPT_READFUNCTION, &OnRead);
        curl_easy_setopt(e, CURLOPT_READDATA, t.get());
        break;
    }
    if (curl_multi_add_handle(multi_, e) != CURLM_OK) {
      Finish(*t, Internal("curl_multi_add_handle failed"));
      return;
    }
    running_.push_back(std::move(t));
  }

  // Maps the transfer's outcome to its request's status and wakes its batch.
  void Complete(Transfer& t, CURLcode code) {
    S3Request& r = *t.req;
    long http = 0;
    curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &http);
    long connects = 0;
    curl_easy_getinfo(t.easy, CURLINFO_NUM_CONNECTS, &connects);
    r.http_status = http;
    if (r.method == S3Method::kPut || r.method == S3Method::kPost) r.bytes = t.upload_pos;
    const std::string what = std::string(MethodName(r.method)) + " " + r.bucket + "/" + r.key;
    Status s = OkStatus();
    if (t.overflow) {
      const uint64_t room = !r.segments.empty() ? r.range_length
                            : r.into.empty()    ? r.max_body_bytes
                                                : r.into.size();
      s = OutOfRange(what + ": response larger than the " + std::to_string(room) + "-byte buffer");
    } else if (code == CURLE_OPERATION_TIMEDOUT) {
      s = Unavailable(what + ": deadline passed (" + curl_easy_strerror(code) + ")");
    } else if (code != CURLE_OK) {
      s = Unavailable(what + ": " + curl_easy_strerror(code));
    } else if (http >= 300) {
      std::string_view xml(reinterpret_cast<const char*>(r.body.data()), r.body.size());
      std::string detail = r.into.empty() ? XmlText(xml, "Code") : "";
      const std::string m =
          what + ": HTTP " + std::to_string(http) + (detail.empty() ? "" : " " + detail);
      if (http == 404)
        s = NotFound(m);
      else if (http == 403)
        s = Status(StatusCode::kUnsafePermissions, m + " (access denied)");
      else if (http == 416)
        s = OutOfRange(m);
      else if (http >= 500)
        s = Unavailable(m);
      else
        s = IoError(m);
    } else if (r.method == S3Method::kGet && r.range_length > 0 && r.bytes != r.range_length) {
      s = Status(StatusCode::kShortTransfer, what + ": " + std::to_string(r.bytes) + " of " +
                                                 std::to_string(r.range_length) + " bytes");
    } else if (r.method == S3Method::kGet && r.range_length > 0 && http != 206) {
      s = IoError(what + ": ranged GET answered HTTP " + std::to_string(http) + ", not 206");
    }
    {
      MutexLock l(mu_);
      ++stats_.requests;
      if (r.method == S3Method::kGet)
        ++stats_.gets;
      else if (r.method == S3Method::kPut)
        ++stats_.puts;
      else
        ++stats_.other;
      if (!s.ok()) ++stats_.failed;
      if (r.method == S3Method::kGet)
        stats_.bytes_in += r.bytes;
      else
        stats_.bytes_out += t.upload_pos;
      stats_.connections_opened += static_cast<uint64_t>(connects);
    }
    curl_multi_remove_handle(multi_, t.easy);
    idle_.push_back(t.easy);
    t.easy = nullptr;
    Finish(t, s);
  }

  void Finish(Transfer& t, Status s) {
    t.req->status = std::move(s);
    if (t.headers != nullptr) curl_slist_free_all(t.headers);
    t.headers = nullptr;
    Batch* b = t.batch;
    MutexLock l(b->mu);
    if (--b->remaining == 0) b->cv.NotifyAll();
  }

  void Run() {
    while (true) {
      std::deque<std::unique_ptr<Transfer>> fresh;
      bool stopping = false;
      {
        MutexLock l(mu_);
        fresh.swap(queue_);
        stopping = stopping_;
      }
      for (auto& t : fresh) Begin(std::move(t));
      if (stopping) {
        for (auto& t : running_) {
          curl_multi_remove_handle(multi_, t->easy);
          idle_.push_back(t->easy);
          t->easy = nullptr;
          Finish(*t, Cancelled("S3 client stopped"));
        }
        running_.clear();
        return;
      }
      int still = 0;
      curl_multi_perform(multi_, &still);
      int left = 0;
      while (CURLMsg* m = curl_multi_info_read(multi_, &left)) {
        if (m->msg != CURLMSG_DONE) continue;
        Transfer* t = nullptr;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
        const CURLcode code = m->data.result;
        auto it = std::find_if(running_.begin(), running_.end(),
                               [&](const auto& p) { return p.get() == t; });
        if (it == running_.end()) continue;
        std::unique_ptr<Transfer> owned = std::move(*it);
        running_.erase(it);
        Complete(*owned, code);
      }
      curl_multi_poll(multi_, nullptr, 0, 100, nullptr);
    }
  }

  S3Client* const owner_;
  const uint32_t connections_;
  CURLM* multi_ = nullptr;
  std::thread thread_;
  // Driver thread only.
  std::vector<std::unique_ptr<Transfer>> running_;
  std::vector<CURL*> idle_;

  mutable Mutex mu_;
  std::deque<std::unique_ptr<Transfer>> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  S3Stats stats_ GUARDED_BY(mu_);
};

S3Client::S3Client(const S3Options& options) : options_(options) {}

S3Client::~S3Client() {
  for (auto& d : drivers_) d->Stop();
}

Result<std::unique_ptr<S3Client>> S3Client::Create(const S3Options& options) {
  if (options.io_threads < 1 || options.io_threads > 64) {
    return InvalidArgument("S3 io_threads must be in [1, 64]");
  }
  if (options.max_connections < options.io_threads || options.max_connections > 1024) {
    return InvalidArgument("S3 max_connections must be in [io_threads, 1024]");
  }
  if (options.credentials.access_key_id.empty() || options.credentials.secret_access_key.empty()) {
    return InvalidArgument("S3 client without credentials");
  }
  if (options.region.empty()) return InvalidArgument("S3 region is empty");
  EnsureCurl();
  std::unique_ptr<S3Client> c(new S3Client(options));
  RANGEKV_RETURN_IF_ERROR(c->Init());
  return c;
}

Status S3Client::Init() {
  if (options_.endpoint.empty()) {
    scheme_ = "https";
    virtual_hosted_ = true;
    host_ = "s3." + options_.region + ".amazonaws.com";
  } else {
    std::string_view e = options_.endpoint;
    const size_t sep = e.find("://");
    if (sep == std::string_view::npos) {
      return InvalidArgument("S3 endpoint '" + options_.endpoint + "' is not an http(s) URL");
    }
    scheme_ = std::string(e.substr(0, sep));
    if (scheme_ != "http" && scheme_ != "https") {
      return InvalidArgument("S3 endpoint scheme must be http or https: " + options_.endpoint);
    }
    e.remove_prefix(sep + 3);
    const size_t slash = e.find('/');
    host_ = std::string(e.substr(0, slash));
    if (slash != std::string_view::npos) {
      base_ = std::string(e.substr(slash));
      while (!base_.empty() && base_.back() == '/') base_.pop_back();
    }
    if (host_.empty() || host_.find('@') != std::string::npos) {
      return InvalidArgument("S3 endpoint needs a host (and no user info): " + options_.endpoint);
    }
  }
  const uint32_t per = std::max<uint32_t>(1, options_.max_connections / options_.io_threads);
  for (uint32_t i = 0; i < options_.io_threads; ++i) {
    drivers_.push_back(std::make_unique<Driver>(this, per));
    RANGEKV_RETURN_IF_ERROR(drivers_.back()->Start());
  }
  return OkStatus();
}

std::string S3Client::Url(const S3Request& r, std::string* host, std::string* path) const {
  const std::string key = UriEncode(r.key, /*keep_slash=*/true);
  if (virtual_hosted_) {
    *host = r.bucket + "." + host_;
    *path = "/" + key;
  } else {
    *host = host_;
    *path = base_ + "/" + UriEncode(r.bucket, false) + (r.key.empty() ? "" : "/" + key);
  }
  std::string url = scheme_ + "://" + *host + *path;
  const std::string q = CanonicalQuery(r.query);
  if (!q.empty()) url += "?" + q;
  return url;
}

Status S3Client::Execute(std::span<S3Request* const> batch, Deadline deadline) {
  if (batch.empty()) return OkStatus();
  Driver::Batch waiter;
  {
    MutexLock l(waiter.mu);
    waiter.remaining = batch.size();
  }
  const std::string amz_date = AmzDate(std::chrono::duration_cast<std::chrono::seconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count());
  // Spread the batch over the drivers, a contiguous share each.
  const size_t n = drivers_.size();
  std::vector<std::vector<std::unique_ptr<Driver::Transfer>>> per(n);
  const uint32_t first = next_driver_.fetch_add(1, std::memory_order_relaxed);
  for (S3Request* r : batch) {
    if (Status bad = CheckSegments(*r); !bad.ok()) {
      for (S3Request* each : batch) each->status = bad;  // nothing was sent
      return bad;
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    S3Request& r = *batch[i];
    r.status = OkStatus();
    r.http_status = 0;
    r.bytes = 0;
    r.body.clear();
    r.etag.clear();
    auto t = std::make_unique<Driver::Transfer>();
    t->req = &r;
    t->batch = &waiter;
    t->deadline = deadline;
    std::string host, path;
    t->url = Url(r, &host, &path);
    const bool has_body = r.method == S3Method::kPut || r.method == S3Method::kPost;
    SigV4Request sr;
    sr.method = MethodName(r.method);
    sr.path = path;
    sr.query = r.query;
    sr.payload_sha256_hex = has_body ? "UNSIGNED-PAYLOAD" : std::string(kEmptySha256Hex);
    sr.headers = {
        {"host", host}, {"x-amz-date", amz_date}, {"x-amz-content-sha256", sr.payload_sha256_hex}};
    if (r.range_length > 0) {
      sr.headers.emplace_back("range", "bytes=" + std::to_string(r.range_offset) + "-" +
                                           std::to_string(r.range_offset + r.range_length - 1));
    }
    if (!options_.credentials.session_token.empty()) {
      sr.headers.emplace_back("x-amz-security-token", options_.credentials.session_token);
    }
    if (!r.content_type.empty()) sr.headers.emplace_back("content-type", r.content_type);
    const std::string auth =
        SigV4Authorization(sr, options_.credentials, options_.region, "s3", amz_date);
    for (const auto& [k, v] : sr.headers) {
      if (k != "host") t->header_lines.push_back(k + ": " + v);
    }
    t->header_lines.push_back("authorization: " + auth);
    per[(first + i * n / batch.size()) % n].push_back(std::move(t));
  }
  for (size_t d = 0; d < n; ++d) {
    if (!per[d].empty()) drivers_[d]->Submit(std::move(per[d]));
  }
  {
    MutexLock l(waiter.mu);
    waiter.cv.Wait(l, [&]() REQUIRES(waiter.mu) { return waiter.remaining == 0; });
  }
  for (S3Request* r : batch) {
    if (!r->status.ok()) return r->status;
  }
  return OkStatus();
}

Status S3Client::CreateBucket(std::string_view bucket, Deadline deadline) {
  S3Request r;
  r.method = S3Method::kPut;
  r.bucket = bucket;
  Status s = Execute(r, deadline);
  if (!s.ok() && r.http_status == 409) return OkStatus();  // BucketAlreadyOwnedByYou
  return s;
}

Status S3Client::PutObject(std::string_view bucket, std::string_view key,
                           std::span<const uint8_t> bytes, Deadline deadline) {
  S3Request r;
  r.method = S3Method::kPut;
  r.bucket = bucket;
  r.key = key;
  r.upload = bytes;
  return Execute(r, deadline);
}

Result<std::vector<uint8_t>> S3Client::GetObject(std::string_view bucket, std::string_view key,
                                                 uint64_t max_bytes, Deadline deadline) {
  S3Request r;
  r.bucket = bucket;
  r.key = key;
  r.max_body_bytes = max_bytes;
  RANGEKV_RETURN_IF_ERROR(Execute(r, deadline));
  return std::move(r.body);
}

Status S3Client::DeleteObject(std::string_view bucket, std::string_view key, Deadline deadline) {
  S3Request r;
  r.method = S3Method::kDelete;
  r.bucket = bucket;
  r.key = key;
  Status s = Execute(r, deadline);
  if (s.code() == StatusCode::kNotFound) return OkStatus();
  return s;
}

Result<std::string> S3Client::CreateMultipartUpload(std::string_view bucket, std::string_view key,
                                                    Deadline deadline) {
  S3Request r;
  r.method = S3Method::kPost;
  r.bucket = bucket;
  r.key = key;
  r.query = {{"uploads", ""}};
  RANGEKV_RETURN_IF_ERROR(Execute(r, deadline));
  std::string id = XmlText(
      std::string_view(reinterpret_cast<const char*>(r.body.data()), r.body.size()), "UploadId");
  if (id.empty()) return IoError("CreateMultipartUpload " + r.key + ": no UploadId in the reply");
  return id;
}

Status S3Client::CompleteMultipartUpload(std::string_view bucket, std::string_view key,
                                         std::string_view upload_id,
                                         std::span<const std::string> etags, Deadline deadline) {
  std::string xml = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < etags.size(); ++i) {
    xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags[i] +
           "</ETag></Part>";
  }
  xml += "</CompleteMultipartUpload>";
  S3Request r;
  r.method = S3Method::kPost;
  r.bucket = bucket;
  r.key = key;
  r.query = {{"uploadId", std::string(upload_id)}};
  r.upload = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(xml.data()), xml.size());
  r.content_type = "application/xml";
  RANGEKV_RETURN_IF_ERROR(Execute(r, deadline));
  // S3 may answer 200 with an <Error> body when the completion failed late.
  std::string_view body(reinterpret_cast<const char*>(r.body.data()), r.body.size());
  if (body.find("<Error>") != std::string_view::npos) {
    return Unavailable("CompleteMultipartUpload " + r.key + ": " + XmlText(body, "Code"));
  }
  return OkStatus();
}

Status S3Client::AbortMultipartUpload(std::string_view bucket, std::string_view key,
                                      std::string_view upload_id, Deadline deadline) {
  S3Request r;
  r.method = S3Method::kDelete;
  r.bucket = bucket;
  r.key = key;
  r.query = {{"uploadId", std::string(upload_id)}};
  Status s = Execute(r, deadline);
  if (s.code() == StatusCode::kNotFound) return OkStatus();
  return s;
}

Result<std::vector<S3Client::ListedObject>> S3Client::ListObjects(std::string_view bucket,
                                                                  std::string_view prefix,
                                                                  std::string_view continuation,
                                                                  std::string* next,
                                                                  Deadline deadline) {
  S3Request r;
  r.bucket = bucket;
  r.query = {{"list-type", "2"}, {"prefix", std::string(prefix)}};
  if (!continuation.empty()) r.query.emplace_back("continuation-token", std::string(continuation));
  RANGEKV_RETURN_IF_ERROR(Execute(r, deadline));
  std::string_view xml(reinterpret_cast<const char*>(r.body.data()), r.body.size());
  std::vector<ListedObject> out;
  size_t at = 0;
  while (true) {
    size_t end = 0;
    const std::string item = XmlText(xml, "Contents", at, &end);
    if (end == std::string_view::npos) break;
    ListedObject o;
    o.key = XmlText(item, "Key");
    o.size = std::strtoull(XmlText(item, "Size").c_str(), nullptr, 10);
    out.push_back(std::move(o));
    at = end;
  }
  *next = XmlText(xml, "IsTruncated") == "true" ? XmlText(xml, "NextContinuationToken") : "";
  return out;
}

S3Stats S3Client::stats() const {
  S3Stats total;
  for (const auto& d : drivers_) {
    const S3Stats s = d->stats();
    total.requests += s.requests;
    total.gets += s.gets;
    total.puts += s.puts;
    total.other += s.other;
    total.failed += s.failed;
    total.bytes_in += s.bytes_in;
    total.bytes_out += s.bytes_out;
    total.connections_opened += s.connections_opened;
  }
  return total;
}

}  // namespace rangekv::remote
