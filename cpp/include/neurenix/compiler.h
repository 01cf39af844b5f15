// Graph compilation: liveness, per-tile memory allocation, out-of-memory
// diagnosis, address resolution and the static cost of every program step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "neurenix/graph.h"

namespace neurenix {

// A variable on a tile (or, in an overflow, the tile's fixed overheads), with
// the model node that owns it.
struct TileTensor {
  std::string name;
  std::string node;  // "" for model inputs and fixed overheads
  uint64_t bytes;
};

// Memory of one tile at its peak.
struct TileMemory {
  uint32_t ipu = 0;
  uint32_t tile = 0;          // tile index within its IPU
  uint32_t global_tile = 0;   // ipu * tiles_per_ipu + tile: the tile id of the graph and the engine
  uint64_t variables = 0;     // high-water mark of the variable arena
  uint64_t constants = 0;     // of which always live: weights and other constants
  uint64_t vertex_state = 0;  // vertex fields and parameters
  uint64_t code = 0;          // codelet code
  uint64_t exchange_code = 0; // exchange descriptors
  uint64_t control_code = 0;  // program control and worker stacks
  uint64_t total() const { return variables + vertex_state + code + exchange_code + control_code; }
  std::vector<TileTensor> largest;  // live at the peak, largest first (a few)
};

struct TileOverflow {
  uint32_t ipu;
  uint32_t tile;  // tile index within its IPU
  uint64_t used;
  uint64_t capacity;
  std::vector<TileTensor> largest;  // live at the peak, largest first
};

// One term of a step's cost formula (see docs/cost-model.md).
struct CostTerm {
  // "vertex", "launch", "sync", "exchange", "descriptors", "ipu_link",
  // "host_latency" or "host_link".
  std::string kind;
  std::string name;
  uint64_t cycles;
};

struct StepCost {
  StepKind kind;
  uint32_t index;
  std::string name;
  uint64_t cycles;
  uint64_t bytes;  // exchanged or streamed bytes (0 for compute)
  uint64_t items;  // vertices (compute) or copy descriptors (exchange)
  std::string node;        // the model node it belongs to ("" for host streams)
  int64_t tile = -1;       // the tile that set the cost, index within its IPU (-1: none)
  uint64_t live_bytes = 0; // bytes of variables live on the step's IPU during it
  std::vector<CostTerm> terms;  // the formula's terms; they sum to `cycles`
};

class Executable {
 public:
  const Graph& graph() const { return *graph_; }
  Graph& graph() { return *graph_; }
  bool fits() const { return overflows_.empty(); }
  const std::vector<TileOverflow>& overflows() const { return overflows_; }
  const std::vector<TileMemory>& tile_memory() const { return tile_memory_; }
  // The program as run: the graph's steps plus the output streams; step_costs()
  // is aligned with it.
  const std::vector<Step>& program() const { return program_; }
  const std::vector<StepCost>& step_costs() const { return step_costs_; }
  // Segments of the program (Graph::begin_segment): 1 or 2; segment k's
  // steps are [segment_begin(k), segment_begin(k + 1)).
  size_t num_segments() const { return segment_starts_.size(); }
  size_t segment_begin(size_t k) const { return k < segment_starts_.size() ? segment_starts_[k] : program_.size(); }
  uint64_t cycles_per_run() const;

  // Arena layout: bytes of variables per tile (index: global tile).
  const std::vector<uint64_t>& arena_bytes() const { return arena_bytes_; }
  // Byte offset of `var`'s block on the i-th tile of its share list, in the
  // tile's memory.
  uint64_t var_offset(VarId var, size_t share_index) const { return var_offsets_[var][share_index]; }

