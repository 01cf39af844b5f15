// The simulated chips and the system they form.
//
// Every architectural constant the simulator uses lives in `TargetSpec`, filled
// from one table in target.cc with the source of each number, so the cost model
// can be recalibrated in one place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "neurenix/device_type.h"

namespace neurenix {

struct TargetSpec {
  std::string version;         // "ipu1", "ipu2", "bow", "ipu21"
  std::string chip;            // chip and the system it ships in, e.g. "GC200 (Mk2, IPU-M2000)"
  uint32_t tiles_per_ipu;      // tiles on a full chip
  uint64_t bytes_per_tile;     // SRAM per tile
  double clock_hz;             // tile clock
  uint32_t fp16_flops_per_cycle;  // per tile, accumulating matrix product (AMP) unit, half inputs
  uint32_t fp32_flops_per_cycle;  // per tile, AMP unit, float inputs
  uint32_t fp8_flops_per_cycle;   // per tile, AMP unit, float8 inputs with half partials (0: no FP8 AMP)
  uint32_t worker_threads;        // hardware worker contexts per tile, sharing its issue slots
  uint32_t exchange_bytes_per_cycle;    // per tile, each direction
  uint32_t exchange_descriptor_cycles;  // per copy descriptor a tile executes in an exchange
  uint32_t local_read_bytes_per_cycle;  // per tile
  uint32_t local_write_bytes_per_cycle; // per tile
  uint32_t sync_cycles;            // on-chip BSP sync
  uint32_t cross_ipu_sync_cycles;  // sync spanning several IPUs
  double ipu_link_bytes_per_sec;   // one IPU-Link, each direction
  uint32_t ipu_links;              // IPU-Links per chip
  std::string host_link;           // what connects the host, e.g. "PCIe Gen4 x16"
  double host_link_bytes_per_sec;  // host link, each direction
  uint32_t host_transfer_latency_cycles;  // fixed cost of a host stream
  uint32_t vertex_overhead_cycles;  // supervisor cost to launch one vertex
};

// Which constants of the table are estimates rather than published or
// measured figures (for reports; see target.cc for the sources).
const std::vector<std::string>& estimated_target_constants();

// Work items of a worker vertex (elements, rows, ...), rounded up to whole
// rounds of the tile's worker threads. A tile issues one instruction per
// cycle, each of its `worker_threads` workers one every `worker_threads`
// cycles; a vertex's items are dealt out to all workers, so a count that does
// not fill the last round leaves issue slots idle.
inline uint64_t worker_rounded(const TargetSpec& t, uint64_t items) {
  return (items + t.worker_threads - 1) / t.worker_threads * t.worker_threads;
}

// The AMP unit on operands of type `in` (float32, float16 or a float8 type):
// flops per cycle per tile (0 when the target has no AMP for the type), and
// the products it takes per pass along K (the depth one pass sums before
// its result reaches the partials: 8 float, 16 half, 32 float8).
uint32_t amp_flops_per_cycle(const TargetSpec& t, DeviceType in);
uint32_t amp_depth(DeviceType in);

// The table of supported chips.
const std::vector<TargetSpec>& all_targets();
// Looks a target up by version name; throws kInvalidArgument naming the valid ones.
const TargetSpec& target_for(const std::string& version);

// A (simulated) system: `num_ipus` chips of one version, each with
// `tiles_per_ipu` tiles of `bytes_per_tile` bytes (a full chip unless shrunk,
// like Poplar's IPUModel, for tests and what-if planning).
struct SystemSpec {
  std::string version = "ipu2";
  uint32_t num_ipus = 16;
  uint32_t tiles_per_ipu = 0;   // 0 = the chip's full tile count
  uint64_t bytes_per_tile = 0;  // 0 = the chip's SRAM per tile

  const TargetSpec& target() const { return target_for(version); }
  uint32_t tiles() const { return tiles_per_ipu ? tiles_per_ipu : target().tiles_per_ipu; }
  uint64_t tile_bytes() const { return bytes_per_tile ? bytes_per_tile : target().bytes_per_tile; }
  // Validates the fields; throws kInvalidArgument naming the bad one.
  void validate() const;
  std::string to_string() const;
};

// Parses "version=ipu2,num_ipus=16,tiles_per_ipu=8,bytes_per_tile=65536" (any subset, any order;
// missing keys keep their defaults). Throws kInvalidArgument naming a bad key or value.
SystemSpec parse_system_spec(const std::string& text);

}  // namespace neurenix
