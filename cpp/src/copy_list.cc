// CopyList (graph.h): growth in place, tails faulted in on a helper
// thread.
#include "neurenix/graph.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

// One thread for the process, started on first use, that faults in the
// ranges it is given, the latest first (the one the lowering is writing).
// Faulting in a range that has since moved or been unmapped is harmless:
// the call fails on an unmapped range and only fills page tables on
// another (no byte changes). Its state is never destroyed (the thread waits
// on it for the life of the process); a child after fork() starts its own.
class Prefaulter {
 public:
  static Prefaulter* get() {
    std::call_once(atfork_once_, [] {
      pthread_atfork(nullptr, nullptr, [] {
        // The child has no helper thread, and the lock may have been held
        // by a thread the child does not have.
        new (&instance_mu_) std::mutex();
        instance_ = nullptr;
      });
    });
    std::lock_guard<std::mutex> l(instance_mu_);
    if (!instance_) instance_ = new Prefaulter();
    return instance_;
  }
  static Prefaulter* get_if_started() {
    std::lock_guard<std::mutex> l(instance_mu_);
    return instance_;
  }

  void populate_later(void* p, size_t bytes) {
    if (bytes == 0) return;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (unsupported_) return;
      ranges_.emplace_back(static_cast<char*>(p), bytes);
    }
    cv_.notify_one();
  }
  void forget() {
    std::lock_guard<std::mutex> l(mu_);
    ranges_.clear();
  }

 private:
  Prefaulter() { std::thread([this] { loop(); }).detach(); }

  void loop() {
    for (;;) {
      std::pair<char*, size_t> r;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return !ranges_.empty(); });
        r = ranges_.back();
        ranges_.pop_back();
      }
#ifdef MADV_POPULATE_WRITE
      if (madvise(r.first, r.second, MADV_POPULATE_WRITE) != 0 && errno == EINVAL) {
        // A kernel without it (before Linux 5.14): the lowering faults its
        // pages in itself, as it would anyway.
        std::lock_guard<std::mutex> l(mu_);
        unsupported_ = true;
        ranges_.clear();
      }
#else
      std::lock_guard<std::mutex> l(mu_);
      unsupported_ = true;
      ranges_.clear();
#endif
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<char*, size_t>> ranges_;
  bool unsupported_ = false;

  static inline std::mutex instance_mu_;
  static inline Prefaulter* instance_ = nullptr;
  static inline std::once_flag atfork_once_;
};

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
  if (mapped_bytes_) munmap(data_, mapped_bytes_);
  else std::free(data_);
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
    p = mremap(data_, mapped_bytes_, mapped, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) throw std::bad_alloc();
  } else {
    p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    if (size_) std::memcpy(p, data_, size_ * sizeof(Copy));
    std::free(data_);
  }
  // The pages past those written so far, faulted in on the helper thread.
  const size_t written = size_ * sizeof(Copy) / page_bytes() * page_bytes();
  Prefaulter::get()->populate_later(static_cast<char*>(p) + written, mapped - written);
  data_ = static_cast<Copy*>(p);
  mapped_bytes_ = mapped;
  capacity_ = mapped / sizeof(Copy);
}

void CopyList::shrink_to_fit() {
  if (!mapped_bytes_) return;
  if (size_ == 0) {
    release();
    return;
  }
  const size_t keep = round_to_pages(size_ * sizeof(Copy));
  if (keep < mapped_bytes_) {
    // Shrinking in place: the mapping stays where it is.
    if (mremap(data_, mapped_bytes_, keep, 0) == MAP_FAILED) return;
    mapped_bytes_ = keep;
    capacity_ = keep / sizeof(Copy);
  }
}

void stop_prefaulting_copies() {
  if (Prefaulter* p = Prefaulter::get_if_started()) p->forget();
}

}  // namespace neurenix
