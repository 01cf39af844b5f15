#include "neurenix/engine.h"

#include <algorithm>
#include <cfenv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "neurenix/error.h"
#include "neurenix/half.h"
#include "thread_pool.h"

namespace neurenix {

namespace {

unsigned default_threads() {
  if (const char* s = std::getenv("NEURENIX_SIM_THREADS"); s && *s) {
    int n = std::atoi(s);
    if (n > 0) return static_cast<unsigned>(n);
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? hc : 1;
}

// The index of the first infinity or NaN among `count` elements at `p`, or -1.
int64_t first_non_finite(const uint8_t* p, DeviceType dtype, uint64_t count) {
  if (dtype == DeviceType::kFloat32) {
    const float* f = reinterpret_cast<const float*>(p);
    for (uint64_t i = 0; i < count; ++i)
      if (!std::isfinite(f[i])) return static_cast<int64_t>(i);
  } else if (dtype == DeviceType::kFloat16) {
    const half_bits* h = reinterpret_cast<const half_bits*>(p);
    for (uint64_t i = 0; i < count; ++i)
      if ((h[i] & 0x7c00u) == 0x7c00u) return static_cast<int64_t>(i);
  }
  return -1;
}

// What a vertex just did wrong, or "": it wrote an infinity or a NaN while
// every operand it only reads is finite (a non-finite operand came from the
// host, or from a run without exceptions, and propagates as IEEE says).
std::string floating_point_exception(const Graph& g, const Vertex& v, const uint8_t* mem) {
  const bool divided_by_zero = std::fetestexcept(FE_DIVBYZERO);
  for (const Field* f : v.fields()) {
    if (f->access == Access::kRead || f->count == 0) continue;
    const Variable& var = g.var(f->var);
    const int64_t at = first_non_finite(mem + f->address, var.dtype, f->count);
    if (at < 0) continue;
    for (const Field* r : v.fields()) {
      if (r->access != Access::kRead) continue;
      const DeviceType dt = g.var(r->var).dtype;
      if (r->pieces.empty() && first_non_finite(mem + r->address, dt, r->count) >= 0) return "";
      for (size_t i = 0; i < r->pieces.size(); ++i) {
        const uint64_t end = i + 1 < r->pieces.size() ? r->pieces[i + 1].begin : r->count;
        if (first_non_finite(mem + r->pieces[i].address, dt, end - r->pieces[i].begin) >= 0) return "";
      }
    }
    double value = load_element(mem + f->address, var.dtype, static_cast<uint64_t>(at));
    const char* what = std::isnan(value) ? "invalid operation" : divided_by_zero ? "division by zero" : "overflow";
    return std::string(what) + " (" + (std::isnan(value) ? "NaN" : value > 0 ? "+inf" : "-inf") + " written to '" +
           var.name + "' by a " + v.name() + " vertex)";
  }
  return "";
}

bool checked_from_environment() {
  const char* s = std::getenv("NEURENIX_SIM_CHECKED");
  return s && *s && std::string(s) != "0";
}

}  // namespace

Engine::Engine(std::shared_ptr<const Executable> exe, unsigned threads) : Engine(std::move(exe), EngineOptions{threads}) {}

Engine::Engine(std::shared_ptr<const Executable> exe, const EngineOptions& options)
    : exe_(std::move(exe)), checked_(options.checked || checked_from_environment()), options_(options) {
  if (!exe_->fits())
    fail(ErrorCode::kInvalidState, "this executable does not fit in tile memory and cannot be loaded");
  if (checked_) verify_memory_bounds(*exe_);
  pool_ = std::make_unique<ThreadPool>(options.threads ? options.threads : default_threads());
  // One block for every tile's memory (Executable::host_offset).
  const auto& sizes = exe_->arena_bytes();
  // (On a cache line, as the shadow regions inside it are laid out.)
  raw_block_ = static_cast<uint8_t*>(std::calloc(exe_->block_bytes() + 64, 1));
  block_ = raw_block_ ? raw_block_ + (64 - reinterpret_cast<uintptr_t>(raw_block_) % 64) % 64 : nullptr;
  if (!block_)
    fail(ErrorCode::kOutOfMemory, "the host cannot hold the simulated tile memory (" +
                                      std::to_string(exe_->block_bytes()) + " bytes for all tiles)");
  arenas_.assign(sizes.size(), nullptr);
  for (uint32_t t = 0; t < sizes.size(); ++t) arenas_[t] = block_ + exe_->arena_offset(t);
  arena_total_ = exe_->block_bytes();
  const Graph& g = exe_->graph();
  // Constants are loaded once, like the weights in a loaded executable: by
  // share, on the engine's threads (the first writes to the block fault its
  // pages in, which the threads then do side by side), the workers parked
  // afterwards (no run follows at once).
  {
    std::vector<std::pair<VarId, uint32_t>> shares;
    for (size_t v = 0; v < g.num_vars(); ++v) {
      const Variable& var = g.var(static_cast<VarId>(v));
      if (var.kind == VarKind::kConstant && var.data.owner && var.numel)
        for (size_t si = 0; si < var.tiles.size(); ++si) shares.emplace_back(static_cast<VarId>(v), static_cast<uint32_t>(si));
    }
    pool_->parallel_for(shares.size(), [&](size_t i) { scatter_share(shares[i].first, shares[i].second, g.var(shares[i].first).data.data); });
    pool_->park();
  }
  // The tiles' generators start from the seed when the program is loaded and
  // carry their state from run to run, as the IPU's do.
  if (options_.stochastic_rounding) {
    rngs_.reserve(arenas_.size());
    for (uint32_t t = 0; t < arenas_.size(); ++t)
      rngs_.emplace_back(options_.seed, options_.ipu + g.ipu_of_tile(t), t % g.tiles_per_ipu());
  }
  // Random draws (dropout masks) come from a second generator per tile, on
  // a stream of the seed of their own.
  random_cs_.assign(g.compute_sets().size(), false);
  bool random = false;
  for (size_t c = 0; c < g.compute_sets().size(); ++c)
    for (const auto& v : g.compute_sets()[c].vertices)
      if (v->uses_random()) random = random_cs_[c] = true;
  if (random) {
    random_rngs_.reserve(arenas_.size());
    for (uint32_t t = 0; t < arenas_.size(); ++t)
      random_rngs_.emplace_back(options_.seed ^ 0x6a09e667f3bcc909ull, options_.ipu + g.ipu_of_tile(t),
                                t % g.tiles_per_ipu());
  }
  in_buf_.resize(g.inputs().size());
  in_set_.assign(g.inputs().size(), false);
  out_buf_.resize(g.outputs().size());
  for (size_t i = 0; i < g.outputs().size(); ++i) out_buf_[i].assign(output_bytes(static_cast<uint32_t>(i)), 0);
}

Engine::~Engine() { std::free(raw_block_); }

size_t Engine::num_inputs() const { return exe_->graph().inputs().size(); }
size_t Engine::num_outputs() const { return exe_->graph().outputs().size(); }

uint64_t Engine::input_bytes(uint32_t i) const {
  const Graph& g = exe_->graph();
  const Tensor& t = g.inputs().at(i).tensor;
  return t.numel() * device_type_size(g.var(t.var).dtype);
}

uint64_t Engine::output_bytes(uint32_t i) const {
  const Graph& g = exe_->graph();
  const Tensor& t = g.outputs().at(i).tensor;
  return t.numel() * device_type_size(g.var(t.var).dtype);
}

void Engine::scatter(const Tensor& t, const uint8_t* data) {
  const size_t shares = exe_->graph().var(t.var).tiles.size();
  for (size_t si = 0; si < shares; ++si) scatter_share(t.var, static_cast<uint32_t>(si), data);
}

void Engine::scatter_share(VarId var, uint32_t share, const uint8_t* data) {
  const Variable& v = exe_->graph().var(var);
  const size_t es = device_type_size(v.dtype);
  uint8_t* base = block_ + exe_->host_offset(var, share);
  for (uint32_t ii : v.tiles[share].intervals) {
    const TileInterval& iv = v.mapping[ii];
    std::memcpy(base + iv.local * es, data + iv.begin * es, (iv.end - iv.begin) * es);
  }
}

void Engine::gather(const Tensor& t, uint8_t* data) const {
  const Graph& g = exe_->graph();
  const Variable& v = g.var(t.var);
  const size_t es = device_type_size(v.dtype);
  for (size_t si = 0; si < v.tiles.size(); ++si) {
    const uint8_t* base = block_ + exe_->host_offset(t.var, si);
    for (uint32_t ii : v.tiles[si].intervals) {
      const TileInterval& iv = v.mapping[ii];
      std::memcpy(data + iv.begin * es, base + iv.local * es, (iv.end - iv.begin) * es);
    }
  }
}

void Engine::check_floating_point(uint32_t compute_set, const std::vector<std::string>& found,
                                  const std::function<uint32_t(size_t)>& tile_at) const {
  for (size_t i = 0; i < found.size(); ++i) {
    if (found[i].empty()) continue;
    const Graph& g = exe_->graph();
    const ComputeSet& cs = g.compute_sets()[compute_set];
    const uint32_t tile = tile_at(i);
    fail(ErrorCode::kFloatingPoint,
         "floating-point exception: " + found[i] + " in compute set '" + cs.name + "'" +
             (cs.node.empty() ? "" : " of model node '" + cs.node + "'") + " on IPU " +
             std::to_string(options_.ipu + g.ipu_of_tile(tile)) + " tile " + std::to_string(tile % g.tiles_per_ipu()) +
             "; the run stopped there. Turn fp_exceptions off to let infinities and NaNs propagate, or check the "
             "inputs and the precision (float16 overflows beyond 65504)");
  }
}

void Engine::write_input(uint32_t i, const uint8_t* data, size_t bytes) {
  if (i >= num_inputs()) fail(ErrorCode::kInvalidArgument, "input index " + std::to_string(i) + " out of range");
  if (bytes != input_bytes(i))
    fail(ErrorCode::kShapeMismatch, "input '" + exe_->graph().inputs()[i].name + "' needs " + std::to_string(input_bytes(i)) +
                                        " bytes, got " + std::to_string(bytes));
  in_buf_[i].assign(data, data + bytes);
  in_set_[i] = true;
}

namespace {

VarId constant_named(const Graph& g, const std::string& name) {
  for (size_t v = 0; v < g.num_vars(); ++v)
    if (g.var(static_cast<VarId>(v)).kind == VarKind::kConstant && g.var(static_cast<VarId>(v)).name == name)
      return static_cast<VarId>(v);
  fail(ErrorCode::kInvalidArgument, "the program has no constant named '" + name + "'");
}

}  // namespace

uint64_t Engine::constant_bytes(const std::string& name) const {
  const Graph& g = exe_->graph();
  const Variable& v = g.var(constant_named(g, name));
  return v.numel * device_type_size(v.dtype);
}

void Engine::read_constant(const std::string& name, uint8_t* data, size_t bytes) const {
  const Graph& g = exe_->graph();
  const VarId id = constant_named(g, name);
  if (bytes != constant_bytes(name)) fail(ErrorCode::kShapeMismatch, "constant '" + name + "': buffer has the wrong size");
  if (bytes) gather(Tensor{id, g.var(id).shape}, data);
}

void Engine::write_constant(const std::string& name, const uint8_t* data, size_t bytes) {
  const Graph& g = exe_->graph();
  const VarId id = constant_named(g, name);
  if (bytes != constant_bytes(name)) fail(ErrorCode::kShapeMismatch, "constant '" + name + "': data has the wrong size");
  if (bytes) scatter(Tensor{id, g.var(id).shape}, data);
}

void Engine::read_output(uint32_t i, uint8_t* data, size_t bytes) const {
  if (i >= num_outputs()) fail(ErrorCode::kInvalidArgument, "output index " + std::to_string(i) + " out of range");
  if (bytes != out_buf_[i].size()) fail(ErrorCode::kShapeMismatch, "output buffer has the wrong size");
  if (bytes) std::memcpy(data, out_buf_[i].data(), bytes);  // an empty output has no buffer to copy from
}

namespace {

// `count` elements of `elem` bytes, `stride` bytes apart at `src`, packed at
// `dst`: a loop of loads and stores of the element's width for the usual
// widths (a transpose's halves and floats), a copy call per element otherwise.
template <typename Word>
inline void strided_words(uint8_t* dst, const uint8_t* src, uint64_t count, int64_t stride) {
  for (uint64_t k = 0; k < count; ++k, src += stride) {
    Word w;
    std::memcpy(&w, src, sizeof(Word));
    std::memcpy(dst + k * sizeof(Word), &w, sizeof(Word));
  }
}
inline void strided_copy(uint8_t* dst, const uint8_t* src, uint64_t count, int64_t stride, uint32_t elem) {
  switch (elem) {
    case 1: strided_words<uint8_t>(dst, src, count, stride); break;
    case 2: strided_words<uint16_t>(dst, src, count, stride); break;
    case 4: strided_words<uint32_t>(dst, src, count, stride); break;
    case 8: strided_words<uint64_t>(dst, src, count, stride); break;
    default:
      for (uint64_t k = 0; k < count; ++k, src += stride) std::memcpy(dst + k * elem, src, elem);
  }
}

}  // namespace

namespace {

// n bytes from `from` to `to`, as memmove. Up to 64 bytes (most exchange
// copies are a few dozen) inline: both ends loaded before either is stored
// (two overlapping halves), without a call.
inline void move_bytes(uint8_t* to, const uint8_t* from, uint64_t n) {
  auto halves = [&](auto word) {
    constexpr uint32_t w = sizeof(word);
    decltype(word) a, b;
    std::memcpy(&a, from, w);
    std::memcpy(&b, from + n - w, w);
    std::memcpy(to, &a, w);
    std::memcpy(to + n - w, &b, w);
  };
  struct Bytes32 {
    uint8_t b[32];
  };
  struct Bytes16 {
    uint8_t b[16];
  };
  if (n > 64) std::memmove(to, from, n);
  else if (n > 32) halves(Bytes32{});
  else if (n > 16) halves(Bytes16{});
  else if (n > 8) halves(uint64_t{});
  else if (n >= 4) halves(uint32_t{});
  else std::memmove(to, from, n);
}

// `outer` rows of `row` bytes, the source's `src_step` and the
// destination's `dst_step` bytes apart, one after another (as memmove each).
inline void move_rows(uint8_t* to, const uint8_t* from, uint64_t row, uint64_t outer, int64_t src_step,
                      int64_t dst_step) {
  for (; outer > 0; --outer, from += src_step, to += dst_step) move_bytes(to, from, row);
}

}  // namespace

void Engine::copy_pattern(uint8_t* dst, const Executable::ByteCopy& c) const {
  const uint8_t* src = arenas_[c.src_tile] + c.src_byte;
  uint8_t* d = dst + c.dst_byte;
  const uint64_t row = static_cast<uint64_t>(c.count) * c.elem;
  if (c.contiguous_rows()) return move_rows(d, src, row, c.outer, c.src_outer, c.dst_outer);
  for (uint64_t o = 0; o < c.outer; ++o, src += c.src_outer, d += c.dst_outer) {
    if (c.src_stride == 0) {
      // One element repeated: double the filled prefix.
      std::memcpy(d, src, c.elem);
      uint64_t done = c.elem;
      while (done < row) {
        const uint64_t n = std::min(done, row - done);
        std::memcpy(d + done, d, n);
        done += n;
      }
    } else {
      strided_copy(d, src, c.count, c.src_stride, c.elem);
    }
  }
}

namespace {
// Asks the host's caches for the first four lines of each vertex object
// of the next entry, while this one runs (a convolution vertex, the
// largest of the frequent kinds, fits in them: codelets/conv.cc).
void prefetch_vertices(Executable::VertexSpan vs) {
  for (const Vertex* v : vs) {
    const char* p = reinterpret_cast<const char*>(v);
    __builtin_prefetch(p);
    __builtin_prefetch(p + 64);
    __builtin_prefetch(p + 128);
    __builtin_prefetch(p + 192);
  }
}
}  // namespace

void Engine::copy_into_tile(uint8_t* dst, uint32_t e, uint32_t first, uint32_t last) const {
  const Executable::HostCopy* hc = exe_->host_copies()[e].data();
  for (uint32_t k = first; k < last; ++k) {
    const Executable::HostCopy& c = hc[k];
    if (!c.rows()) {
      move_bytes(dst + c.dst_byte, block_ + c.src, c.bytes);
    } else if (c.src != Executable::kPatternCopy) {
      move_rows(dst + c.dst_byte, block_ + c.rows_src(), c.row_bytes(), c.outer(), c.row_bytes(), c.dst_outer());
    } else {
      copy_pattern(dst, exe_->byte_copies()[e][k]);
    }
  }
}

void Engine::run_vertices(uint32_t tile, Executable::VertexSpan vertices, bool random, std::string* found) {
  uint8_t* mem = arenas_[tile];
  ScopedRounding rounding(options_.stochastic_rounding ? &rngs_[tile] : nullptr);
  ScopedRandom draws(random ? &random_rngs_[tile] : nullptr);
  for (const Vertex* v : vertices) {
    if (options_.fp_exceptions) std::feclearexcept(FE_ALL_EXCEPT);
    v->compute(mem);
    if (options_.fp_exceptions && !(*found = floating_point_exception(exe_->graph(), *v, mem)).empty()) break;
  }
}

void Engine::run() { run_steps(0, exe_->program().size()); }

void Engine::run_segment(uint32_t segment) {
  if (segment >= exe_->num_segments())
    fail(ErrorCode::kInvalidArgument, "the program has " + std::to_string(exe_->num_segments()) + " segment(s), not " +
                                          std::to_string(segment + 1));
  run_steps(exe_->segment_begin(segment), exe_->segment_begin(segment + 1));
}

void Engine::run_steps(size_t first, size_t last) {
  const Graph& g = exe_->graph();
  if (first == 0)
    for (size_t i = 0; i < in_set_.size(); ++i)
      if (!in_set_[i]) fail(ErrorCode::kInvalidState, "input '" + g.inputs()[i].name + "' was not written before run()");
  auto t0 = std::chrono::steady_clock::now();
  // A program that takes turns with others parks its workers at the end of
  // the run, a failed one too.
  struct ParkAtEnd {
    ThreadPool* pool;
    ~ParkAtEnd() {
      if (pool) pool->park();
    }
  } park_at_end{options_.shares_cores ? pool_.get() : nullptr};
  RunStats st;
  const auto& program = exe_->program();
  const auto& costs = exe_->step_costs();
  auto since = [](std::chrono::steady_clock::time_point a) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
  };
  st.step_seconds.assign(program.size(), 0.0);
  // Host time since `start` to the step's kind (`bucket`) and to step `at`.
  auto charge = [&](double& bucket, size_t at, std::chrono::steady_clock::time_point start) {
    const double t = since(start);
    bucket += t;
    st.step_seconds[at] += t;
  };
  // Tiles have homes: with k threads, thread j works first on the j-th of
  // k equal shares of a step's tiles (schedules list tiles in ascending
  // order), then helps with the others' shares. Steps over the same tiles
  // (a product's partial sums, then its bias and activation) give each
  // tile the same thread, so that what its vertices wrote in one step is
  // still in that core's cache when the next step reads it (BERT-style b1
  // 12% faster than handing tiles to whichever thread asks), and every
  // thread starts with as many tiles: shares by fixed tile numbers left a
  // step over tiles 0-879 with 736 on one thread and 144 on the other,
  // which then ran half of the first's (SqueezeNet 3-5% slower:
  // docs/benchmarks.md).
  const size_t nthreads = pool_->size();
  std::vector<size_t> home_at(nthreads + 1);
  // fn(i) for every entry of `list`, each thread starting with its home
  // entries.
  auto on_tiles = [&](const auto& list, const std::function<void(size_t)>& fn) {
    const size_t n = list.size();
    for (size_t j = 0; j <= nthreads; ++j) home_at[j] = n * j / nthreads;
    pool_->parallel_for(n, fn, home_at.data());
  };
  for (size_t s = first; s < last; ++s) {
    const Step& step = program[s];
    const auto step_start = std::chrono::steady_clock::now();
    switch (step.kind) {
      case StepKind::kCompute: {
        const auto& sched = exe_->compute_schedule()[step.index];
        const bool random = random_cs_[step.index];
        if (!options_.stochastic_rounding && !options_.fp_exceptions && !random) {
          on_tiles(sched, [&](size_t i) {
            if (i + 1 < sched.size()) prefetch_vertices(sched[i + 1].vertices);
            uint8_t* mem = arenas_[sched[i].tile];
            for (const Vertex* v : sched[i].vertices) v->compute(mem);
          });
        } else {
          std::vector<std::string> found(options_.fp_exceptions ? sched.size() : 0);
          on_tiles(sched, [&](size_t i) {
            run_vertices(sched[i].tile, sched[i].vertices, random, found.empty() ? nullptr : &found[i]);
          });
          if (options_.fp_exceptions) check_floating_point(step.index, found, [&](size_t i) { return sched[i].tile; });
        }
        st.compute_cycles += costs[s].cycles;
        charge(st.compute_seconds, s, step_start);
        break;
      }
      case StepKind::kExchange: {
        const auto& sched = exe_->byte_schedule()[step.index];
        const auto& copies = exe_->byte_copies()[step.index];
        // Staged exchanges first snapshot every source run, in copy order.
        std::vector<uint8_t> stage;
        std::vector<size_t> stage_at;
        if (exe_->staged(step.index)) {
          for (const auto& c : copies) {
            stage_at.push_back(stage.size());
            for (uint64_t o = 0; o < c.outer; ++o)
              for (uint64_t k = 0; k < c.count; ++k) {
                const uint8_t* sp = arenas_[c.src_tile] + c.src_byte + static_cast<int64_t>(o) * c.src_outer +
                                    static_cast<int64_t>(k) * c.src_stride;
                stage.insert(stage.end(), sp, sp + c.elem);
              }
          }
        }
        const auto& fused = exe_->fused(s);
        const Step* next = s + 1 < last ? &program[s + 1] : nullptr;
        const bool shadowed = exe_->shadowed(s);
        // A shadowed exchange runs fused whatever the options: its
        // shadowed bytes live only from a tile's copies to its vertices.
        NX_CHECK(!shadowed || (next && next->kind == StepKind::kCompute), "a shadowed exchange without its compute step");
        const bool plain = !options_.stochastic_rounding && !options_.fp_exceptions &&
                           !(next && next->kind == StepKind::kCompute && random_cs_[next->index]);
        if (shadowed) {
          // Range by range, each on one thread: the range's tiles share
          // their shadow region (Executable::shadowed).
          const bool random = random_cs_[next->index];
          // A tile's vertices, as its compute step runs them.
          auto tile_vertices = [&](uint32_t tile, Executable::VertexSpan vertices, std::string* found) {
            if (!plain) return run_vertices(tile, vertices, random, found);
            uint8_t* mem = arenas_[tile];
            for (const Vertex* v : vertices) v->compute(mem);
          };
          // (Exceptions found by tile, only when they are asked for: a
          // step's worth of strings costs as much as a small step.)
          std::vector<std::string> found(options_.fp_exceptions ? fused.size() : 0);
          pool_->parallel_for_claimed(
              fused.size(),
              [&](size_t i) {
                const Executable::FusedTile& ft = fused[i];
                copy_into_tile(block_ + ft.shadow_base, step.index, ft.begin, ft.shadow_end);
                copy_into_tile(arenas_[ft.tile], step.index, ft.shadow_end, ft.end);
                tile_vertices(ft.tile, ft.vertices, found.empty() ? nullptr : &found[i]);
              },
              exe_->shadow_bounds(s).data(), Executable::kShadowRanges);
          const auto& late = exe_->fused_late(s);
          std::vector<std::string> found_late(options_.fp_exceptions ? late.size() : 0);
          on_tiles(late, [&](size_t i) {
            tile_vertices(late[i].tile, late[i].vertices, found_late.empty() ? nullptr : &found_late[i]);
          });
          if (options_.fp_exceptions) {
            // The first exception by tile, as the compute step alone reports it.
            std::vector<std::string> first(1);
            uint32_t at = UINT32_MAX;
            auto take = [&](uint32_t tile, const std::string& what) {
              if (!what.empty() && tile < at) {
                at = tile;
                first[0] = what;
              }
            };
            for (size_t i = 0; i < fused.size(); ++i) take(fused[i].tile, found[i]);
            for (size_t i = 0; i < late.size(); ++i) take(late[i].tile, found_late[i]);
            check_floating_point(next->index, first, [&](size_t) { return at; });
          }
        } else if (!fused.empty() && next && plain) {
          // A fused exchange (Executable::fused): each tile's copies, then
          // its vertices of the next step, while the copied bytes are hot.
          on_tiles(fused, [&](size_t i) {
            if (i + 1 < fused.size()) prefetch_vertices(fused[i + 1].vertices);
            const Executable::FusedTile& ft = fused[i];
            uint8_t* mem = arenas_[ft.tile];
            copy_into_tile(mem, step.index, ft.begin, ft.end);
            for (const Vertex* v : ft.vertices) v->compute(mem);
          });
          const auto& late = exe_->fused_late(s);
          on_tiles(late, [&](size_t i) {
            uint8_t* mem = arenas_[late[i].tile];
            for (const Vertex* v : late[i].vertices) v->compute(mem);
          });
        }
        if (shadowed || (!fused.empty() && next && plain)) {
          st.exchange_cycles += costs[s].cycles;
          st.exchanged_bytes += costs[s].bytes;
          st.copied_bytes += exe_->copied_bytes(step.index);
          st.cycles += costs[s].cycles;
          st.steps += 1;
          ++s;  // the compute step ran too
          st.compute_cycles += costs[s].cycles;
          charge(st.compute_seconds, s, step_start);
          break;
        }
        on_tiles(sched, [&](size_t i) {
          uint8_t* dst = arenas_[sched[i].dst_tile];
          if (stage_at.empty()) {
            copy_into_tile(dst, step.index, sched[i].begin, sched[i].end);
            return;
          }
          for (uint32_t ci = sched[i].begin; ci < sched[i].end; ++ci) {
            const Executable::ByteCopy& c = copies[ci];
            const uint8_t* sp = stage.data() + stage_at[ci];
            const uint64_t row = static_cast<uint64_t>(c.count) * c.elem;
            for (uint64_t o = 0; o < c.outer; ++o, sp += row)
              std::memcpy(dst + c.dst_byte + static_cast<int64_t>(o) * c.dst_outer, sp, row);
          }
        });
        st.exchange_cycles += costs[s].cycles;
        st.exchanged_bytes += costs[s].bytes;
        st.copied_bytes += exe_->copied_bytes(step.index);
        charge(st.exchange_seconds, s, step_start);
        break;
      }
      case StepKind::kHostToDevice:
        scatter(g.inputs()[step.index].tensor, in_buf_[step.index].data());
        st.host_cycles += costs[s].cycles;
        st.host_bytes += costs[s].bytes;
        charge(st.host_io_seconds, s, step_start);
        break;
      case StepKind::kDeviceToHost:
        gather(g.outputs()[step.index].tensor, out_buf_[step.index].data());
        st.host_cycles += costs[s].cycles;
        st.host_bytes += costs[s].bytes;
        charge(st.host_io_seconds, s, step_start);
        break;
    }
    st.cycles += costs[s].cycles;
    st.steps += 1;
  }
  st.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_ = std::move(st);
}

}  // namespace neurenix
