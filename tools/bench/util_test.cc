#include "tools/bench/util.h"

#include <gtest/gtest.h>

namespace rangekv::tools {
namespace {

TEST(ParseCount, DigitsOnlyWithinBounds) {
  EXPECT_EQ(*ParseCount("0", "n"), 0u);
  EXPECT_EQ(*ParseCount("6144", "n"), 6144u);
  EXPECT_EQ(*ParseCount("18446744073709551615", "n"), UINT64_MAX);
  EXPECT_EQ(*ParseCount("16", "n", 1, 64), 16u);
}

TEST(ParseCount, RefusesWhatStoiAndStoullAccepted) {
  // std::stoi took "4abc" as 4 and std::stoull "-1" as 2^64 - 1; each is a clear error now.
  for (const char* bad : {"", " 4", "4 ", "+4", "-1", "4abc", "1.5", "0x10", "1e3", "4,"}) {
    const Result<uint64_t> r = ParseCount(bad, "--n");
    ASSERT_FALSE(r.ok()) << "'" << bad << "'";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--n"), std::string::npos);
  }
  EXPECT_FALSE(ParseCount("18446744073709551616", "n").ok());  // overflows
  EXPECT_FALSE(ParseCount("0", "n", 1, 64).ok());
  EXPECT_FALSE(ParseCount("65", "n", 1, 64).ok());
}

TEST(ParseBytes, UnitsAndWholeBytes) {
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("768MiB"), 768ull << 20);
  EXPECT_EQ(*ParseBytes("1.5GiB"), 3ull << 29);
  EXPECT_EQ(*ParseBytes("64 KiB"), 64ull << 10);
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_FALSE(ParseBytes("12 parsecs").ok());
  EXPECT_FALSE(ParseBytes("0").ok());
  EXPECT_FALSE(ParseBytes("0.5B").ok());
  EXPECT_EQ(FormatBytes(768ull << 20), "768 MiB");
  EXPECT_EQ(FormatBytes(3ull << 29), "1.50 GiB");
}

TEST(SplitList, TrimsAndDropsEmptyItems) {
  EXPECT_EQ(SplitList(" a, b,,c "), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(SplitList("").empty());
}

TEST(RandomTokens, SeededAndInTheVocabulary) {
  const std::vector<int32_t> a = RandomTokens(1000, 7);
  EXPECT_EQ(a, RandomTokens(1000, 7));
  EXPECT_NE(a, RandomTokens(1000, 8));
  for (int32_t t : a) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 128000);
  }
}

}  // namespace
}  // namespace rangekv::tools
