// CopyList (graph.h): growth in place, tails faulted in on a helper thread.
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "neurenix/graph.h"

// (Linux 5.14; older C library headers lack the name.)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace neurenix {

namespace {

size_t page_bytes() {
  static const size_t bytes = [] {
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return bytes;
}

size_t round_to_pages(size_t bytes) {
  const size_t p = page_bytes();
  return (bytes + p - 1) / p * p;
}

bool overlaps(const char* a, size_t an, const char* b, size_t bn) { return a < b + bn && b < a + an; }

// One thread for the process, started on first use where the kernel can
// populate pages (tried once on a page of its own), that faults in the
// ranges it is given, the latest first (the one the lowering is writing),
// a chunk at a time. A list forgets its ranges, and waits for the chunk in
// progress, before it remaps or unmaps its memory (forget_within): the
// helper never touches an address the list no longer holds. Its state is
// never destroyed (the thread waits on it for the life of the process); a
// child after fork() starts its own.
class Prefaulter {
 public:
  // The helper, or null where there is none (no kernel support, or the
  // thread could not be started).
  static Prefaulter* get() noexcept {
    std::call_once(atfork_once_, [] {
      // The forking thread holds the lock across fork(), so that the child
      // finds it consistent; the child has no helper thread.
      pthread_atfork([] { instance_mu_.lock(); }, [] { instance_mu_.unlock(); },
                     [] {
                       instance_ = nullptr;
                       tried_ = false;
                       instance_mu_.unlock();
                     });
    });
    std::lock_guard<std::mutex> l(instance_mu_);
    if (!tried_) {
      tried_ = true;
      try {
        if (supported()) instance_ = new Prefaulter();
      } catch (...) {
        instance_ = nullptr;  // no thread: the lowering faults its pages in itself
      }
    }
    return instance_;
  }
  static Prefaulter* get_if_started() noexcept {
    std::lock_guard<std::mutex> l(instance_mu_);
    return instance_;
  }

  void populate_later(char* p, size_t bytes) noexcept {
    if (bytes == 0) return;
    try {
      std::lock_guard<std::mutex> l(mu_);
      ranges_.push_back(Range{p, bytes});
    } catch (...) {
      return;  // (no memory for the entry: the pages fault in where written)
    }
    work_.notify_one();
  }
  // Drops the ranges inside [p, p + bytes) and waits for a chunk in
  // progress there.
  void forget_within(char* p, size_t bytes) noexcept {
    std::unique_lock<std::mutex> l(mu_);
    ranges_.erase(std::remove_if(ranges_.begin(), ranges_.end(),
                                 [&](const Range& r) { return overlaps(r.at, r.bytes, p, bytes); }),
                  ranges_.end());
    chunk_done_.wait(l, [&] { return !busy_.bytes || !overlaps(busy_.at, busy_.bytes, p, bytes); });
  }
  void forget_all() noexcept {
    std::lock_guard<std::mutex> l(mu_);
    ranges_.clear();
  }

 private:
  struct Range {
    char* at;
    size_t bytes;
  };
  // A few milliseconds of faults at most: what a list that remaps waits for.
  static constexpr size_t kChunkBytes = size_t{2} << 20;

  Prefaulter() { std::thread([this] { loop(); }).detach(); }

  static bool supported() {
    void* p = mmap(nullptr, page_bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    const bool ok = madvise(p, page_bytes(), MADV_POPULATE_WRITE) == 0;
    munmap(p, page_bytes());
    return ok;
  }

  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      work_.wait(l, [&] { return !ranges_.empty(); });
      Range& r = ranges_.back();
      busy_ = Range{r.at, std::min(r.bytes, kChunkBytes)};
      r.at += busy_.bytes;
      r.bytes -= busy_.bytes;
      if (r.bytes == 0) ranges_.pop_back();
      l.unlock();
      // (Errors are the kernel's to report on a range the list still holds:
      // out of memory; the lowering then faults those pages in itself.)
      madvise(busy_.at, busy_.bytes, MADV_POPULATE_WRITE);
      l.lock();
      busy_ = Range{nullptr, 0};
      chunk_done_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable work_, chunk_done_;
  std::vector<Range> ranges_;
  Range busy_{nullptr, 0};

  static inline std::mutex instance_mu_;
  static inline Prefaulter* instance_ = nullptr;
  static inline bool tried_ = false;
  static inline std::once_flag atfork_once_;
};

void forget_prefaulting(Copy* data, size_t bytes) {
  if (Prefaulter* p = Prefaulter::get_if_started()) p->forget_within(reinterpret_cast<char*>(data), bytes);
}

}  // namespace

CopyList::CopyList(const CopyList& other) {
  if (other.size_ == 0) return;
  grow(other.size_);
  std::memcpy(data_, other.data_, other.size_ * sizeof(Copy));
  size_ = other.size_;
}

CopyList::CopyList(CopyList&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)) {}

CopyList& CopyList::operator=(CopyList other) noexcept {
  std::swap(data_, other.data_);
  std::swap(size_, other.size_);
  std::swap(capacity_, other.capacity_);
  std::swap(mapped_bytes_, other.mapped_bytes_);
  return *this;
}

CopyList::~CopyList() { release(); }

void CopyList::release() {
  if (mapped_bytes_) {
    forget_prefaulting(data_, mapped_bytes_);
    munmap(data_, mapped_bytes_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  size_ = capacity_ = mapped_bytes_ = 0;
}

const Copy& CopyList::at(size_t i) const {
  if (i >= size_)
    throw std::out_of_range("copy " + std::to_string(i) + " of a list of " + std::to_string(size_));
  return data_[i];
}

void CopyList::grow(size_t need) {
  const size_t want = std::max({need, capacity_ * 2, size_t{64}});
  if (want > SIZE_MAX / sizeof(Copy)) throw std::bad_alloc();
  const size_t bytes = want * sizeof(Copy);
  if (!mapped_bytes_ && bytes < kMappedBytes) {
    void* p = std::realloc(data_, bytes);
    if (!p) throw std::bad_alloc();
    data_ = static_cast<Copy*>(p);
    capacity_ = want;
    return;
  }
  const size_t mapped = round_to_pages(bytes);
  void* p;
  if (mapped_bytes_) {
    forget_prefaulting(data_, mapped_bytes_);
    p = mremap(data_, mapped_bytes_, mapped, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) throw std::bad_alloc();
  } else {
    p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    if (size_) std::memcpy(p, data_, size_ * sizeof(Copy));
    std::free(data_);
  }
  data_ = static_cast<Copy*>(p);
  mapped_bytes_ = mapped;
  capacity_ = mapped / sizeof(Copy);
  // The pages past those written so far, faulted in on the helper thread.
  if (Prefaulter* helper = Prefaulter::get()) {
    const size_t written = size_ * sizeof(Copy) / page_bytes() * page_bytes();
    helper->populate_later(reinterpret_cast<char*>(data_) + written, mapped - written);
  }
}

void CopyList::shrink_to_fit() {
  if (!mapped_bytes_) return;
  if (size_ == 0) {
    release();
    return;
  }
  const size_t keep = round_to_pages(size_ * sizeof(Copy));
  if (keep < mapped_bytes_) {
    forget_prefaulting(data_, mapped_bytes_);
    // Shrinking in place: the mapping stays where it is.
    if (mremap(data_, mapped_bytes_, keep, 0) == MAP_FAILED) return;
    mapped_bytes_ = keep;
    capacity_ = keep / sizeof(Copy);
  }
}

void stop_prefaulting_copies() {
  if (Prefaulter* p = Prefaulter::get_if_started()) p->forget_all();
}

bool copies_prefaulted() { return Prefaulter::get() != nullptr; }

}  // namespace neurenix
