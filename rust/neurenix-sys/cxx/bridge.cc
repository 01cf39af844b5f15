#include "neurenix-sys/cxx/bridge.h"

#include "neurenix-sys/src/lib.rs.h"
#include "neurenix/error.h"
#include "neurenix/expr.h"
#include "neurenix/ops/conv.h"
#include "neurenix/ops/gather.h"
#include "neurenix/ops/map.h"
#include "neurenix/ops/matmul.h"
#include "neurenix/ops/pool.h"
#include "neurenix/ops/rearrange.h"
#include "neurenix/ops/reduce.h"

namespace neurenix::bridge {
namespace {

Shape to_shape(rust::Slice<const uint64_t> s) { return Shape(s.begin(), s.end()); }
std::string str(rust::Str s) { return std::string(s.data(), s.size()); }

SystemInfoFfi system_info(const SystemSpec& spec) {
  const TargetSpec& t = spec.target();
  SystemInfoFfi out;
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
  out.sync_cycles = t.sync_cycles;
  out.ipu_link_bytes_per_sec = t.ipu_link_bytes_per_sec;
  out.ipu_links = t.ipu_links;
  out.host_link_bytes_per_sec = t.host_link_bytes_per_sec;
  return out;
}

}  // namespace

SystemInfoFfi describe_system(rust::Str spec) { return system_info(parse_system_spec(str(spec))); }

rust::String expr_op_name(uint16_t code) { return rust::String(neurenix::expr_op_name(static_cast<ExprOpCode>(code))); }

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

uint32_t GraphBuilder::add_input(rust::Str name, uint8_t dtype, rust::Slice<const uint64_t> shape, uint32_t ipu) {
  Graph& g = graph();
  Tensor t = g.add_variable(str(name), device_type_from_code(dtype), to_shape(shape), VarKind::kInput, ipu);
  g.add_input_stream(str(name), t);
  return keep(t);
}

uint32_t GraphBuilder::add_constant(rust::Str name, uint8_t dtype, rust::Slice<const uint64_t> shape,
                                    rust::Slice<const uint8_t> data, uint32_t ipu) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(data.begin(), data.end());
  return keep(graph().add_constant(str(name), device_type_from_code(dtype), to_shape(shape), ipu, std::move(bytes)));
}

uint32_t GraphBuilder::matmul(uint32_t a, uint32_t b, double memory_proportion, uint8_t partials, uint8_t out_dtype,
                              uint32_t ipu, rust::Str name) {
  ops::MatMulOptions o;
  o.memory_proportion = memory_proportion;
  o.partials = device_type_from_code(partials);
  o.out_dtype = device_type_from_code(out_dtype);
  o.ipu = ipu;
  o.name = str(name);
  Tensor ta = tensor(a), tb = tensor(b);
  return keep(ops::matmul(graph(), ta, tb, o));
}

uint32_t GraphBuilder::map(rust::Slice<const ExprInstrFfi> expr, rust::Slice<const uint32_t> inputs, uint8_t out_dtype,
                           rust::Slice<const uint64_t> shape, uint32_t ipu, rust::Str name) {
  std::vector<ExprInstr> e;
  e.reserve(expr.size());
  for (const auto& i : expr) {
    if (i.op >= static_cast<uint16_t>(ExprOpCode::kCount))
      fail(ErrorCode::kInvalidArgument, "unknown element-wise operation code " + std::to_string(i.op));
    e.push_back(ExprInstr{static_cast<ExprOpCode>(i.op), i.arg, i.imm, i.imm2, i.half});
  }
  std::vector<Tensor> ins;
  for (uint32_t id : inputs) ins.push_back(tensor(id));
  return keep(ops::map(graph(), e, ins, device_type_from_code(out_dtype), to_shape(shape), ipu, str(name)));
}

