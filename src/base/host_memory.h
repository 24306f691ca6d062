// Anonymous host memory for I/O buffers (banks, pinned staging), backed by transparent huge
// pages where the kernel grants them.
//
// Why huge pages: the virtio disks we measured serve O_DIRECT requests from huge pages much
// faster than from 4 KiB frames. On the CPU dev VM, 16 threads writing 252 MiB in 1 MiB pieces
// reached 1.66-1.77 GiB/s from 4 KiB pages and 2.80 GiB/s from huge pages (one process, the two
// alternated), and `bench store` went from 0.81-0.88 to 0.91-1.04 of its best write ceiling; on
// the H200 machine's virtio disk, 32 MiB reads into pinned staging went from 0.65 to 0.89-0.97
// of the read ceiling (docs/benchmarks.md, "I/O memory on huge pages"). Memory from scattered
// 4 KiB frames is up to 256 separate pieces per MiB for the block layer and the hypervisor (a
// virtio request carries at most max_segments = 254); from 2 MiB pages it is one or two.
//
// The mapping is aligned to kHugePageBytes when it is at least that large, and advised
// MADV_HUGEPAGE (best effort: with transparent huge pages off, or "never", the memory is
// ordinary 4 KiB pages and everything still works). Pages are faulted in on first touch, so
// banks a workload never uses cost no memory.
//
// The price: a huge page's first touch. Where the hypervisor takes freed guest memory back
// (free page reporting, as on the CPU dev VM: a free 2 MiB block is handed to the host and
// faults there again when reused), faulting in 1 GiB of huge pages took 1.7-8.6 s against
// 0.5-0.6 s for 4 KiB pages, which come mostly from blocks the host still backs; reusing huge
// pages just freed took 0.2 s. There an engine's first store and first restore pay +0.8 s and
// +0.6 s once. Faulting the banks in ahead of use, on a background thread, was tried: it made
// every engine pay for banks it never used (a 768 MiB `bench restore`: 22.9 s of wall against
// 14.9 s), not kept.
#pragma once

#include <cstdint>

#include "rangekv/status.h"

namespace rangekv {

inline constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;  // x86-64's transparent huge page

// The system page size (sysconf(_SC_PAGESIZE)).
uint64_t PageBytes();

// Maps AlignUp(bytes, PageBytes()) bytes of zeroed, read-write anonymous memory. `what` names
// the memory in the error (kResourceExhausted when mmap fails, kInvalidArgument for 0 bytes).
Result<uint8_t*> MapIoMemory(uint64_t bytes, const char* what);

// Unmaps memory from MapIoMemory(bytes); logs a failure.
void UnmapIoMemory(void* p, uint64_t bytes);

// Bytes of the mapping that contains `p` backed by transparent huge pages (AnonHugePages of
// /proc/self/smaps; for tests and diagnostics, not for hot paths); 0 when it cannot tell.
uint64_t HugePageBytesOfMapping(const void* p);

// Whether this kernel may back MADV_HUGEPAGE memory with huge pages
// (/sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise").
bool TransparentHugePagesAdvisable();

}  // namespace rangekv
