// The identity record's text: valid JSON for any field contents (quotes, backslashes, control
// characters, UTF-8), every field of the namespace present, and kept or replaced atomically.
#include "persist/identity_record.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/temp_dir.h"

namespace rangekv::persist {
namespace {

TEST(IdentityRecordTest, RendersEveryFieldAsJson) {
  ModelSpec spec;
  spec.model_id = "we\"ird\\path\n\x01/mod\xc3\xa9le";
  spec.revision = "abc123";
  spec.semantic_config = R"({"rope":{"rope_theta":10000},"weights":"x"})";
  spec.kv_dtype = "bf16";
  spec.layout = KvCacheLayout::kCpuBlock;
  spec.tp_size = 2;
  spec.tp_rank = 1;
  spec.tags = {"lora:a", "t\"2"};
  const NamespaceId ns{0x1234, 0xabcd};
  const std::string text = RenderIdentityRecord(spec, ns);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["format"], kIdentityRecordFormat);
  EXPECT_EQ(j["namespace"], ns.ToHex());
  EXPECT_EQ(j["model_id"], spec.model_id);
  EXPECT_EQ(j["revision"], "abc123");
  EXPECT_EQ(j["semantic_config"], spec.semantic_config);
  EXPECT_EQ(j["kv_dtype"], "bf16");
  EXPECT_EQ(j["layout"], "cpu_block");
  EXPECT_EQ(j["tp_size"], 2);
  EXPECT_EQ(j["tp_rank"], 1);
  EXPECT_EQ(j["tags"], (std::vector<std::string>{"lora:a", "t\"2"}));
}

TEST(IdentityRecordTest, WrittenOnceAndReplacedWhenDifferent) {
  rangekv::testing::TempDir dir;
  Env* env = DefaultEnv();
  const StorePaths paths(dir.path());
  EXPECT_FALSE(ReadIdentityRecord(env, paths).has_value());
  ASSERT_TRUE(WriteIdentityRecord(env, paths, "{\"a\":1}\n", 0600).ok());
  EXPECT_EQ(ReadIdentityRecord(env, paths), "{\"a\":1}\n");
  auto info = env->Stat(paths.identity());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->permissions & 0777, 0600u);
  ASSERT_TRUE(WriteIdentityRecord(env, paths, "{\"a\":2}\n", 0600).ok());
  EXPECT_EQ(ReadIdentityRecord(env, paths), "{\"a\":2}\n");
  EXPECT_FALSE(env->FileExists(paths.identity_temp()));
  EXPECT_EQ(
      WriteIdentityRecord(env, paths, std::string(kMaxIdentityRecordBytes + 1, 'x'), 0600).code(),
      StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rangekv::persist
