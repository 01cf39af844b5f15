// The graph: variables mapped onto tiles, vertices grouped into compute sets,
// exchanges, and the program that sequences them (Poplar's Graph + Program).
//
// Every element of a variable lives on exactly one tile. A variable's mapping is
// a list of intervals of its flat (row-major) element index, each on one tile;
// on a tile, the intervals are stored back to back in flat order, so an element
// has a tile-local index. Vertices only name memory of their own tile
// (`Field`s); moving data between tiles is done by `Copy`s in an exchange.
// Addresses are assigned later by the compiler (compiler.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "neurenix/device_type.h"
#include "neurenix/target.h"

namespace neurenix {

using VarId = uint32_t;
using Shape = std::vector<uint64_t>;

uint64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);

enum class VarKind : uint8_t {
  kIntermediate,  // produced and consumed by the program
  kInput,         // written by a host stream at the start of every run
  kConstant,      // initialised once when the executable is loaded; always live
  kTemporary,     // scratch of one operation (exchange buffers, partials)
};

struct TileInterval {
  uint64_t begin;  // flat element range [begin, end)
  uint64_t end;
  uint32_t tile;   // global tile id (ipu * tiles_per_ipu + tile)
  uint64_t local;  // element index within the tile's block of this variable
};

// Where one element lives: its tile and its tile-local index.
struct TileLocation {
  uint32_t tile;
  uint64_t local;
};

struct TileShare {
  uint32_t tile;
  uint64_t count;                  // elements of the variable on this tile
  std::vector<uint32_t> intervals; // indices into Variable::mapping, flat order
};

// A constant's bytes (device element type), kept alive by `owner`: a
// std::vector, or the buffer the layer that encoded them owns (the bridge
// keeps the Rust vector a constant was encoded into: weights are never
// copied again).
struct ConstantBytes {
  std::shared_ptr<const void> owner;
  const uint8_t* data = nullptr;
  size_t size = 0;
};

struct Variable {
  std::string name;
  std::string node;  // the model node whose lowering made it ("" for model inputs)
  DeviceType dtype;
  Shape shape;
  uint64_t numel = 0;
  VarKind kind = VarKind::kIntermediate;
  uint32_t ipu = 0;
  bool mapped = false;
  std::vector<TileInterval> mapping;  // sorted by begin, covering [0, numel)
  std::vector<TileShare> tiles;       // sorted by tile
  // For finding an element's interval: entry b is the interval holding
  // element b << interval_shift (buckets about as long as an interval).
  std::vector<uint32_t> interval_index;
  uint32_t interval_shift = 0;
  ConstantBytes data;  // constants only, device dtype

  // The share of `tile`, or nullptr.
  const TileShare* share(uint32_t tile) const;
  uint64_t bytes_on(uint32_t tile) const;
};

// A tensor is a variable seen with some shape (same element count): reshapes
// are free, everything else that rearranges elements is a copy.
struct Tensor {
  VarId var = 0;
  Shape shape;
  uint64_t numel() const { return shape_numel(shape); }
};

// A strided view of a variable's flat elements (numpy-style, strides in
// elements; 0 broadcasts). Used to describe what a copy reads or writes.
struct View {
  VarId var;
  int64_t offset = 0;
  Shape shape;
  std::vector<int64_t> strides;

  static View of(const Tensor& t);  // the whole tensor, row-major
  uint64_t numel() const { return shape_numel(shape); }
  // Makes this view another one, in the storage it holds (a view set again
  // for each of many copies allocates nothing after the first).
  View& set(VarId v, int64_t off, std::initializer_list<uint64_t> dims, std::initializer_list<int64_t> steps) {
    var = v;
    offset = off;
    shape.assign(dims);
    strides.assign(steps);
    return *this;
  }
};

enum class Access : uint8_t { kRead, kWrite, kReadWrite };

