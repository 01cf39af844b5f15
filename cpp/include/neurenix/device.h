// Device inventory and exclusive attach.
//
// A device is a power-of-two group of IPUs, numbered like `gc-info` numbers
// them on real systems: single IPUs first (0..N-1), then pairs, then fours, and
// so on. Attaching takes an OS file lock per IPU (flock on
// `<lock_dir>/ipu<N>.lock`), so exclusivity holds across processes and the OS
// frees the IPUs when the holder dies, however it dies.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "neurenix/target.h"

namespace neurenix {

struct DeviceInfo {
  uint32_t id;
  std::vector<uint32_t> ipus;
};

class Device {
 public:
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  uint32_t id() const { return id_; }
  const std::vector<uint32_t>& ipus() const { return ipus_; }
  bool attached() const { return attached_; }
  // Releases the IPUs. Safe to call more than once.
  void detach();

 private:
  friend class DeviceManager;
  Device(uint32_t id, std::vector<uint32_t> ipus, std::vector<int> fds);
  uint32_t id_;
  std::vector<uint32_t> ipus_;
  std::vector<int> fds_;
  bool attached_ = true;
};

class DeviceManager {
 public:
  DeviceManager(SystemSpec spec, std::string lock_dir);

  const SystemSpec& spec() const { return spec_; }
  const std::string& lock_dir() const { return lock_dir_; }
  // Every attachable group, in id order.
  const std::vector<DeviceInfo>& devices() const { return devices_; }
  // The process holding `ipu`'s lock, or 0 if the IPU is free.
  int32_t holder_pid(uint32_t ipu) const;

  // Attaches a group of `num_ipus` IPUs: the group `device_id` if given,
  // else the first free one. With `timeout_seconds` > 0 it waits for a busy
  // group up to that long; otherwise it fails at once. Throws
  // kDeviceUnavailable (busy), kInvalidArgument (bad count or id).
  std::unique_ptr<Device> attach(uint32_t num_ipus, std::optional<uint32_t> device_id, double timeout_seconds);

  // IPUs and holder pids that blocked the last failed attach.
  const std::vector<uint32_t>& last_busy_ipus() const { return last_busy_ipus_; }
  const std::vector<int32_t>& last_busy_pids() const { return last_busy_pids_; }

 private:
  std::string lock_path(uint32_t ipu) const;
  // Tries to lock every IPU of the group; returns the fds or an empty vector.
  std::vector<int> try_lock_group(const DeviceInfo& group, std::vector<uint32_t>* busy);

  SystemSpec spec_;
  std::string lock_dir_;
  std::vector<DeviceInfo> devices_;
  std::vector<uint32_t> last_busy_ipus_;
  std::vector<int32_t> last_busy_pids_;
};

// The lock directory used when none is given: $NEURENIX_IPU_LOCK_DIR, else
// "<tmp>/neurenix-ipu-locks".
std::string default_lock_dir();

}  // namespace neurenix
