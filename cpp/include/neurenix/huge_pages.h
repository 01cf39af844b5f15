// Host memory the simulation walks on every run, backed by
// transparent huge pages where the host offers them.
//
// A run touches a few cache lines of every tile's memory and of every vertex
// object in each step: hundreds of megabytes spread over the address space.
// With 4 KiB pages nearly each of those touches also misses the TLB (and in a
// virtual machine a TLB miss walks two page tables); with 2 MiB pages the
// same bytes need 512 times fewer translations. The kernel is only asked
// (madvise): where it declines, the memory is ordinary pages and everything
// works the same.
#pragma once

#include <cstddef>
#include <cstdint>

namespace neurenix {

constexpr size_t kHugePageBytes = size_t{1} << 21;

// `bytes` (rounded up to whole huge pages) of zeroed memory, aligned to a
// huge page, or nullptr if the host has no such mapping to give.
// Release with release_huge_pages(p, bytes).
void* map_huge_pages(size_t bytes);
void release_huge_pages(void* p, size_t bytes);

// Small objects created by the thousand and read on every run (the
// vertices), packed into shared huge-page chunks. Each chunk counts its live
// objects and is returned to the host when the last one goes. Thread-safe.
void* allocate_packed(size_t bytes);
void free_packed(void* p, size_t bytes);

}  // namespace neurenix
