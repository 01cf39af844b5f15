// The engine: runs a compiled program on simulated tiles, BSP style.
//
// Every tile's memory lives in one host block, laid out by variable
// (Executable::host_offset; each tile's addresses are relative to its arena
// offset, 0 in that layout). A compute step runs every tile's vertices on
// host threads, each vertex seeing only its own tile's variables, except that
// a receive alias reads what an exchange would have delivered where it was
// sent from (Executable::aliased_copies); an exchange step performs the other
// copies between tiles; host streams move inputs in and outputs out. Cycles are accumulated step by step from the executable's
// cost model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "neurenix/compiler.h"
#include "neurenix/stochastic_rounding.h"

namespace neurenix {

class ThreadPool;

struct RunStats {
  uint64_t cycles = 0;
  uint64_t compute_cycles = 0;
  uint64_t exchange_cycles = 0;
  uint64_t host_cycles = 0;
  uint64_t steps = 0;
  uint64_t exchanged_bytes = 0;
  // Of those, the bytes the host copied (the rest were receive aliases).
  uint64_t copied_bytes = 0;
  uint64_t host_bytes = 0;
  double wall_seconds = 0;  // host time the simulation took
  // ... of which in compute steps, in exchanges, and streaming to and from the
  // host. A fused exchange (Executable::fused) runs interleaved with the
  // compute step after it: its time counts as compute.
  double compute_seconds = 0;
  double exchange_seconds = 0;
  double host_io_seconds = 0;
  // The same host time by program step (indexed as Executable::program();
  // steps the run did not cover, outside its segment, hold 0). A fused
  // exchange's time is its compute step's, as above, and the exchange's
  // own entry is 0.
  std::vector<double> step_seconds;
};

struct EngineOptions {
  // Host threads; 0 takes $NEURENIX_SIM_THREADS or the host's core count.
  unsigned threads = 0;
  // Checked mode (see Engine); $NEURENIX_SIM_CHECKED turns it on as well.
  bool checked = false;
  // The floating-point behaviour of the program (Poplar's
  // FloatingPointBehaviour): stochastic rounding of every float32 result
  // stored as binary16 (stochastic_rounding.h), with generators seeded from
  // `seed`, `ipu` and the tile when the program is loaded, their state
  // carried from run to run; and exceptions:
  // a vertex that produces an infinity or a NaN from finite operands stops
  // the run with Error(kFloatingPoint) naming it, its compute set, model
  // node, IPU and tile.
  bool stochastic_rounding = false;
  uint64_t seed = 0;
  uint32_t ipu = 0;  // the IPU the program runs on, for seeds and messages
  bool fp_exceptions = false;
  // Other programs run on the same host cores between this one's runs (the
  // stages of a sharded model take turns): the engine's worker threads
  // sleep at the end of each run instead of spinning for a next step that
  // would not come, which kept the next program's threads off the cores.
  bool shares_cores = false;
};

// Checked mode (memory safety of the executable). When an Engine is
// constructed with NEURENIX_SIM_CHECKED=1 in the environment (any value but
// "0" or empty), or with EngineOptions::checked, it verifies before loading
// that
//  - every vertex field lies inside its tile's arena and inside its
//    variable's slice on that tile: elements [local, local + count) of the
//    variable's share of the tile, at the byte offset the compiler assigned;
//    and that the vertex reads it where the host block holds those elements
//    or, for a receive alias (each piece of one), inside the sender's slice
//    of the variable it aliases, in the block;
//  - every exchange copy, over every row and element of its strided or 2-D
//    pattern, reads only inside the source variable's slice on its tile and
//    writes only inside the destination variable's slice, in the block;
//  - the slices that host streams and constants fill lie inside the tiles'
//    arenas and inside the block's variables.
// Fields and copies are fixed once compiled (an Executable does not change
// after compile()), so this verification at load covers every run. A
// violation throws Error(kInternal) naming the vertex or copy, the tile, the
// variable and the byte ranges. An unchecked engine does none of this and
// runs exactly as fast.
class Engine {
 public:
  // `threads` = 0 takes $NEURENIX_SIM_THREADS or the host's core count.
  Engine(std::shared_ptr<const Executable> exe, unsigned threads = 0);
  Engine(std::shared_ptr<const Executable> exe, const EngineOptions& options);
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
  // Runs one segment of the program (Executable::num_segments): the inputs
  // are needed for segment 0, whose end streams the outputs. last_run()
  // then describes that segment.
  void run_segment(uint32_t segment);
  void read_output(uint32_t i, uint8_t* data, size_t bytes) const;
  // The bytes of constant `name` (state such as trained weights: what the
  // last run left there), and overwriting them; `bytes` must be the whole
  // tensor in its device type. kInvalidArgument for an unknown name.
  uint64_t constant_bytes(const std::string& name) const;
  void read_constant(const std::string& name, uint8_t* data, size_t bytes) const;
  void write_constant(const std::string& name, const uint8_t* data, size_t bytes);
  const RunStats& last_run() const { return stats_; }
  const Executable& executable() const { return *exe_; }
  // Bytes of host memory the tiles' memory occupies (the host block), the
  // shadow regions (Executable::shadowed) included, and of those the shadow
  // regions.
  uint64_t arena_bytes() const { return arena_total_; }
  uint64_t shadow_block_bytes() const { return exe_->shadow_block_bytes(); }
  // True if the executable was verified in checked mode when loaded.
  bool checked() const { return checked_; }

