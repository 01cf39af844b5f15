// Running codelets directly on a byte buffer standing in for one tile's
// memory, so each vertex's arithmetic is checked in isolation.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "test_util.h"

namespace nxtest {

// A tile's memory: fields are carved out of it at 8-byte aligned offsets,
// with a guard gap between them that no vertex may touch.
struct TileMem {
  std::vector<uint8_t> bytes;
  static constexpr uint8_t kGuard = 0xa5;
  uint64_t carve(uint64_t size) {
    uint64_t off = (bytes.size() + 7) / 8 * 8 + 16;
    bytes.resize(off + size + 16, kGuard);
    return off;
  }
  Field field(uint64_t count, DeviceType dt) {
    Field f;
    f.var = 0;
    f.tile = 0;
    f.local = 0;
    f.count = count;
    f.byte_offset = carve(count * device_type_size(dt));
    f.address = static_cast<int64_t>(f.byte_offset);
    return f;
  }
  void put(const Field& f, DeviceType dt, uint64_t i, double v) {
    uint8_t* p = bytes.data() + f.byte_offset;
    switch (dt) {
      case kF32: { float x = static_cast<float>(v); std::memcpy(p + 4 * i, &x, 4); break; }
      case kF16: { uint16_t h = ref_double_to_half(v); std::memcpy(p + 2 * i, &h, 2); break; }
      case kI32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p + 4 * i, &x, 4); break; }
      case kBool: p[i] = v != 0; break;
      default: ADD_FAILURE() << "no reference encoding for " << device_type_name(dt); break;
    }
  }
  double get(const Field& f, DeviceType dt, uint64_t i) const {
    const uint8_t* p = bytes.data() + f.byte_offset;
    switch (dt) {
      case kF32: { float x; std::memcpy(&x, p + 4 * i, 4); return x; }
      case kF16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return ref_half_to_double(h); }
      case kI32: { int32_t x; std::memcpy(&x, p + 4 * i, 4); return x; }
      case kBool: return p[i];
      default: ADD_FAILURE() << "no reference decoding for " << device_type_name(dt); break;
    }
    return 0;
  }
  uint16_t half_bits_at(const Field& f, uint64_t i) const {
    uint16_t h;
    std::memcpy(&h, bytes.data() + f.byte_offset + 2 * i, 2);
    return h;
  }
  bool guards_intact(const std::vector<std::pair<uint64_t, uint64_t>>& used) const {
    for (uint64_t b = 0; b < bytes.size(); ++b) {
      bool inside = false;
      for (const auto& [off, len] : used)
        if (b >= off && b < off + len) inside = true;
      if (!inside && bytes[b] != kGuard) return false;
    }
    return true;
  }
};

}  // namespace nxtest