// A list that is almost always empty, held as one pointer (null when
// empty) so that the objects holding it, which a run reads by the hundred
// thousand, stay small; its length and items lie in one block, so that
// reading it takes one pointer (not a vector's, then its data's). Read
// like the vector it is built from.
template <class T>
class RareList {
  static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= alignof(uint64_t), "items copied as bytes after the length");

 public:
  RareList() = default;
  RareList(const std::vector<T>& list)  // implicit: it stands for the vector
      : block_(list.empty() ? nullptr : make(list.data(), list.size())) {}
  RareList(const RareList& o) : block_(o.block_ ? make(o.begin(), o.size()) : nullptr) {}
  RareList(RareList&&) noexcept = default;
  RareList& operator=(const RareList& o) { return *this = RareList(o); }
  RareList& operator=(RareList&&) noexcept = default;
  // The list read through one pointer, valid while the list is.
  class View {
   public:
    View() = default;
    explicit View(const uint64_t* block) : block_(block) {}
    bool empty() const { return block_ == nullptr; }
    size_t size() const { return block_ ? static_cast<size_t>(*block_) : 0; }
    const T& operator[](size_t i) const { return begin()[i]; }
    const T* begin() const { return block_ ? reinterpret_cast<const T*>(block_ + 1) : nullptr; }
    const T* end() const { return block_ ? begin() + *block_ : nullptr; }

   private:
    const uint64_t* block_ = nullptr;  // the length, then the items
  };
  View view() const { return View(block_.get()); }
  bool empty() const { return view().empty(); }
  size_t size() const { return view().size(); }
  const T& operator[](size_t i) const { return view()[i]; }
  const T* begin() const { return view().begin(); }
  const T* end() const { return view().end(); }
  void clear() { block_.reset(); }

 private:
  static std::unique_ptr<uint64_t[]> make(const T* items, size_t n) {
    std::unique_ptr<uint64_t[]> b(new uint64_t[1 + (n * sizeof(T) + sizeof(uint64_t) - 1) / sizeof(uint64_t)]);
    b[0] = n;
    std::memcpy(b.get() + 1, items, n * sizeof(T));
    return b;
  }
  std::unique_ptr<uint64_t[]> block_;
};

// A run of tile-local memory used by a vertex: `count` elements of `var`
// starting at tile-local element `local`, all on `tile`.
//
// A run reads every vertex object of the program, hundreds of thousands for
// a large model, and they do not stay in the host's caches from one run to
// the next: what a codelet reads when it runs (address, count, pieces) comes
// first, and a field is kept to 64 bytes.
struct Field {
  // A part of the field read where another tile holds it (below).
  struct Piece {
    uint64_t begin;    // first element of the field in the piece
    int64_t address;   // where that element is, as `address`
    uint32_t tile;     // the sender (UINT32_MAX: the field's own bytes)
    VarId var;         // the sender's variable
  };
  // The pieces, by first element (ascending, the first at 0), when some but
  // not all of the field is aliased; empty otherwise (almost every field).
  using Pieces = RareList<Piece>;

  Field() = default;
  Field(VarId var_, uint32_t tile_, uint64_t local_, uint64_t count_)
      : count(count_), local(local_), var(var_), tile(tile_) {}

  // Where the vertex finds the field in the host block, relative to its
  // tile's arena offset (Executable::host_offset, arena_offset): its own
  // bytes, or, for data received unchanged from another tile, the sender's
  // bytes (a receive alias, see compiler.h). Set by the compiler; codelets
  // read and write only here.
  int64_t address = 0;
  uint64_t count = 0;
  // For a field read through for_each_field_run() and load_field_floats()
  // (`piecewise`, below), a receive alias may give it in pieces, each
  // received from its own sender (a window gathered from several tiles).
  Pieces pieces{};
  uint64_t local = 0;
  uint64_t byte_offset = 0;  // its own bytes within the tile's memory; set by the compiler
  VarId var = 0;
  uint32_t tile = 0;
  // The sender a receive alias reads (UINT32_MAX: none), for checked mode.
  uint32_t alias_tile = UINT32_MAX;
  VarId alias_var = 0;
  Access access = Access::kRead;
  // The field's bytes are shadowed: kept by the host at `address` in its
  // tile range's shadow region, not in the tile's arena
  // (Executable::shadowed).
  bool shadow = false;
  // Set by a codelet that reads the field through for_each_field_run() and
  // load_field_floats(): its pieces may then be set.
  bool piecewise = false;
};
static_assert(sizeof(Field) == 64, "a field is one cache line's worth (see above)");

// Fields that few vertices of a kind have, held out of line so that the
// others stay small: a bias, with its type, and the scales of float8
// operands (a float32 scalar field each).
struct BiasField {
  Field field;
  DeviceType dtype;
};
struct Float8Scales {
  Field a, b;
};