  // Host layout. The host keeps every tile's memory in one block, laid out
  // by variable: each variable's shares of every tile side by side in tile
  // order, so that a step that walks the tiles walks each variable it
  // touches from one end to the other (host_offset(var, i): where share i
  // is in the block). Variables whose lives do not overlap share host bytes,
  // as they share a tile's; a variable read through a receive alias lives
  // until its last such reader. A shadowed variable (below) has no bytes
  // here. Vertices, copies and streams address the block: a field's
  // `address`, a byte copy's src_byte and dst_byte (a shadowed copy's
  // destination excepted) are relative to arena_offset(tile) of their tile,
  // which is 0 in this layout. A block past 4 GiB (32-bit copy offsets), or
  // past 1.2 times (and 4 KiB) the bytes the tiles' allocators placed, keeps
  // the tile-major layout instead: each tile's memory whole at
  // arena_offset(tile), its variables at var_offset. A variable with no bytes
  // in the block (unused, or shadowed) has its tile offsets here.
  uint64_t host_offset(VarId var, size_t share_index) const { return host_offsets_[var][share_index]; }
  uint64_t arena_offset(uint32_t tile) const { return arena_offsets_[tile]; }
  bool by_variable() const { return by_variable_; }
  // Where the variables end in the block (the shadow regions follow), and
  // the block's size.
  uint64_t variables_end() const { return variables_end_; }
  uint64_t block_bytes() const { return block_bytes_; }

  // Execution schedule, grouped for the engine: compute_schedule()[c] lists
  // the tiles compute set c runs on (ascending), each with its vertices, which
  // lie in one array for the whole program (a run walks all of them).
  struct VertexSpan {
    const Vertex* const* first;
    const Vertex* const* last;
    const Vertex* const* begin() const { return first; }
    const Vertex* const* end() const { return last; }
    size_t size() const { return static_cast<size_t>(last - first); }
  };
  struct TileVertices {
    uint32_t tile;
    VertexSpan vertices;
  };
  const std::vector<std::vector<TileVertices>>& compute_schedule() const { return compute_schedule_; }
  // The copies of each exchange resolved to bytes, grouped by destination
  // tile (ascending) and packed for the engine's inner loop:
  // byte_schedule()[e][i] serves one tile with byte_copies()[e][begin, end),
  // and byte copy k of exchange e resolves the graph's copy
  // exchanges()[e].copies[copy_order()[e][k]]. Offsets, counts and strides
  // are those of one tile's memory, so they fit 32 bits (the compile checks):
  // the engine reads the whole table every run.
  struct ByteCopy {
    uint32_t src_tile;
    uint32_t src_byte, dst_byte, count, outer;
    int32_t src_stride, src_outer, dst_outer;  // in bytes
    uint32_t elem;                             // element size
    // A row reads its elements one after the other.
    bool contiguous_rows() const { return count == 1 || src_stride == static_cast<int32_t>(elem); }
    // One contiguous run of bytes (what a plain HostCopy moves).
    bool is_run() const { return outer == 1 && contiguous_rows(); }
  };
  struct TileByteCopies {
    uint32_t dst_tile;
    uint32_t begin, end;  // range in byte_copies()[exchange]
  };
  const std::vector<std::vector<TileByteCopies>>& byte_schedule() const { return byte_schedule_; }
  const std::vector<std::vector<ByteCopy>>& byte_copies() const { return byte_copies_; }
  // The same copies in the form the host runs them: host_copies()[e][k] is
  // byte_copies()[e][k] in 16 bytes, read without its ByteCopy (the engine
  // walks this table every run, and a copy is often a few dozen bytes: its
  // descriptor is as much memory traffic as its data). Most copies move one
  // contiguous run (one row, read and written element after element): its
  // source as an offset in the host block (host_offset), its destination
  // (relative to its tile's arena_offset) and length. Many others move `outer` such rows read
  // one after the other and written `dst_outer` bytes apart (a block
  // gathered into a wider one): the same, with the rows' step and count
  // packed into the spare bits (rows()). Any other (strided or repeated
  // reads, other strides, sizes past the packed fields) is marked
  // kPatternCopy and run from its ByteCopy.
  struct HostCopy {
    uint64_t src;  // offset in the block (below kRowsShift bits); rows: | dst_outer << kRowsShift; or kPatternCopy
    uint32_t dst_byte;
    uint32_t bytes;  // rows: the row's bytes | (outer - 1) << kRowBits

