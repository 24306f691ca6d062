// Anonymous host memory for I/O buffers (banks, pinned staging), backed by transparent huge
// pages where the kernel grants them.
//
// Why huge pages: an O_DIRECT request goes to the disk as bios of at most max_segments
// physically contiguous pieces (254 on a virtio disk, queue/max_segments). A 1 MiB write or
// read from 4 KiB frames scattered in physical memory is 256 pieces, so the block layer cuts
// it into two requests (1016 KiB + 8 KiB); from 2 MiB pages it is one, and neighbouring pieces
// can even merge. On the CPU dev VM's virtio disk, 16 threads writing 252 MiB in 1 MiB pieces
// reached 1.66-1.77 GiB/s from 4 KiB pages (504 disk requests per pass) against 2.80 GiB/s from
// huge pages (242 requests), docs/benchmarks.md "The store's banks on 4 KiB pages".
//
// The mapping is aligned to kHugePageBytes when it is at least that large, and advised
// MADV_HUGEPAGE (best effort: with transparent huge pages off, or "never", the memory is
// ordinary 4 KiB pages and everything still works). Pages are faulted in on first touch.
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
