#include "neurenix/device.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "neurenix/error.h"

namespace neurenix {
namespace {

bool is_power_of_two(uint32_t n) { return n && !(n & (n - 1)); }

void make_dirs(const std::string& path) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (mkdir(cur.c_str(), 0777) != 0 && errno != EEXIST)
      fail(ErrorCode::kInvalidArgument,
           "cannot create the IPU lock directory '" + path + "': " + std::strerror(errno) +
               "; set NEURENIX_IPU_LOCK_DIR to a writable directory");
  }
}

int32_t read_pid(int fd) {
  char buf[32] = {0};
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return -1;
  return static_cast<int32_t>(std::atoi(buf));
}

}  // namespace

std::string default_lock_dir() {
  if (const char* dir = std::getenv("NEURENIX_IPU_LOCK_DIR"); dir && *dir) return dir;
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/neurenix-ipu-locks";
}

Device::Device(uint32_t id, std::vector<uint32_t> ipus, std::vector<int> fds)
    : id_(id), ipus_(std::move(ipus)), fds_(std::move(fds)) {}

Device::~Device() { detach(); }

void Device::detach() {
  if (!attached_) return;
  for (int fd : fds_) {
    // Clear the recorded pid before unlocking, so a stale pid never shows.
    if (ftruncate(fd, 0) != 0) { /* best effort: the lock is what matters */ }
    flock(fd, LOCK_UN);
    close(fd);
  }
  fds_.clear();
  attached_ = false;
}

DeviceManager::DeviceManager(SystemSpec spec, std::string lock_dir)
    : spec_(std::move(spec)), lock_dir_(lock_dir.empty() ? default_lock_dir() : std::move(lock_dir)) {
  spec_.validate();
  uint32_t id = 0;
  for (uint32_t size = 1; size <= spec_.num_ipus; size *= 2) {
    for (uint32_t start = 0; start + size <= spec_.num_ipus; start += size) {
      DeviceInfo info{id++, {}};
      for (uint32_t i = 0; i < size; ++i) info.ipus.push_back(start + i);
      devices_.push_back(std::move(info));
    }
  }
}

std::string DeviceManager::lock_path(uint32_t ipu) const {
  return lock_dir_ + "/ipu" + std::to_string(ipu) + ".lock";
}

int32_t DeviceManager::holder_pid(uint32_t ipu) const {
  int fd = open(lock_path(ipu).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;  // never locked
  int32_t pid = 0;
  if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
    flock(fd, LOCK_UN);
  } else {
    pid = read_pid(fd);
    if (pid <= 0) pid = -1;  // held, holder not yet recorded
  }
  close(fd);
  return pid;
}

std::vector<int> DeviceManager::try_lock_group(const DeviceInfo& group, std::vector<uint32_t>* busy) {
  std::vector<int> fds;
  for (uint32_t ipu : group.ipus) {
    int fd = open(lock_path(ipu).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
      fail(ErrorCode::kInvalidArgument, "cannot open the IPU lock file '" + lock_path(ipu) + "': " +
                                            std::strerror(errno) + "; set NEURENIX_IPU_LOCK_DIR to a writable directory");
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      close(fd);
      busy->push_back(ipu);
      continue;
    }
    fds.push_back(fd);
  }
  if (!busy->empty()) {
    for (int fd : fds) {
      flock(fd, LOCK_UN);
      close(fd);
    }
    return {};
  }
  std::string pid = std::to_string(getpid()) + "\n";
  for (int fd : fds) {
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) { /* pid is informational */ }
  }
  return fds;
}

std::unique_ptr<Device> DeviceManager::attach(uint32_t num_ipus, std::optional<uint32_t> device_id, double timeout_seconds) {
  last_busy_ipus_.clear();
  last_busy_pids_.clear();
  if (!is_power_of_two(num_ipus))
    fail(ErrorCode::kInvalidArgument, "num_ipus must be a power of two, got " + std::to_string(num_ipus));
  if (num_ipus > spec_.num_ipus)
    fail(ErrorCode::kInvalidArgument, "asked for " + std::to_string(num_ipus) + " IPUs but the system has only " +
                                          std::to_string(spec_.num_ipus));
  make_dirs(lock_dir_);
  std::vector<const DeviceInfo*> candidates;
  if (device_id) {
    if (*device_id >= devices_.size())
      fail(ErrorCode::kInvalidArgument, "device_id " + std::to_string(*device_id) + " does not exist; this system has ids 0.." +
                                            std::to_string(devices_.size() - 1));
    const DeviceInfo& d = devices_[*device_id];
    if (d.ipus.size() != num_ipus)
      fail(ErrorCode::kInvalidArgument, "device_id " + std::to_string(*device_id) + " is a group of " +
                                            std::to_string(d.ipus.size()) + " IPUs but num_ipus=" + std::to_string(num_ipus));
    candidates.push_back(&d);
  } else {
    for (const auto& d : devices_)
      if (d.ipus.size() == num_ipus) candidates.push_back(&d);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(0.0, timeout_seconds));
  while (true) {
    std::vector<uint32_t> all_busy;
    for (const DeviceInfo* d : candidates) {
      std::vector<uint32_t> busy;
      std::vector<int> fds = try_lock_group(*d, &busy);
      if (!fds.empty()) return std::unique_ptr<Device>(new Device(d->id, d->ipus, std::move(fds)));
      for (uint32_t b : busy)
        if (std::find(all_busy.begin(), all_busy.end(), b) == all_busy.end()) all_busy.push_back(b);
    }
    if (timeout_seconds <= 0 || std::chrono::steady_clock::now() >= deadline) {
      std::sort(all_busy.begin(), all_busy.end());
      std::string who;
      for (uint32_t b : all_busy) {
        int32_t pid = holder_pid(b);
        last_busy_ipus_.push_back(b);
        last_busy_pids_.push_back(pid);
        who += (who.empty() ? "" : ", ") + std::string("IPU ") + std::to_string(b) +
               (pid > 0 ? " (held by pid " + std::to_string(pid) + ")" : " (held)");
      }
      std::string what = device_id ? "device " + std::to_string(*device_id)
                                        : "any group of " + std::to_string(num_ipus) + " IPU(s)";
      fail(ErrorCode::kDeviceUnavailable,
           "cannot attach " + what + ": busy: " + who +
               (timeout_seconds > 0 ? "; gave up after waiting " + std::to_string(timeout_seconds) + " s"
                                    : "; wait for the holder to detach, or ask to wait for the device"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace neurenix