// A field as a codelet holds it: what the codelet reads when it runs
// (address, count, pieces), 32 bytes in the vertex object, and the whole
// field, which the compiler reads and sets (list_fields gives it), kept
// apart with the other vertices' fields, so that the vertex objects a run
// reads stay small. compile() ends by copying what it set into the
// codelets' copies (Vertex::refresh).
class FieldRef {
 public:
  FieldRef(const Field& f);  // implicit: it stands for the field
  FieldRef(const FieldRef& o) : FieldRef(*o.field_) {}
  FieldRef(FieldRef&& o) noexcept
      : address(o.address), count(o.count), pieces(o.pieces), field_(std::exchange(o.field_, nullptr)) {}
  FieldRef& operator=(const FieldRef& o) { return *this = FieldRef(o); }
  FieldRef& operator=(FieldRef&& o) noexcept {
    std::swap(address, o.address);
    std::swap(count, o.count);
    std::swap(pieces, o.pieces);
    std::swap(field_, o.field_);
    return *this;
  }
  ~FieldRef();
  Field& field() const { return *field_; }
  // Takes the field's address, count and pieces as they are now.
  void refresh() {
    address = field_->address;
    count = field_->count;
    pieces = field_->pieces.view();
  }
  // Holds what the field does now.
  bool current() const {
    return address == field_->address && count == field_->count && pieces.begin() == field_->pieces.begin() &&
           pieces.size() == field_->pieces.size();
  }

  int64_t address;
  uint64_t count;
  Field::Pieces::View pieces;

 private:
  Field* field_;
};

// Elements [first, first + n) of field `f` (of type `type`) as floats, each
// piece read where it is.
template <class F>
void load_field_floats(const uint8_t* mem, const F& f, DeviceType type, uint64_t first, uint64_t n, float* out);
// Calls visit(bytes, at, len) for the runs that make up elements
// [first, first + n) of field `f`, in order: `len` elements read at `bytes`
// (relative to `mem`, each piece where it is), the first of them element
// first + at.
// (`F`: Field or FieldRef.)
template <class F, class Visit>
void for_each_field_run(const uint8_t* mem, const F& f, uint64_t first, uint64_t n, size_t elem_size, Visit visit) {
  if (f.pieces.empty()) {
    if (n) visit(mem + f.address + static_cast<int64_t>(first * elem_size), uint64_t{0}, n);
    return;
  }
  // (From the start, the walk begins at the first piece: no search through
  // pieces that have left the caches.)
  auto next = first == 0 ? f.pieces.begin() + 1
                         : std::upper_bound(f.pieces.begin(), f.pieces.end(), first,
                                            [](uint64_t e, const Field::Piece& p) { return e < p.begin; });
  const uint64_t start = first, end = first + n;
  while (first < end) {
    const Field::Piece& p = *(next - 1);
    const uint64_t stop = next == f.pieces.end() ? end : std::min(end, next->begin);
    visit(mem + p.address + static_cast<int64_t>((first - p.begin) * elem_size), first - start, stop - first);
    first = stop;
    ++next;
  }
}

template <class F>
void load_field_floats(const uint8_t* mem, const F& f, DeviceType type, uint64_t first, uint64_t n, float* out) {
  for_each_field_run(mem, f, first, n, device_type_size(type),
                     [&](const uint8_t* run, uint64_t at, uint64_t len) { load_floats(run, type, out + at, len); });
}

