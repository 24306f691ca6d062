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

// The store service sends codes by number: the ones a client of an older build knows keep theirs.
TEST(StatusTest, CodeNumbersStayPut) {
  EXPECT_EQ(static_cast<int>(StatusCode::kUnavailable), 25);
  EXPECT_EQ(static_cast<int>(StatusCode::kInternal), 27);
  EXPECT_EQ(static_cast<int>(StatusCode::kDeadlineExceeded), 29);
  EXPECT_EQ(static_cast<int>(StatusCode::kNotSupported), 30);
  EXPECT_EQ(static_cast<int>(StatusCode::kDeviceFault), 31);
}

// The three codes that once were one (kUnavailable) stay three, with the names the Python
// classes are looked up by.
TEST(StatusTest, MissingThingsHaveDistinctCodes) {
  EXPECT_EQ(Unavailable("x").code(), StatusCode::kUnavailable);
  EXPECT_EQ(NotSupported("x").code(), StatusCode::kNotSupported);
  EXPECT_EQ(DeviceFault("x").code(), StatusCode::kDeviceFault);
  EXPECT_EQ(StatusCodeName(StatusCode::kUnavailable), "unavailable");
  EXPECT_EQ(StatusCodeName(StatusCode::kNotSupported), "not_supported");
  EXPECT_EQ(StatusCodeName(StatusCode::kDeviceFault), "device_fault");
  EXPECT_NE(Unavailable("x"), NotSupported("x"));
  EXPECT_NE(Unavailable("x"), DeviceFault("x"));
}

}  // namespace
}  // namespace rangekv
