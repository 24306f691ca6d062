// Unit tests of the cluster tier's pieces that need no server: SigV4 against AWS's published
// examples, the credential chain, address parsing, and the manifest / run entry codecs.
#include <gtest/gtest.h>

#include "remote/aws_auth.h"
#include "remote/manifest.h"
#include "remote/redis_client.h"
#include "remote/s3_client.h"

namespace rangekv::remote {
namespace {

AwsCredentials ExampleKeys() {
  AwsCredentials c;
  c.access_key_id = "AKIAIOSFODNN7EXAMPLE";
  c.secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  return c;
}

// docs.aws.amazon.com, "Signature Calculations for the Authorization Header: Transferring
// Payload in a Single Chunk (AWS Signature Version 4)", example "GET Object".
TEST(SigV4, MatchesAwsGetObjectExample) {
  SigV4Request r;
  r.method = "GET";
  r.path = "/test.txt";
  r.payload_sha256_hex = std::string(kEmptySha256Hex);
  r.headers = {{"host", "examplebucket.s3.amazonaws.com"},
               {"range", "bytes=0-9"},
               {"x-amz-content-sha256", std::string(kEmptySha256Hex)},
               {"x-amz-date", "20130524T000000Z"}};
  EXPECT_EQ(SigV4Authorization(r, ExampleKeys(), "us-east-1", "s3", "20130524T000000Z"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

// The same page, example "Get Bucket (List Objects)": query parameters sorted and encoded.
TEST(SigV4, MatchesAwsListObjectsExample) {
  SigV4Request r;
  r.method = "GET";
  r.path = "/";
  r.query = {{"prefix", "J"}, {"max-keys", "2"}};
  r.payload_sha256_hex = std::string(kEmptySha256Hex);
  r.headers = {{"host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-content-sha256", std::string(kEmptySha256Hex)},
               {"x-amz-date", "20130524T000000Z"}};
  const std::string auth =
      SigV4Authorization(r, ExampleKeys(), "us-east-1", "s3", "20130524T000000Z");
  EXPECT_NE(auth.find("Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"),
            std::string::npos)
      << auth;
  EXPECT_EQ(CanonicalQuery(r.query), "max-keys=2&prefix=J");
}

TEST(SigV4, EncodesKeysAndDates) {
  EXPECT_EQ(UriEncode("a b/c~d+e", true), "a%20b/c~d%2Be");
  EXPECT_EQ(UriEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(AmzDate(1369353600), "20130524T000000Z");
  EXPECT_EQ(Sha256Hex(""), kEmptySha256Hex);
}

TEST(AwsCredentials, ChainOrderEnvironmentThenFiles) {
  AwsEnvironment env;
  env.vars["HOME"] = "/home/u";
  env.files["/home/u/.aws/credentials"] =
      "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = filesecret\n"
      "[other]\naws_access_key_id=OTHER\naws_secret_access_key=othersecret\n"
      "aws_session_token=tok\n";
  env.files["/home/u/.aws/config"] =
      "[profile third]\nregion = eu-west-1\n"
      "aws_access_key_id=CFG\naws_secret_access_key=cfgsecret\n";
  auto c = LoadAwsCredentials(env);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "FILEKEY");
  EXPECT_EQ(c->source, "file:/home/u/.aws/credentials[default]");
  env.vars["AWS_PROFILE"] = "other";
  c = LoadAwsCredentials(env);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->access_key_id, "OTHER");
  EXPECT_EQ(c->session_token, "tok");
  env.vars["AWS_PROFILE"] = "third";
  c = LoadAwsCredentials(env);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->access_key_id, "CFG");
  EXPECT_EQ(LoadAwsRegion(env), "eu-west-1");
  env.vars["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  env.vars["AWS_SECRET_ACCESS_KEY"] = "envsecret";
  c = LoadAwsCredentials(env);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->access_key_id, "ENVKEY");
  EXPECT_EQ(c->source, "environment");
  // The description shows 4 characters of the key id and never the secret.
  EXPECT_EQ(c->Describe(), "ENVK... (environment)");
  env.vars["AWS_REGION"] = "ap-south-1";
  EXPECT_EQ(LoadAwsRegion(env), "ap-south-1");
  EXPECT_EQ(LoadAwsCredentials(AwsEnvironment{}).status().code(), StatusCode::kNotFound);
}

TEST(RedisUrl, ParsesAndRefuses) {
  auto a = ParseRedisUrl("redis://:pw@10.0.0.1:7000/3");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "10.0.0.1");
  EXPECT_EQ(a->port, 7000);
  EXPECT_EQ(a->db, 3u);
  EXPECT_EQ(a->password, "pw");
  EXPECT_EQ(a->Describe(), "10.0.0.1:7000/3");  // no password
  a = ParseRedisUrl("redis://user:pw@h");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->user, "user");
  EXPECT_EQ(a->port, 6379);
  for (const char* bad : {"rediss://h:1/0", "h:1", "redis://h:0/0", "redis://h:70000",
                          "redis://h:1/x", "redis://:1/0"}) {
    EXPECT_EQ(ParseRedisUrl(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Xml, ExtractsTags) {
  const std::string x =
      "<R><UploadId>a&amp;b</UploadId><Contents><Key>k1</Key></Contents>"
      "<Contents><Key>k2</Key></Contents></R>";
  EXPECT_EQ(XmlText(x, "UploadId"), "a&b");
  size_t end = 0;
  EXPECT_EQ(XmlText(XmlText(x, "Contents", 0, &end), "Key"), "k1");
  EXPECT_EQ(XmlText(XmlText(x, "Contents", end), "Key"), "k2");
  EXPECT_EQ(XmlText(x, "Missing"), "");
}

PackManifest SampleManifest() {
  PackManifest m;
  m.ns = {0x1234, 0x5678};
  m.geometry.layers = 4;
  m.geometry.kv_heads_per_rank = 2;
  m.geometry.head_size = 64;
  m.geometry.dtype_bytes = 2;
  m.geometry.block_size = 16;
  m.geometry.token_bytes = 512;
  m.geometry.stripe_bytes = 1 << 20;
  m.geometry.tokens_per_stripe = 2048;
  m.geometry.pack_bytes = 4 << 20;
  m.store_uuid_lo = 7;
  m.store_uuid_hi = 9;
  m.slot = 3;
  m.generation = (5ull << 32) | 2;
  m.path_begin = 4096;
  m.stored_tokens = 1000;
  m.parent_key.fill(0xab);
  m.digest_block_tokens = 256;
  m.digest_seed = 42;
  LayOutObject(&m, 2);
  m.part_bytes = m.stripe_pitch * 2;
  for (uint64_t i = 0; i < m.stored_tokens; ++i) m.tokens.push_back(static_cast<int32_t>(i * 7));
  for (uint64_t i = 0; i < m.blocks_per_layer() * m.geometry.layers; ++i) m.digests.push_back(i);
  m.created_unix_ns = 123;
  return m;
}

TEST(Manifest, RoundTripsAndLaysOutLayers) {
  const PackManifest m = SampleManifest();
  EXPECT_EQ(m.stripe_pitch, 512000u);  // 1000 x 512, a multiple of 4 KiB already
  EXPECT_EQ(StripePitch(1001, 512), 516096u);
  EXPECT_EQ(m.extents.size(), 2u);
  EXPECT_EQ(m.LayerOffset(3), 3 * m.stripe_pitch);
  const auto bytes = EncodeManifest(m);
  auto d = DecodeManifest(bytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, m);
}

TEST(Manifest, RejectsEveryFlippedByteAndEveryCut) {
  const auto bytes = EncodeManifest(SampleManifest());
  for (size_t i = 0; i < bytes.size(); i += 13) {
    auto b = bytes;
    b[i] ^= 0x40;
    EXPECT_FALSE(DecodeManifest(b).ok()) << "flip at " << i;
  }
  for (size_t n = 0; n < bytes.size(); n += 97) {
    EXPECT_FALSE(DecodeManifest(std::span(bytes).first(n)).ok()) << "cut at " << n;
  }
  auto v = bytes;
  v[8] = 2;  // version 2
  EXPECT_EQ(DecodeManifest(v).status().code(), StatusCode::kWrongVersion);
}

TEST(RunEntry, RoundTripsAndRejectsDamage) {
  RunEntry e;
  e.object_id = "0000000000000007-3-21474836482";
  e.path_begin = 4096;
  e.object_bytes = 4 * 516096;
  e.stripe_pitch = 516096;
  e.generation = 21474836482;
  e.tokens = {1, 2, 3, -4};
  const auto bytes = EncodeRunEntry(e);
  auto d = DecodeRunEntry(bytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, e);
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto b = bytes;
    b[i] ^= 1;
    EXPECT_FALSE(DecodeRunEntry(b).ok()) << i;
  }
  RunEntry bad = e;
  bad.object_id = "../etc";
  EXPECT_FALSE(DecodeRunEntry(EncodeRunEntry(bad)).ok());
}

}  // namespace
}  // namespace rangekv::remote
