// The count-only device: a device whose kernels validate their arguments but move nothing. With
// PayloadFreeEnv (testing/payload_free_env.h) the whole pipeline runs at the paper's full 6 GiB
// geometry with no payload bytes, so its work-unit counters can be asserted at full size.
//
// Thread-safety: thread-safe (as the HostDevice it wraps).
#pragma once

#include <memory>

#include "device/device.h"

namespace rangekv::testing {

// A device that is `inner` (a HostDevice) except that Scatter and Gather validate their
// arguments and move nothing, and Digest validates its arguments and writes 0 for every span.
// Banks and paged KV are never touched by a kernel.
Result<std::unique_ptr<Device>> MakeCountOnlyDevice();

}  // namespace rangekv::testing