 private:
  void run_steps(size_t first, size_t last);
  // A tile's vertices of a compute step under the run's floating-point
  // options: stochastic rounding, the tile's random draws when `random`, and
  // exceptions, the first of which goes to *found (null when not asked for).
  void run_vertices(uint32_t tile, Executable::VertexSpan vertices, bool random, std::string* found);
  // Performs copies [first, last) of exchange `e` into the tile memory at
  // `dst` (Executable::host_copies).
  void copy_into_tile(uint8_t* dst, uint32_t e, uint32_t first, uint32_t last) const;
  // Performs one byte copy (any pattern) into the tile memory at `dst`.
  void copy_pattern(uint8_t* dst, const Executable::ByteCopy& c) const;
  // Writes `t`'s elements from `data` (host order) into its shares.
  void scatter(const Tensor& t, const uint8_t* data);
  // The same for share `share` of `var` alone.
  void scatter_share(VarId var, uint32_t share, const uint8_t* data);
  void gather(const Tensor& t, uint8_t* data) const;

  std::shared_ptr<const Executable> exe_;
  std::unique_ptr<ThreadPool> pool_;
  uint8_t* raw_block_ = nullptr;    // as allocated ...
  uint8_t* block_ = nullptr;        // ... on a cache line: every tile's memory (Executable::host_offset)
  std::vector<uint8_t*> arenas_;    // each tile's addresses are relative to this (Executable::arena_offset)
  uint64_t arena_total_ = 0;
  std::vector<std::vector<uint8_t>> in_buf_, out_buf_;
  std::vector<bool> in_set_;
  // The first floating-point exception of a compute step, if any (throws):
  // found[i] for the tile tile_at(i).
  void check_floating_point(uint32_t compute_set, const std::vector<std::string>& found,
                            const std::function<uint32_t(size_t)>& tile_at) const;

  RunStats stats_;
  bool checked_ = false;
  EngineOptions options_;
  std::vector<RoundingRng> rngs_;  // per tile, when rounding stochastically
  std::vector<RoundingRng> random_rngs_;  // per tile, when the program draws random numbers
  std::vector<bool> random_cs_;           // compute sets whose vertices draw random numbers
};

// What checked mode runs at load: throws Error(kInternal) for the first field,
// copy or stream slice outside its bounds (see Engine).
void verify_memory_bounds(const Executable& exe);

}  // namespace neurenix
