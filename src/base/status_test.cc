#include "rangekv/status.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace rangekv {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  RANGEKV_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(OkStatus().ok());
  Status s = InvalidArgument("bad");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "invalid_argument: bad");
  EXPECT_EQ(s.WithContext("ctx").ToString(), "invalid_argument: ctx: bad");
  EXPECT_EQ(ErrnoStatus(ENOSPC, "write").code(), StatusCode::kNoSpace);
  EXPECT_EQ(ErrnoStatus(EIO, "read").code(), StatusCode::kIoError);
}

TEST(StatusTest, ResultPropagates) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), StatusCode::kInvalidArgument);
  Result<int> from_ok = OkStatus();
  EXPECT_FALSE(from_ok.ok());
  EXPECT_EQ(from_ok.status().code(), StatusCode::kInternal);
}

TEST(StatusTest, EveryCodeHasAName) {
  for (int c = 0; c <= static_cast<int>(kLastStatusCode); ++c) {
    EXPECT_NE(StatusCodeName(static_cast<StatusCode>(c)), "unknown") << c;
  }
}

}  // namespace
}  // namespace rangekv
