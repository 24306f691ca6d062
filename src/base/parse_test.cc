// Strict number parsing: what serve's quotas and the benchmarks' counts accept and refuse.
#include "base/parse.h"

#include <gtest/gtest.h>

namespace rangekv {
namespace {

TEST(ParseTest, ByteSizesInEveryUnit) {
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("512B"), 512u);
  EXPECT_EQ(*ParseByteSize("64KiB"), 64u << 10);
  EXPECT_EQ(*ParseByteSize("16MiB"), 16u << 20);
  EXPECT_EQ(*ParseByteSize("5GiB"), 5ull << 30);
  EXPECT_EQ(*ParseByteSize("2TiB"), 2ull << 40);
  EXPECT_EQ(*ParseByteSize("16777215TiB"), 16777215ull << 40);  // the largest whole TiB count
}

TEST(ParseTest, ByteSizesRefuseSignsOverflowAndNonsense) {
  // Each of these was accepted by serve's parser before (the first two wrapped around).
  for (const char* bad :
       {"-5GiB", "99999999999TiB", "16777216TiB", "18446744073709551616", "+5GiB", " 5GiB", "5GiB ",
        "5 GiB", "5gib", "5G", "1.5GiB", "0x10", "GiB", "", "5GiBB", "-0"}) {
    auto r = ParseByteSize(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "' parsed as " << (r.ok() ? *r : 0);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
          << r.status().ToString();
      EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
    }
  }
}

TEST(ParseTest, CountsAreDigitsOnlyWithinTheirBound) {
  EXPECT_EQ(*ParseCount("0"), 0u);
  EXPECT_EQ(*ParseCount("192"), 192u);
  EXPECT_EQ(*ParseCount("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(*ParseCount("7", 7), 7u);
  for (const char* bad : {"-3", "18446744073709551616", "3x", "0x3", "", "+3", "3 "}) {
    EXPECT_FALSE(ParseCount(bad).ok()) << bad;
  }
  EXPECT_FALSE(ParseCount("8", 7).ok());
}

}  // namespace
}  // namespace rangekv