class Vertex {
 public:
  virtual ~Vertex() = default;
  virtual const char* name() const = 0;
  // Runs on the tile's memory only; fields hold resolved byte offsets.
  virtual void compute(uint8_t* tile_memory) const = 0;
  // Estimated tile cycles (the op library splits work over the worker threads).
  virtual uint64_t cycles(const TargetSpec& target) const = 0;
  // Bytes of code this vertex's codelet occupies on a tile (counted once per
  // codelet per tile).
  virtual uint64_t code_bytes() const { return 256; }
  // Bytes of vertex state beyond its fields' (tables a vertex carries).
  virtual uint64_t state_bytes() const { return 0; }
  // True if compute() draws from the tile's random generator.
  virtual bool uses_random() const { return false; }
  // Copies what the compiler set in the fields into the codelet's FieldRefs.
  void refresh() {
    thread_local std::vector<const FieldRef*> refs;
    refs.clear();
    list_refs(refs);
    for (const FieldRef* r : refs) const_cast<FieldRef*>(r)->refresh();
    derive();
  }
  // True when every FieldRef holds what its field does now (checked mode:
  // a field changed after compile() is one the codelet does not see).
  bool refreshed() const {
    thread_local std::vector<const FieldRef*> refs;
    refs.clear();
    list_refs(refs);
    for (const FieldRef* r : refs)
      if (!r->current()) return false;
    return true;
  }
  // The vertex's fields (listed once, then cached: fields never change).
  const std::vector<Field*>& all_fields() {
    if (!fields_) {
      fields_ = std::make_unique<std::vector<Field*>>();
      list_fields(*fields_);
    }
    return *fields_;
  }
  // The fields as listed (compile() lists every vertex of its graph first;
  // a graph checks a vertex as it joins without keeping the list, so that
  // the lists do not lie between the vertex objects a run reads).
  const std::vector<Field*>& fields() const { return fields_ ? *fields_ : kNoFields; }
  // The fields, listed into `out` and not kept.
  void list_fields_into(std::vector<Field*>& out) {
    out.clear();
    list_fields(out);
  }
  uint32_t tile = 0;

 protected:
  virtual void list_fields(std::vector<Field*>& out) = 0;
  // The codelet's FieldRefs (a codelet holding plain Fields has none).
  virtual void list_refs(std::vector<const FieldRef*>& out) const { (void)out; }
  // Called by refresh(), its FieldRefs holding what the compiler set: what
  // a codelet keeps from them for its runs, worked out once (the
  // convolution: where its window's channels are).
  virtual void derive() {}

 private:
  static inline const std::vector<Field*> kNoFields{};
  std::unique_ptr<std::vector<Field*>> fields_;  // once listed (a vertex object is 24 bytes before its own members)
};

struct ComputeSet {
  std::string name;
  std::string node;  // the model node whose lowering made it
  std::vector<std::unique_ptr<Vertex>> vertices;
};

// Moves `outer` rows of `count` elements from one tile's memory to another's
// (or within a tile). In a row, source elements are `src_stride` apart in the
// source's tile-local order (0 repeats one element) and destinations are
// contiguous; successive rows start `src_outer` / `dst_outer` elements further
// on. One descriptor per such 2-D pattern, as the exchange's strided sends.
// Tile-local indices and their differences fit 32 bits (copy_view fails with
// kOutOfMemory for a variable holding more elements on one tile): a large
// model has millions of these.
struct Copy {
  VarId src;
  uint32_t src_tile;
  uint32_t src_local;
  int32_t src_stride;
  VarId dst;
  uint32_t dst_tile;
  uint32_t dst_local;
  uint32_t count;
  uint32_t outer = 1;
  int32_t src_outer = 0;
  int32_t dst_outer = 0;
};
static_assert(std::is_trivially_copyable_v<Copy>, "a CopyList moves its copies as bytes");

// A large model's lowering writes millions of copy descriptors, one exchange
// after another, on one thread (150 MB for ResNet-50). A std::vector would
// move its elements to a new block at every doubling and fault that block's
// pages in on the lowering thread. A CopyList larger than kMappedBytes is a
// mapping of its own that grows in place (mremap moves its pages, it copies
// none), and the pages of each new tail are faulted in on another thread
// (Linux's MADV_POPULATE_WRITE, which fills the page tables without writing
// the bytes), ahead of the lowering that writes them. A page fault on fresh
// memory costs 1.5-10 us (the slow end on a virtual machine that handed
// freed memory back to its hypervisor).
//
// Read like a std::vector (size, [], at, back, range for). Throws
// std::bad_alloc when the host has no memory for it; a list gives up its
// helper's pending work on its memory before it remaps or unmaps it, so the
// helper only ever touches memory a list holds (copy_list.cc).
class CopyList {
 public:
  // From this size on, a list is a mapping of its own (smaller ones are on
  // the heap, where freed blocks are used again).
  static constexpr size_t kMappedBytes = size_t{256} << 10;

  CopyList() = default;
  CopyList(const CopyList& other);
  CopyList(CopyList&& other) noexcept;
  CopyList& operator=(CopyList other) noexcept;
  ~CopyList();