    static constexpr int kRowsShift = 40, kRowBits = 20;
    static constexpr uint64_t kSrcMask = (uint64_t{1} << kRowsShift) - 1;
    static constexpr uint64_t kMaxDstOuter = (uint64_t{1} << 23) - 1;  // so that src stays below kPatternCopy
    static constexpr uint32_t kMaxOuter = uint32_t{1} << (32 - kRowBits);
    // Several rows (src has bits above kSrcMask), not a plain run.
    bool rows() const { return src > kSrcMask; }
    uint64_t rows_src() const { return src & kSrcMask; }
    uint32_t dst_outer() const { return static_cast<uint32_t>(src >> kRowsShift); }
    uint32_t row_bytes() const { return bytes & ((1u << kRowBits) - 1); }
    uint32_t outer() const { return (bytes >> kRowBits) + 1; }
  };
  static constexpr uint64_t kPatternCopy = ~uint64_t{0};
  // The form byte copy `b` from `src` (its source's offset in the block)
  // takes.
  static HostCopy host_copy_of(const ByteCopy& b, uint64_t src);
  const std::vector<std::vector<HostCopy>>& host_copies() const { return host_copies_; }
  const std::vector<std::vector<uint32_t>>& copy_order() const { return copy_order_; }
  // Exchanges that read a variable they also write: their sources are staged.
  bool staged(uint32_t exchange) const { return staged_[exchange]; }

  // Fused exchanges (host execution order only). An exchange step followed
  // by a compute step may be run by the host tile by tile: each tile's
  // incoming copies, then at once that tile's vertices, while the bytes just
  // copied are still in the host's caches. The results are those of the two
  // steps one after the other: the exchange is not staged; each vertex reads
  // only its own tile's memory, or a sender's bytes that a receive alias
  // guarantees nothing writes in between; and a tile whose vertices write
  // bytes a copy to another tile reads (memory a dead variable left, say)
  // runs them only after every copy of the exchange (fused_late).
  // fused(s) is empty unless program step s is such an exchange; otherwise it
  // lists every tile either step touches, ascending, with its byte copies (a
  // range of byte_copies()[exchange]) and the vertices it runs at once;
  // fused_late(s) lists the tiles that run theirs after all copies. The
  // device still runs the two steps apart: cycles and bytes are those of
  // each step.
  struct FusedTile {
    uint32_t tile;
    uint32_t begin, end;  // byte copies, as TileByteCopies
    VertexSpan vertices;
    uint32_t shadow_end = 0;  // copies [begin, shadow_end) write shadowed bytes (below) ...
    uint64_t shadow_base = 0;  // ... at shadow_base + their offset in the tile, in the block
  };
  const std::vector<FusedTile>& fused(size_t step) const { return fused_[step]; }
  const std::vector<TileVertices>& fused_late(size_t step) const { return fused_late_[step]; }

  // Shadowed temporaries (host memory only). A temporary that a fused
  // exchange writes and that only the next step's vertices on the same tile
  // read is dead once that tile's vertices have run, so the host need not
  // keep it in the tile's arena, whose bytes left the caches long ago:
  // it keeps it in a shadow region, one region for each of kShadowRanges
  // fixed ranges of tiles, which every tile of the range reuses and which so
  // stays in the core's cache. The engine runs a shadowed step's tiles range
  // by range, each range on one thread, always fused. The device is
  // unchanged: the temporary stays allocated and counted in the tile's
  // memory, the exchange's cycles and bytes are the same, and a shadowed
  // field says so (Field::shadow) with its address in the region.
  // shadowed(s): program step s is such an exchange; its fused tiles'
  // copies [begin, shadow_end) write shadowed bytes, byte b of the tile at
  // shadow_base + b in the block, inside the tile's region
  // [shadow_offset(r), shadow_offset(r) + shadow_region_bytes()),
  // r = shadow_range(tile) (a tile's shadowed bytes of one step, from the
  // first, packed at the region's start).
  static constexpr uint32_t kShadowRanges = 64;
  bool shadowed(size_t step) const { return step < shadowed_.size() && shadowed_[step]; }
  // The range of tiles `tile` belongs to: [T * r / R, T * (r + 1) / R) for
  // T tiles and R = kShadowRanges.
  uint32_t shadow_range(uint32_t tile) const {
    return static_cast<uint32_t>(((static_cast<uint64_t>(tile) + 1) * kShadowRanges - 1) / graph_->num_tiles());
  }
  uint64_t shadow_offset(uint32_t range) const { return shadow_offset_ + range * shadow_region_bytes_; }
  // A shadowed step's fused tiles by range: range r's are
  // fused(s)[shadow_bounds(s)[r], shadow_bounds(s)[r + 1]).
  const std::vector<uint32_t>& shadow_bounds(size_t step) const { return shadow_bounds_[step]; }
  // Bytes of each region: the most a tile's shadowed bytes of one step span.
  uint64_t shadow_region_bytes() const { return shadow_region_bytes_; }
  // What the regions add to the host block (with their alignment).
  uint64_t shadow_block_bytes() const { return shadow_block_bytes_; }

