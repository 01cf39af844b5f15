#include "neurenix-sys/cxx/bridge.h"

#include "neurenix-sys/src/bridge.rs.h"
#include "neurenix/ops/conv.h"
#include "neurenix/ops/gather.h"
#include "neurenix/ops/map.h"
#include "neurenix/ops/matmul.h"
#include "neurenix/ops/pool.h"
#include "neurenix/ops/rearrange.h"
#include "neurenix/ops/reduce.h"

namespace neurenix::bridge {

namespace {
thread_local ErrorCode last_error = ErrorCode::kInternal;
}  // namespace

ErrorCode last_error_code() { return last_error; }
void set_last_error_code(ErrorCode code) { last_error = code; }

namespace {

Shape to_shape(rust::Slice<const uint64_t> s) { return Shape(s.begin(), s.end()); }
std::string str(rust::Str s) { return std::string(s.data(), s.size()); }

SystemInfo system_info(const SystemSpec& spec) {
  const TargetSpec& t = spec.target();
  SystemInfo out;
  out.version = rust::String(spec.version);
  out.chip = rust::String(t.chip);
  out.num_ipus = spec.num_ipus;
  out.tiles_per_ipu = spec.tiles();
  out.bytes_per_tile = spec.tile_bytes();
  out.clock_hz = t.clock_hz;
  out.fp16_flops_per_cycle = t.fp16_flops_per_cycle;
  out.fp32_flops_per_cycle = t.fp32_flops_per_cycle;
  out.fp8_flops_per_cycle = t.fp8_flops_per_cycle;
  out.worker_threads = t.worker_threads;
  out.exchange_bytes_per_cycle = t.exchange_bytes_per_cycle;
  out.exchange_descriptor_cycles = t.exchange_descriptor_cycles;
  out.local_read_bytes_per_cycle = t.local_read_bytes_per_cycle;
  out.local_write_bytes_per_cycle = t.local_write_bytes_per_cycle;
  out.sync_cycles = t.sync_cycles;
  out.cross_ipu_sync_cycles = t.cross_ipu_sync_cycles;
  out.ipu_link_bytes_per_sec = t.ipu_link_bytes_per_sec;
  out.ipu_links = t.ipu_links;
  out.host_link = rust::String(t.host_link);
  out.host_link_bytes_per_sec = t.host_link_bytes_per_sec;
  out.host_transfer_latency_cycles = t.host_transfer_latency_cycles;
  out.vertex_overhead_cycles = t.vertex_overhead_cycles;
  for (const auto& n : estimated_target_constants()) out.estimated_constants.push_back(rust::String(n));
  return out;
}

TileTensor tile_tensor(const ::neurenix::TileTensor& t) {
  return TileTensor{rust::String(t.name), rust::String(t.node), t.bytes};
}

}  // namespace

SystemInfo describe_system(rust::Str spec) { return system_info(parse_system_spec(str(spec))); }

rust::String expr_op_name(ExprOpCode op) { return rust::String(::neurenix::expr_op_name(op)); }

std::unique_ptr<GraphBuilder> new_graph(rust::Str spec, uint32_t num_ipus) {
  return std::make_unique<GraphBuilder>(parse_system_spec(str(spec)), num_ipus);
}

GraphBuilder::GraphBuilder(SystemSpec spec, uint32_t num_ipus) : graph_(std::make_unique<Graph>(std::move(spec), num_ipus)) {}

Graph& GraphBuilder::graph() {
  if (!graph_) fail(ErrorCode::kInvalidState, "this graph has already been compiled");
  return *graph_;
}

const Tensor& GraphBuilder::tensor(uint32_t id) const {
  if (id >= tensors_.size()) fail(ErrorCode::kInvalidArgument, "unknown tensor handle " + std::to_string(id));
  return tensors_[id];
}

uint32_t GraphBuilder::keep(const Tensor& t) {
  tensors_.push_back(t);
  return static_cast<uint32_t>(tensors_.size() - 1);
}

uint32_t GraphBuilder::add_input(rust::Str name, DeviceType dtype, rust::Slice<const uint64_t> shape, uint32_t ipu) {
  Graph& g = graph();
  Tensor t = g.add_variable(str(name), dtype, to_shape(shape), VarKind::kInput, ipu);
  g.add_input_stream(str(name), t);
  return keep(t);
}

uint32_t GraphBuilder::add_constant(rust::Str name, DeviceType dtype, rust::Slice<const uint64_t> shape,
                                    rust::Vec<uint8_t> data, uint32_t ipu) {
  auto owner = std::make_shared<const rust::Vec<uint8_t>>(std::move(data));
  ConstantBytes bytes{owner, owner->data(), owner->size()};
  return keep(graph().add_constant(str(name), dtype, to_shape(shape), ipu, std::move(bytes)));
}

uint32_t GraphBuilder::matmul(uint32_t a, uint32_t b, const MatMulOptions& options) {
  ops::MatMulOptions o;
  o.memory_proportion = options.memory_proportion;
  o.partials = options.partials;
  o.out_dtype = options.out_dtype;
  o.ipu = options.ipu;
  o.name = std::string(options.name);
  for (uint32_t id : options.scales) o.scales.push_back(tensor(id));
  Tensor ta = tensor(a), tb = tensor(b);
  return keep(ops::matmul(graph(), ta, tb, o));
}

uint32_t GraphBuilder::map(rust::Slice<const ExprInstr> expr, rust::Slice<const uint32_t> inputs, DeviceType out_dtype,
                           rust::Slice<const uint64_t> shape, uint32_t ipu, rust::Str name) {
  std::vector<::neurenix::ExprInstr> e;
  e.reserve(expr.size());
  for (const auto& i : expr) e.push_back(::neurenix::ExprInstr{i.op, i.arg, i.imm, i.imm2, i.half});
  std::vector<Tensor> ins;
  for (uint32_t id : inputs) ins.push_back(tensor(id));
  return keep(ops::map(graph(), e, ins, out_dtype, to_shape(shape), ipu, str(name)));
}

uint32_t GraphBuilder::reduce(uint32_t x, rust::Slice<const uint32_t> axes, ReduceOp op, ReduceFinal final_op, double scale,
                              DeviceType out_dtype, uint32_t ipu, rust::Str name) {
  std::vector<uint32_t> ax(axes.begin(), axes.end());
  Tensor t = tensor(x);
  return keep(ops::reduce(graph(), t, ax, op, final_op, scale, out_dtype, ipu, str(name)));
}

uint32_t GraphBuilder::reshape(uint32_t x, rust::Slice<const uint64_t> shape) {
  Tensor t = tensor(x);
  Shape s = to_shape(shape);
  if (shape_numel(s) != t.numel())
    fail(ErrorCode::kShapeMismatch, "reshape of " + shape_str(t.shape) + " to " + shape_str(s) + " changes the element count");
  t.shape = s;
  return keep(t);
}

uint32_t GraphBuilder::rearrange(uint32_t x, int64_t offset, rust::Slice<const uint64_t> shape,
                                 rust::Slice<const int64_t> strides, uint32_t ipu, rust::Str name) {
  View v;
  v.var = tensor(x).var;
  v.offset = offset;
  v.shape = to_shape(shape);
  v.strides.assign(strides.begin(), strides.end());
  return keep(ops::rearrange(graph(), v, ipu, str(name)));
}

uint32_t GraphBuilder::concat(rust::Slice<const uint32_t> xs, uint32_t axis, uint32_t ipu, rust::Str name) {
  std::vector<Tensor> ts;
  for (uint32_t id : xs) ts.push_back(tensor(id));
  return keep(ops::concat(graph(), ts, axis, ipu, str(name)));
}

uint32_t GraphBuilder::fill(DeviceType dtype, rust::Slice<const uint64_t> shape, double value, uint32_t ipu, rust::Str name) {
  return keep(ops::fill(graph(), dtype, to_shape(shape), value, ipu, str(name)));
}

void GraphBuilder::mark_output(uint32_t x, rust::Str name) { graph().add_output_stream(str(name), tensor(x)); }
void GraphBuilder::begin_node(rust::Str node) { graph().begin_node(str(node)); }

namespace {

// The window fields ops::ConvOptions and ops::PoolOptions share.
template <typename Options>
void set_window(Options& o, const Window& w) {
  o.kh = w.kh;
  o.kw = w.kw;
  o.sh = w.sh;
  o.sw = w.sw;
  o.dh = w.dh;
  o.dw = w.dw;
  o.pad_top = w.pad_top;
  o.pad_left = w.pad_left;
  o.pad_bottom = w.pad_bottom;
  o.pad_right = w.pad_right;
}

}  // namespace

uint32_t GraphBuilder::conv(uint32_t x, uint32_t w, rust::Slice<const uint32_t> bias, const ConvOptions& options) {
  if (bias.size() > 1) fail(ErrorCode::kInvalidArgument, "a convolution has at most one bias");
  ops::ConvOptions o;
  o.groups = options.groups;
  set_window(o, options.window);
  o.memory_proportion = options.memory_proportion;
  o.partials = options.partials;
  o.out_dtype = options.out_dtype;
  o.ipu = options.ipu;
  o.name = std::string(options.name);
  for (uint32_t id : options.scales) o.scales.push_back(tensor(id));
  Tensor tx = tensor(x), tw = tensor(w);
  Tensor tb;
  if (!bias.empty()) tb = tensor(bias[0]);
  return keep(ops::conv(graph(), tx, tw, bias.empty() ? nullptr : &tb, o));
}

void GraphBuilder::spread(uint32_t x) { graph().ensure_mapped(tensor(x).var); }

void GraphBuilder::begin_segment() { graph().begin_segment(); }

void GraphBuilder::place_like(uint32_t x, uint32_t like) {
  const VarId dst = tensor(x).var, src = tensor(like).var;
  if (graph().var(dst).mapped || dst == src) return;
  if (graph().var(dst).numel != graph().var(src).numel)
    fail(ErrorCode::kShapeMismatch, "place_like: '" + graph().var(dst).name + "' and '" + graph().var(src).name +
                                        "' differ in size");
  graph().ensure_mapped(src);
  graph().clone_mapping(dst, src);
}

void GraphBuilder::assign(uint32_t dst, uint32_t src, rust::Str name) {
  Tensor d = tensor(dst), s = tensor(src);
  ops::assign(graph(), d, s, str(name));
}

uint32_t GraphBuilder::pool(uint32_t x, const PoolOptions& options) {
  ops::PoolOptions o;
  o.mode = options.mode;
  set_window(o, options.window);
  o.out_h = options.out_h;
  o.out_w = options.out_w;
  o.ipu = options.ipu;
  o.name = std::string(options.name);
  Tensor tx = tensor(x);
  return keep(ops::pool(graph(), tx, o));
}

uint32_t GraphBuilder::gather_rows(uint32_t table, uint32_t indices, uint32_t ipu, rust::Str name) {
  Tensor tt = tensor(table), ti = tensor(indices);
  return keep(ops::gather_rows(graph(), tt, ti, ipu, str(name)));
}

std::unique_ptr<Executable> GraphBuilder::compile() {
  graph();
  std::shared_ptr<const ::neurenix::Executable> exe = ::neurenix::compile(std::move(graph_));
  tensors_.clear();
  return std::make_unique<Executable>(std::move(exe));
}

bool Executable::fits() const { return exe_->fits(); }

rust::Vec<TileOverflow> Executable::overflows() const {
  rust::Vec<TileOverflow> out;
  for (const auto& o : exe_->overflows()) {
    TileOverflow f;
    f.ipu = o.ipu;
    f.tile = o.tile;
    f.used = o.used;
    f.capacity = o.capacity;
    for (const auto& c : o.largest) f.largest.push_back(tile_tensor(c));
    out.push_back(std::move(f));
  }
  return out;
}

rust::Vec<TileMemory> Executable::tile_memory() const {
  rust::Vec<TileMemory> out;
  for (const auto& m : exe_->tile_memory()) {
    TileMemory r{m.ipu, m.tile, m.variables, m.constants, m.vertex_state, m.code, m.exchange_code, m.control_code, {}};
    for (const auto& c : m.largest) r.largest.push_back(tile_tensor(c));
    out.push_back(std::move(r));
  }
  return out;
}

rust::Vec<OpPlan> Executable::op_plans() const {
  rust::Vec<OpPlan> out;
  for (const auto& r : exe_->graph().op_plans())
    out.push_back(OpPlan{rust::String(r.name), rust::String(r.kind), r.ipu, rust::String(r.plan), r.tiles_used,
                         r.temp_bytes_per_tile, r.estimated_cycles});
  return out;
}

rust::Vec<StepCost> Executable::step_costs() const {
  rust::Vec<StepCost> out;
  for (const auto& s : exe_->step_costs()) {
    StepCost r{s.kind, rust::String(s.name), s.cycles, s.bytes, s.items, rust::String(s.node), s.tile, s.live_bytes, {}};
    for (const auto& term : s.terms) r.terms.push_back(CostTerm{rust::String(term.kind), rust::String(term.name), term.cycles});
    out.push_back(std::move(r));
  }
  return out;
}

rust::Vec<Variable> Executable::variables() const {
  rust::Vec<Variable> out;
  for (const ::neurenix::Variable& v : exe_->graph().vars()) {
    const char* kind = v.kind == VarKind::kInput      ? "input"
                       : v.kind == VarKind::kConstant ? "constant"
                       : v.kind == VarKind::kTemporary ? "temporary"
                                                       : "intermediate";
    Variable r{rust::String(v.name), rust::String(v.node), rust::String(kind), v.dtype, {},
               static_cast<uint32_t>(v.tiles.size())};
    for (uint64_t d : v.shape) r.shape.push_back(d);
    out.push_back(std::move(r));
  }
  return out;
}

rust::Vec<rust::String> Executable::warnings() const {
  rust::Vec<rust::String> out;
  for (const auto& w : exe_->graph().warnings()) out.push_back(rust::String(w));
  return out;
}

SystemInfo Executable::system() const { return system_info(exe_->graph().spec()); }
uint32_t Executable::num_ipus() const { return exe_->graph().num_ipus(); }
uint64_t Executable::cycles_per_run() const { return exe_->cycles_per_run(); }

std::unique_ptr<Engine> Executable::load(const EngineOptions& options) const {
  ::neurenix::EngineOptions o;
  o.threads = options.threads;
  o.stochastic_rounding = options.stochastic_rounding;
  o.seed = options.seed;
  o.ipu = options.ipu;
  o.fp_exceptions = options.fp_exceptions;
  o.shares_cores = options.shares_cores;
  return std::make_unique<Engine>(exe_, o);
}

void Engine::write_input(uint32_t index, rust::Slice<const uint8_t> data) {
  engine_.write_input(index, data.data(), data.size());
}
void Engine::run() { engine_.run(); }
void Engine::run_segment(uint32_t segment) { engine_.run_segment(segment); }
uint64_t Engine::constant_bytes(rust::Str name) const { return engine_.constant_bytes(std::string(name)); }
void Engine::read_constant(rust::Str name, rust::Slice<uint8_t> out) const {
  engine_.read_constant(std::string(name), out.data(), out.size());
}
void Engine::write_constant(rust::Str name, rust::Slice<const uint8_t> data) {
  engine_.write_constant(std::string(name), data.data(), data.size());
}
uint32_t Engine::num_outputs() const { return static_cast<uint32_t>(engine_.num_outputs()); }
uint64_t Engine::output_bytes(uint32_t index) const {
  if (index >= engine_.num_outputs())
    fail(ErrorCode::kInvalidArgument, "output " + std::to_string(index) + " does not exist; the program has " +
                                          std::to_string(engine_.num_outputs()));
  return engine_.output_bytes(index);
}
void Engine::read_output(uint32_t index, rust::Slice<uint8_t> out) const {
  engine_.read_output(index, out.data(), out.size());
}
RunStats Engine::last_run() const {
  const ::neurenix::RunStats& s = engine_.last_run();
  rust::Vec<double> steps;
  steps.reserve(s.step_seconds.size());
  for (double t : s.step_seconds) steps.push_back(t);
  return RunStats{s.cycles,       s.compute_cycles,  s.exchange_cycles,  s.host_cycles,
                  s.steps,        s.exchanged_bytes, s.copied_bytes,     s.host_bytes,
                  s.wall_seconds, s.compute_seconds, s.exchange_seconds, s.host_io_seconds,
                  std::move(steps)};
}

std::unique_ptr<DeviceManager> new_device_manager(rust::Str spec, rust::Str lock_dir) {
  return std::make_unique<DeviceManager>(parse_system_spec(str(spec)), str(lock_dir));
}

rust::Vec<DeviceInfo> DeviceManager::devices() const {
  rust::Vec<DeviceInfo> out;
  for (const auto& d : manager_.devices()) {
    DeviceInfo f;
    f.id = d.id;
    for (uint32_t i : d.ipus) f.ipus.push_back(i);
    out.push_back(std::move(f));
  }
  return out;
}

std::unique_ptr<Device> DeviceManager::attach(uint32_t num_ipus, rust::Slice<const uint32_t> device_id,
                                              double timeout_seconds) {
  if (device_id.size() > 1) fail(ErrorCode::kInvalidArgument, "attach takes at most one device id");
  std::optional<uint32_t> id;
  if (!device_id.empty()) id = device_id[0];
  return std::make_unique<Device>(manager_.attach(num_ipus, id, timeout_seconds));
}

rust::Vec<uint32_t> DeviceManager::last_busy_ipus() const {
  rust::Vec<uint32_t> out;
  for (uint32_t i : manager_.last_busy_ipus()) out.push_back(i);
  return out;
}

rust::Vec<int32_t> DeviceManager::last_busy_pids() const {
  rust::Vec<int32_t> out;
  for (int32_t p : manager_.last_busy_pids()) out.push_back(p);
  return out;
}

rust::Vec<uint32_t> Device::ipus() const {
  rust::Vec<uint32_t> out;
  for (uint32_t i : device_->ipus()) out.push_back(i);
  return out;
}

}  // namespace neurenix::bridge
