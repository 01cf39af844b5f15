// The engine: runs a compiled program on simulated tiles, BSP style.
//
// Each tile owns a byte arena sized to its allocation high-water mark. A
// compute step runs every tile's vertices on host threads, each vertex seeing
// only its own tile's arena; an exchange step performs the copies between
// arenas; host streams move inputs in and outputs out. Cycles are accumulated
// step by step from the executable's cost model.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "neurenix/compiler.h"

namespace neurenix {

class ThreadPool;

struct RunStats {
  uint64_t cycles = 0;
  uint64_t compute_cycles = 0;
  uint64_t exchange_cycles = 0;
  uint64_t host_cycles = 0;
  uint64_t steps = 0;
  uint64_t exchanged_bytes = 0;
  uint64_t host_bytes = 0;
  double wall_seconds = 0;  // host time the simulation took
  // ... of which in compute steps, in exchanges, and streaming to and from the host.
  double compute_seconds = 0;
  double exchange_seconds = 0;
  double host_io_seconds = 0;
};

class Engine {
 public:
  // `threads` = 0 takes $NEURENIX_SIM_THREADS or the host's core count.
  Engine(std::shared_ptr<const Executable> exe, unsigned threads = 0);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  size_t num_inputs() const;
  size_t num_outputs() const;
  uint64_t input_bytes(uint32_t i) const;
  uint64_t output_bytes(uint32_t i) const;
  // Host data in the device element type of the stream.
  void write_input(uint32_t i, const uint8_t* data, size_t bytes);
  void run();
  void read_output(uint32_t i, uint8_t* data, size_t bytes) const;
  const RunStats& last_run() const { return stats_; }
  const Executable& executable() const { return *exe_; }
  // Bytes of host memory the tile arenas occupy.
  uint64_t arena_bytes() const { return arena_total_; }

 private:
  void scatter(const Tensor& t, const uint8_t* data);
  void gather(const Tensor& t, uint8_t* data) const;

  std::shared_ptr<const Executable> exe_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<uint8_t*> arenas_;
  uint64_t arena_total_ = 0;
  std::vector<std::vector<uint8_t>> in_buf_, out_buf_;
  std::vector<bool> in_set_;
  RunStats stats_;
};

}  // namespace neurenix
