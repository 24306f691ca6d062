#include "base/cpus.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

namespace rangekv {
namespace {

// A thread pinned to one CPU counts one; the rest of the process keeps its own mask.
TEST(UsableCpusTest, FollowsTheAffinityMask) {
  cpu_set_t all;
  CPU_ZERO(&all);
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  const uint32_t before = UsableCpus();
  EXPECT_EQ(before, static_cast<uint32_t>(CPU_COUNT(&all)));
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  uint32_t pinned = 0;
  std::thread t([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (sched_setaffinity(0, sizeof one, &one) == 0) pinned = UsableCpus();
  });
  t.join();
  EXPECT_EQ(pinned, 1u);
  EXPECT_EQ(UsableCpus(), before);
}

}  // namespace
}  // namespace rangekv