  // Receive aliases. A copy that delivers data every reader of which is a
  // vertex that can read it where it came from is not performed by the host:
  // those vertices' fields address the sender's bytes (Field::address). That
  // holds when the received bytes are only ever written by one exchange and
  // read by vertices, the reader runs in the same segment within a few steps
  // of the exchange, its field is one contiguous run of one sender, and
  // nothing writes the sender's bytes from the exchange to the reader
  // (inclusive). The device still performs the copy: the receiver's memory
  // stays allocated and counted, and the exchange's cycles and bytes are
  // unchanged; only the host skips the work. aliased_copies()[e] lists the
  // graph copies of exchange e the host skips (ascending), which
  // byte_copies()[e] does not hold; aliased_bytes() is what they would move
  // per run.
  const std::vector<std::vector<uint32_t>>& aliased_copies() const { return aliased_copies_; }
  uint64_t aliased_bytes() const { return aliased_bytes_; }
  // Bytes the host copies per run in exchange e (what byte_copies()[e] moves).
  uint64_t copied_bytes(uint32_t exchange) const { return copied_bytes_[exchange]; }
  uint64_t aliased_fields() const { return aliased_fields_; }

 private:
  friend std::unique_ptr<Executable> compile(std::unique_ptr<Graph> g);
  friend void fuse_exchanges(Executable& exe);
  friend void shadow_temporaries(Executable& exe);
  friend void lay_out_by_variable(Executable& exe, const std::vector<std::pair<int64_t, int64_t>>& live);
  std::unique_ptr<Graph> graph_;
  std::vector<TileOverflow> overflows_;
  std::vector<TileMemory> tile_memory_;  // tiles that hold anything
  std::vector<Step> program_;
  std::vector<size_t> segment_starts_;
  std::vector<StepCost> step_costs_;
  std::vector<uint64_t> arena_bytes_;
  std::vector<std::vector<uint64_t>> var_offsets_;
  std::vector<std::vector<TileVertices>> compute_schedule_;
  std::vector<const Vertex*> scheduled_vertices_;  // what compute_schedule_'s spans point into
  std::vector<std::vector<uint32_t>> copy_order_;
  std::vector<std::vector<TileByteCopies>> byte_schedule_;
  std::vector<std::vector<ByteCopy>> byte_copies_;
  std::vector<std::vector<HostCopy>> host_copies_;
  std::vector<bool> staged_;
  std::vector<std::vector<FusedTile>> fused_;        // per program step
  std::vector<std::vector<TileVertices>> fused_late_;  // per program step
  std::vector<uint8_t> shadowed_;                      // per program step
  std::vector<std::vector<uint32_t>> shadow_bounds_;   // per program step
  uint64_t shadow_offset_ = 0, shadow_region_bytes_ = 0, shadow_block_bytes_ = 0;
  std::vector<uint64_t> arena_offsets_;
  std::vector<std::vector<uint64_t>> host_offsets_;
  bool by_variable_ = false;
  uint64_t variables_end_ = 0, block_bytes_ = 0;
  std::vector<std::vector<uint32_t>> aliased_copies_;
  uint64_t aliased_bytes_ = 0;
  uint64_t aliased_fields_ = 0;
  std::vector<uint64_t> copied_bytes_;
};

// Compiles a graph. A graph that does not fit still yields an Executable, with
// `fits()` false and every overflowing tile listed; it cannot be loaded.
std::unique_ptr<Executable> compile(std::unique_ptr<Graph> g);

}  // namespace neurenix
