// The CPUs this process may run on.
#pragma once

#include <cstdint>

namespace rangekv {

// The number of CPUs in this thread's affinity mask (what `nproc` prints): a process pinned to
// a share of the node (taskset, a cgroup's cpuset, one serving instance per NUMA node) sizes
// its thread pools to that share, not to every CPU of the machine. At least 1;
// std::thread::hardware_concurrency() when the mask cannot be read.
uint32_t UsableCpus();

}  // namespace rangekv