uint32_t GraphBuilder::reduce(uint32_t x, rust::Slice<const uint32_t> axes, uint8_t op, uint8_t final_op, double scale,
                              uint8_t out_dtype, uint32_t ipu, rust::Str name) {
  if (op > static_cast<uint8_t>(ReduceOp::kSumAbs)) fail(ErrorCode::kInvalidArgument, "unknown reduction");
  if (final_op > static_cast<uint8_t>(ReduceFinal::kLog)) fail(ErrorCode::kInvalidArgument, "unknown reduction final step");
  std::vector<uint32_t> ax(axes.begin(), axes.end());
  Tensor t = tensor(x);
  return keep(ops::reduce(graph(), t, ax, static_cast<ReduceOp>(op), static_cast<ReduceFinal>(final_op), scale,
                          device_type_from_code(out_dtype), ipu, str(name)));
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

uint32_t GraphBuilder::fill(uint8_t dtype, rust::Slice<const uint64_t> shape, double value, uint32_t ipu, rust::Str name) {
  return keep(ops::fill(graph(), device_type_from_code(dtype), to_shape(shape), value, ipu, str(name)));
}

uint32_t GraphBuilder::copy_to_ipu(uint32_t x, uint32_t ipu, rust::Str name) {
  Tensor t = tensor(x);
  return keep(ops::copy_to_ipu(graph(), t, ipu, str(name)));
}

void GraphBuilder::mark_output(uint32_t x, rust::Str name) { graph().add_output_stream(str(name), tensor(x)); }

uint32_t GraphBuilder::conv(uint32_t x, uint32_t w, int64_t bias, rust::Slice<const uint32_t> params,
                            double memory_proportion, uint8_t partials, uint8_t out_dtype, uint32_t ipu, rust::Str name) {
  if (params.size() != 11) fail(ErrorCode::kInvalidArgument, "conv expects 11 parameters");
  ops::ConvOptions o;
  o.groups = params[0];
  o.kh = params[1];
  o.kw = params[2];
  o.sh = params[3];
  o.sw = params[4];
  o.dh = params[5];
  o.dw = params[6];
  o.pad_top = params[7];
  o.pad_left = params[8];
  o.pad_bottom = params[9];
  o.pad_right = params[10];
  o.memory_proportion = memory_proportion;
  o.partials = device_type_from_code(partials);
  o.out_dtype = device_type_from_code(out_dtype);
  o.ipu = ipu;
  o.name = str(name);
  Tensor tx = tensor(x), tw = tensor(w);
  Tensor tb;
  if (bias >= 0) tb = tensor(static_cast<uint32_t>(bias));
  return keep(ops::conv(graph(), tx, tw, bias >= 0 ? &tb : nullptr, o));
}

uint32_t GraphBuilder::pool(uint32_t x, rust::Slice<const uint32_t> params, uint32_t ipu, rust::Str name) {
  if (params.size() != 13) fail(ErrorCode::kInvalidArgument, "pool expects 13 parameters");
  if (params[0] > static_cast<uint32_t>(PoolMode::kAverageIncludePad)) fail(ErrorCode::kInvalidArgument, "unknown pool mode");
  ops::PoolOptions o;
  o.mode = static_cast<PoolMode>(params[0]);
  o.kh = params[1];
  o.kw = params[2];
  o.sh = params[3];
  o.sw = params[4];
  o.dh = params[5];
  o.dw = params[6];
  o.pad_top = params[7];
  o.pad_left = params[8];
  o.pad_bottom = params[9];
  o.pad_right = params[10];
  o.out_h = params[11];
  o.out_w = params[12];
  o.ipu = ipu;
  o.name = str(name);
  Tensor tx = tensor(x);
  return keep(ops::pool(graph(), tx, o));
}

uint32_t GraphBuilder::gather_rows(uint32_t table, uint32_t indices, uint32_t ipu, rust::Str name) {
  Tensor tt = tensor(table), ti = tensor(indices);
  return keep(ops::gather_rows(graph(), tt, ti, ipu, str(name)));
}

std::unique_ptr<CompiledGraph> GraphBuilder::compile() {
  graph();
  std::shared_ptr<const Executable> exe = neurenix::compile(std::move(graph_));
  tensors_.clear();
  return std::make_unique<CompiledGraph>(std::move(exe));
}

bool CompiledGraph::fits() const { return exe_->fits(); }

rust::Vec<TileOverflowFfi> CompiledGraph::overflows() const {
  rust::Vec<TileOverflowFfi> out;
  for (const auto& o : exe_->overflows()) {
    TileOverflowFfi f;
    f.ipu = o.ipu;
    f.tile = o.tile;
    f.used = o.used;
    f.capacity = o.capacity;
    for (const auto& c : o.largest) f.largest.push_back(ConsumerFfi{rust::String(c.name), c.bytes});
    out.push_back(std::move(f));
  }
  return out;
}

rust::Vec<TileMemoryFfi> CompiledGraph::tile_memory() const {
  rust::Vec<TileMemoryFfi> out;
  for (const auto& m : exe_->tile_memory())
    out.push_back(TileMemoryFfi{m.global_tile, m.variables, m.vertex_state, m.code, m.exchange_code, m.control_code});
  return out;
}

rust::Vec<OpRecordFfi> CompiledGraph::op_records() const {
  rust::Vec<OpRecordFfi> out;
  for (const auto& r : exe_->graph().op_plans())
    out.push_back(OpRecordFfi{rust::String(r.name), rust::String(r.kind), r.ipu, rust::String(r.plan), r.tiles_used,
                              r.temp_bytes_per_tile, r.estimated_cycles});
  return out;
}

rust::Vec<StepCostFfi> CompiledGraph::step_costs() const {
  rust::Vec<StepCostFfi> out;
  for (const auto& s : exe_->step_costs())
    out.push_back(StepCostFfi{static_cast<uint8_t>(s.kind), rust::String(s.name), s.cycles, s.bytes, s.items});
  return out;
}

rust::Vec<rust::String> CompiledGraph::warnings() const {
  rust::Vec<rust::String> out;
  for (const auto& w : exe_->graph().warnings()) out.push_back(rust::String(w));
  return out;
}

SystemInfoFfi CompiledGraph::system() const { return system_info(exe_->graph().spec()); }
uint32_t CompiledGraph::num_ipus_used() const { return exe_->graph().num_ipus(); }
uint64_t CompiledGraph::cycles_per_run() const { return exe_->cycles_per_run(); }

std::unique_ptr<EngineHandle> load_engine(const CompiledGraph& graph, uint32_t threads) {
  return std::make_unique<EngineHandle>(graph.executable(), threads);
}

void EngineHandle::write_input(uint32_t index, rust::Slice<const uint8_t> data) {
  engine_.write_input(index, data.data(), data.size());
}
void EngineHandle::run() { engine_.run(); }
void EngineHandle::read_output(uint32_t index, rust::Slice<uint8_t> out) const {
  engine_.read_output(index, out.data(), out.size());
}
uint64_t EngineHandle::output_bytes(uint32_t index) const {
  if (index >= engine_.num_outputs()) return UINT64_MAX;
  return engine_.output_bytes(index);
}
RunStatsFfi EngineHandle::last_run() const {
  const RunStats& s = engine_.last_run();
  return RunStatsFfi{s.cycles,          s.compute_cycles, s.exchange_cycles,  s.host_cycles,
                     s.steps,           s.exchanged_bytes, s.host_bytes,      s.wall_seconds,
                     s.compute_seconds, s.exchange_seconds, s.host_io_seconds};
}

std::unique_ptr<DeviceManagerHandle> new_device_manager(rust::Str spec, rust::Str lock_dir) {
  return std::make_unique<DeviceManagerHandle>(parse_system_spec(str(spec)), str(lock_dir));
}

rust::Vec<DeviceInfoFfi> DeviceManagerHandle::devices() const {
  rust::Vec<DeviceInfoFfi> out;
  for (const auto& d : manager_.devices()) {
    DeviceInfoFfi f;
    f.id = d.id;
    for (uint32_t i : d.ipus) f.ipus.push_back(i);
    out.push_back(std::move(f));
  }
  return out;
}

std::unique_ptr<DeviceHandle> DeviceManagerHandle::attach(uint32_t num_ipus, int64_t device_id, double timeout_seconds) {
  return std::make_unique<DeviceHandle>(manager_.attach(num_ipus, device_id, timeout_seconds));
}

rust::Vec<uint32_t> DeviceManagerHandle::last_busy_ipus() const {
  rust::Vec<uint32_t> out;
  for (uint32_t i : manager_.last_busy_ipus()) out.push_back(i);
  return out;
}

rust::Vec<int32_t> DeviceManagerHandle::last_busy_pids() const {
  rust::Vec<int32_t> out;
  for (int32_t p : manager_.last_busy_pids()) out.push_back(p);
  return out;
}

rust::Vec<uint32_t> DeviceHandle::ipus() const {
  rust::Vec<uint32_t> out;
  for (uint32_t i : device_->ipus()) out.push_back(i);
  return out;
}

}  // namespace neurenix::bridge
