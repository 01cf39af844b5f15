#include "neurenix/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>

namespace neurenix {
namespace {

size_t whole_pages(size_t bytes) { return (std::max<size_t>(bytes, 1) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes; }

// A chunk of packed objects: this header, then the objects. `live` counts
// them, plus one while the chunk is the one being filled.
struct alignas(64) Chunk {
  std::atomic<int64_t> live{1};
};

std::mutex chunk_mu;
Chunk* filling = nullptr;  // guarded by chunk_mu
size_t filled = 0;         // bytes of `filling` in use, header included

void drop(Chunk* c) {
  if (c->live.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    c->~Chunk();
    release_huge_pages(c, kHugePageBytes);
  }
}

}  // namespace

void* map_huge_pages(size_t bytes) {
  const size_t len = whole_pages(bytes);
  // Map one huge page more than needed and trim both ends to an aligned run:
  // the kernel backs only aligned 2 MiB runs with huge pages.
  void* m = mmap(nullptr, len + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  const uintptr_t raw = reinterpret_cast<uintptr_t>(m);
  const uintptr_t at = (raw + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  if (at > raw) munmap(m, at - raw);
  if (const size_t tail = raw + kHugePageBytes - at; tail) munmap(reinterpret_cast<void*>(at + len), tail);
  madvise(reinterpret_cast<void*>(at), len, MADV_HUGEPAGE);  // a hint: refused, the pages stay small
  return reinterpret_cast<void*>(at);
}

void release_huge_pages(void* p, size_t bytes) {
  if (p) munmap(p, whole_pages(bytes));
}

void* allocate_packed(size_t bytes) {
  constexpr size_t kAlign = 16, kHeader = sizeof(Chunk);
  const size_t need = (bytes + kAlign - 1) / kAlign * kAlign;
  if (need > (kHugePageBytes - kHeader) / 4) return ::operator new(bytes);  // big: on its own
  std::lock_guard<std::mutex> l(chunk_mu);
  if (filling == nullptr || filled + need > kHugePageBytes) {
    void* m = map_huge_pages(kHugePageBytes);
    if (m == nullptr) throw std::bad_alloc();
    if (filling) drop(filling);
    filling = new (m) Chunk();
    filled = kHeader;
  }
  void* p = reinterpret_cast<uint8_t*>(filling) + filled;
  filled += need;
  filling->live.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void free_packed(void* p, size_t bytes) {
  if (p == nullptr) return;
  constexpr size_t kAlign = 16, kHeader = sizeof(Chunk);
  const size_t need = (bytes + kAlign - 1) / kAlign * kAlign;
  if (need > (kHugePageBytes - kHeader) / 4) {
    ::operator delete(p);
    return;
  }
  drop(reinterpret_cast<Chunk*>(reinterpret_cast<uintptr_t>(p) & ~(uintptr_t{kHugePageBytes} - 1)));
}

}  // namespace neurenix