  void push_back(Copy c) {
    if (size_ == capacity_) grow(size_ + 1);
    data_[size_++] = c;
  }
  // A mapped list gives back the pages past its last copy (a heap list
  // stays as it is).
  void shrink_to_fit();

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }
  // Whether the list is a mapping of its own (grown past kMappedBytes).
  bool mapped() const { return mapped_bytes_ != 0; }
  Copy& operator[](size_t i) { return data_[i]; }
  const Copy& operator[](size_t i) const { return data_[i]; }
  const Copy& at(size_t i) const;  // std::out_of_range past the end
  Copy& back() { return data_[size_ - 1]; }
  const Copy& back() const { return data_[size_ - 1]; }
  Copy* begin() { return data_; }
  Copy* end() { return data_ + size_; }
  const Copy* begin() const { return data_; }
  const Copy* end() const { return data_ + size_; }

 private:
  void grow(size_t need);
  void release();

  Copy* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
  size_t mapped_bytes_ = 0;  // the mapping's length; 0 while on the heap
};

// Drops the tails not yet faulted in (the lowering is over: the host's
// threads are the compiler's now); a chunk in progress, at most 2 MiB,
// finishes.
void stop_prefaulting_copies();
// Whether new tails are faulted in on the helper thread: the kernel can
// populate pages (Linux 5.14 on) and the thread runs (it is started here if
// need be).
bool copies_prefaulted();

struct Exchange {
  std::string name;
  std::string node;  // the model node whose lowering made it
  CopyList copies;
};

enum class StepKind : uint8_t { kCompute, kExchange, kHostToDevice, kDeviceToHost };

struct Step {
  StepKind kind;
  uint32_t index;  // compute set, exchange, input or output number
};

struct HostStream {
  std::string name;
  Tensor tensor;
};

// What the op library decided for one operation, for reports.
struct OpPlan {
  std::string name;   // the model node it lowers
  std::string kind;   // "matmul", "map", "reduce", ...
  uint32_t ipu = 0;
  std::string plan;   // planner decision, human readable
  uint32_t tiles_used = 0;
  uint64_t temp_bytes_per_tile = 0;  // planner temporaries on the busiest tile
  uint64_t estimated_cycles = 0;     // planner estimate
};

class Graph {
 public:
  // A graph for `num_ipus` IPUs of `spec` (which may have more).
  Graph(SystemSpec spec, uint32_t num_ipus);

  const SystemSpec& spec() const { return spec_; }
  const TargetSpec& target() const { return target_; }
  uint32_t num_ipus() const { return num_ipus_; }
  uint32_t tiles_per_ipu() const { return tiles_per_ipu_; }
  uint32_t num_tiles() const { return num_ipus_ * tiles_per_ipu_; }
  uint64_t bytes_per_tile() const { return spec_.tile_bytes(); }
  uint32_t ipu_of_tile(uint32_t tile) const { return tile / tiles_per_ipu_; }
  uint32_t first_tile(uint32_t ipu) const { return ipu * tiles_per_ipu_; }

  // The model node being lowered ("" for none): variables, compute sets and
  // exchanges added from now on belong to it, for reports.
  void begin_node(std::string node) { node_ = std::move(node); }
  const std::string& node() const { return node_; }

  // Variables ---------------------------------------------------------------
  Tensor add_variable(const std::string& name, DeviceType dtype, const Shape& shape, VarKind kind, uint32_t ipu);
  Tensor add_constant(const std::string& name, DeviceType dtype, const Shape& shape, uint32_t ipu, ConstantBytes data);
  Tensor add_constant(const std::string& name, DeviceType dtype, const Shape& shape, uint32_t ipu,
                      std::shared_ptr<const std::vector<uint8_t>> data);
  Variable& var(VarId id) { return vars_.at(id); }
  const Variable& var(VarId id) const { return vars_.at(id); }
  size_t num_vars() const { return vars_.size(); }

  // Sets a mapping from intervals (any order; must cover the variable exactly
  // once, on tiles of the variable's IPU).
  void set_mapping(VarId id, std::vector<TileInterval> intervals);
  // Spreads the variable over the tiles of its IPU in contiguous chunks of at
  // least `grain` elements, starting at a rotating tile so that small tensors
  // do not all land on tile 0.
  void map_linearly(VarId id, uint64_t grain = 0);
  void map_to_tile(VarId id, uint32_t tile);
  // Gives `dst` the same tile mapping as `src` (same element count).
  void clone_mapping(VarId dst, VarId src);
  // Maps `id` linearly if nothing has mapped it yet.
  void ensure_mapped(VarId id);

  // Locates a flat element: its tile and tile-local index. `hint` caches the
  // interval found last (sequential scans are O(1)).
  void locate(VarId id, uint64_t flat, uint32_t* tile, uint64_t* local, size_t* hint) const;
  TileLocation locate(VarId id, uint64_t flat) const;

  // Program -------------------------------------------------------------------
  uint32_t add_compute_set(const std::string& name);
  void add_vertex(uint32_t cs, std::unique_ptr<Vertex> v);
  uint32_t add_exchange(const std::string& name);
  Exchange& exchange(uint32_t ex) { return exchanges_.at(ex); }
  // Appends a step to the program. Empty compute sets and exchanges are skipped.
  void execute(uint32_t cs);
  void execute_exchange(uint32_t ex);
  // Starts the program's second segment here: an engine can run the steps
  // before (with the output streams, which then come at this point) and
  // after separately (a training step's gradients, then its update). At
  // most one boundary.
  void begin_segment();
  // Where the second segment starts in program(), if it does.
  int64_t segment_start() const { return segment_start_; }

  // Host streams: inputs are written at the start of every run, outputs read
  // at its end.
  uint32_t add_input_stream(const std::string& name, const Tensor& t);
  uint32_t add_output_stream(const std::string& name, const Tensor& t);

  const std::vector<Variable>& vars() const { return vars_; }
  const std::vector<ComputeSet>& compute_sets() const { return compute_sets_; }
  std::vector<ComputeSet>& compute_sets() { return compute_sets_; }
  const std::vector<Exchange>& exchanges() const { return exchanges_; }
  std::vector<Exchange>& exchanges() { return exchanges_; }
  const std::vector<Step>& program() const { return program_; }
  const std::vector<HostStream>& inputs() const { return inputs_; }
  const std::vector<HostStream>& outputs() const { return outputs_; }

  // Hands out `count` consecutive tiles of `ipu` (wrapping around), rotating
  // the start so that successive small operations spread over the chip.
  // Returns the local index of the first; tile i of the window is
  // `window_tile(ipu, first, i)`.
  uint32_t reserve_tiles(uint32_t ipu, uint32_t count);
  // Like reserve_tiles, for an operation that keeps `kept[i]` bytes for the
  // whole program on tile i of its window (weights it lays out): starts the
  // window where the busiest tile's constants, these included, are fewest, so
  // that successive layers' weights do not pile onto the same tiles (Poplar
  // varies each operation's start tile for the same reason). Among equally
  // good starts, the one reserve_tiles would give. Window of kept.size() tiles.
  uint32_t reserve_tiles_balanced(uint32_t ipu, const std::vector<uint64_t>& kept);
  uint32_t window_tile(uint32_t ipu, uint32_t first, uint32_t i) const {
    return first_tile(ipu) + (first + i) % tiles_per_ipu_;
  }

  // Bytes of constants (live for the whole program) mapped to `tile` so far,
  // and the most any tile of `ipu` holds.
  uint64_t constant_bytes(uint32_t tile) const { return constant_bytes_.at(tile); }
  uint64_t max_constant_bytes(uint32_t ipu) const;

  void record_plan(OpPlan p) { op_plans_.push_back(std::move(p)); }
  const std::vector<OpPlan>& op_plans() const { return op_plans_; }
  void warn(const std::string& w) { warnings_.push_back(w); }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  void rebuild_tiles(Variable& v);
  static void build_interval_index(Variable& v);
  // Adds (sign +1) or removes (-1) a mapped constant's bytes from constant_bytes_.
  void count_constant(const Variable& v, int sign);

  SystemSpec spec_;
  TargetSpec target_;
  uint32_t num_ipus_;
  uint32_t tiles_per_ipu_;
  std::vector<Variable> vars_;
  std::vector<ComputeSet> compute_sets_;
  std::vector<Exchange> exchanges_;
  std::vector<Step> program_;
  int64_t segment_start_ = -1;
  std::vector<HostStream> inputs_;
  std::vector<HostStream> outputs_;
  std::vector<uint32_t> next_tile_;  // per IPU, for map_linearly's rotation
  std::vector<uint64_t> constant_bytes_;  // per global tile
  std::vector<OpPlan> op_plans_;
  std::vector<std::string> warnings_;
  std::string node_;
};

}  // namespace neurenix
