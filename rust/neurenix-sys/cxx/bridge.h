// The cxx bridge's C++ side: thin adaptors from the C++ core's types to the
// bridge's (rust/neurenix-sys/src/bridge.rs), and how C++ exceptions cross.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <vector>

#include "neurenix/codelets/pool.h"
#include "neurenix/codelets/reduce.h"
#include "neurenix/compiler.h"
#include "neurenix/device.h"
#include "neurenix/device_type.h"
#include "neurenix/engine.h"
#include "neurenix/error.h"
#include "neurenix/expr.h"
#include "neurenix/graph.h"
#include "rust/cxx.h"

namespace neurenix::bridge {

// The code of the last exception the bridge turned into a Rust `Err` on
// this thread; the Rust side reads it right after the failing call.
ErrorCode last_error_code();
void set_last_error_code(ErrorCode code);

}  // namespace neurenix::bridge

// Every fallible bridged call runs in here: the core's errors cross with
// their code (kept aside for `last_error_code`) and their message; anything
// else thrown, even a non-std exception, is an internal error. Nothing
// reaches `std::terminate`.
namespace rust::behavior {

template <typename Try, typename Fail>
static void trycatch(Try&& func, Fail&& fail) noexcept try {
  func();
} catch (const neurenix::Error& e) {
  neurenix::bridge::set_last_error_code(e.code());
  fail(e.message().c_str());
} catch (const std::bad_alloc&) {
  neurenix::bridge::set_last_error_code(neurenix::ErrorCode::kInternal);
  fail("the host ran out of memory");
} catch (const std::exception& e) {
  neurenix::bridge::set_last_error_code(neurenix::ErrorCode::kInternal);
  fail(e.what());
} catch (...) {
  neurenix::bridge::set_last_error_code(neurenix::ErrorCode::kInternal);
  fail("an unknown C++ exception");
}

}  // namespace rust::behavior

namespace neurenix::bridge {

struct ExprInstr;
struct Window;
struct MatMulOptions;
struct ConvOptions;
struct PoolOptions;
struct TileOverflow;
struct TileMemory;
struct OpPlan;
struct StepCost;
struct RunStats;
struct EngineOptions;
struct Variable;
struct SystemInfo;
struct DeviceInfo;

class Executable;
class Engine;

SystemInfo describe_system(rust::Str spec);
rust::String expr_op_name(ExprOpCode op);

class GraphBuilder {
 public:
  GraphBuilder(SystemSpec spec, uint32_t num_ipus);
  uint32_t add_input(rust::Str name, DeviceType dtype, rust::Slice<const uint64_t> shape, uint32_t ipu);
  // Keeps `data` (the Rust vector the constant was encoded into) alive in
  // the graph: its bytes are not copied.
  uint32_t add_constant(rust::Str name, DeviceType dtype, rust::Slice<const uint64_t> shape, rust::Vec<uint8_t> data,
                        uint32_t ipu);
  uint32_t matmul(uint32_t a, uint32_t b, const MatMulOptions& options);
  uint32_t map(rust::Slice<const ExprInstr> expr, rust::Slice<const uint32_t> inputs, DeviceType out_dtype,
               rust::Slice<const uint64_t> shape, uint32_t ipu, rust::Str name);
  uint32_t reduce(uint32_t x, rust::Slice<const uint32_t> axes, ReduceOp op, ReduceFinal final_op, double scale,
                  DeviceType out_dtype, uint32_t ipu, rust::Str name);
  uint32_t reshape(uint32_t x, rust::Slice<const uint64_t> shape);
  uint32_t rearrange(uint32_t x, int64_t offset, rust::Slice<const uint64_t> shape, rust::Slice<const int64_t> strides,
                     uint32_t ipu, rust::Str name);
  uint32_t concat(rust::Slice<const uint32_t> xs, uint32_t axis, uint32_t ipu, rust::Str name);
  uint32_t fill(DeviceType dtype, rust::Slice<const uint64_t> shape, double value, uint32_t ipu, rust::Str name);
  void mark_output(uint32_t x, rust::Str name);
  void begin_node(rust::Str node);
  uint32_t conv(uint32_t x, uint32_t w, rust::Slice<const uint32_t> bias, const ConvOptions& options);
  uint32_t pool(uint32_t x, const PoolOptions& options);
  uint32_t gather_rows(uint32_t table, uint32_t indices, uint32_t ipu, rust::Str name);
  void assign(uint32_t dst, uint32_t src, rust::Str name);
  void spread(uint32_t x);
  void place_like(uint32_t x, uint32_t like);
  void begin_segment();
  std::unique_ptr<Executable> compile();

 private:
  Graph& graph();
  const Tensor& tensor(uint32_t id) const;
  uint32_t keep(const Tensor& t);
  std::unique_ptr<Graph> graph_;
  std::vector<Tensor> tensors_;
};

std::unique_ptr<GraphBuilder> new_graph(rust::Str spec, uint32_t num_ipus);

class Executable {
 public:
  explicit Executable(std::shared_ptr<const ::neurenix::Executable> exe) : exe_(std::move(exe)) {}
  bool fits() const;
  rust::Vec<TileOverflow> overflows() const;
  rust::Vec<TileMemory> tile_memory() const;
  rust::Vec<OpPlan> op_plans() const;
  rust::Vec<StepCost> step_costs() const;
  rust::Vec<Variable> variables() const;
  rust::Vec<rust::String> warnings() const;
  SystemInfo system() const;
  uint32_t num_ipus() const;
  uint64_t cycles_per_run() const;
  std::unique_ptr<Engine> load(const EngineOptions& options) const;

 private:
  std::shared_ptr<const ::neurenix::Executable> exe_;
};

class Engine {
 public:
  Engine(std::shared_ptr<const ::neurenix::Executable> exe, const ::neurenix::EngineOptions& options)
      : engine_(std::move(exe), options) {}
  void write_input(uint32_t index, rust::Slice<const uint8_t> data);
  void run();
  void run_segment(uint32_t segment);
  uint32_t num_outputs() const;
  uint64_t output_bytes(uint32_t index) const;
  void read_output(uint32_t index, rust::Slice<uint8_t> out) const;
  uint64_t constant_bytes(rust::Str name) const;
  void read_constant(rust::Str name, rust::Slice<uint8_t> out) const;
  void write_constant(rust::Str name, rust::Slice<const uint8_t> data);
  RunStats last_run() const;
  uint64_t arena_bytes() const { return engine_.arena_bytes(); }
  uint64_t shadow_block_bytes() const { return engine_.shadow_block_bytes(); }
  bool checked() const { return engine_.checked(); }

 private:
  ::neurenix::Engine engine_;
};

class Device {
 public:
  explicit Device(std::unique_ptr<::neurenix::Device> d) : device_(std::move(d)) {}
  uint32_t id() const { return device_->id(); }
  rust::Vec<uint32_t> ipus() const;
  bool attached() const { return device_->attached(); }
  void detach() { device_->detach(); }

 private:
  std::unique_ptr<::neurenix::Device> device_;
};

class DeviceManager {
 public:
  DeviceManager(SystemSpec spec, std::string lock_dir) : manager_(std::move(spec), std::move(lock_dir)) {}
  rust::Vec<DeviceInfo> devices() const;
  int32_t holder_pid(uint32_t ipu) const { return manager_.holder_pid(ipu); }
  rust::String lock_dir() const { return rust::String(manager_.lock_dir()); }
  std::unique_ptr<Device> attach(uint32_t num_ipus, rust::Slice<const uint32_t> device_id, double timeout_seconds);
  rust::Vec<uint32_t> last_busy_ipus() const;
  rust::Vec<int32_t> last_busy_pids() const;

 private:
  ::neurenix::DeviceManager manager_;
};

std::unique_ptr<DeviceManager> new_device_manager(rust::Str spec, rust::Str lock_dir);

}  // namespace neurenix::bridge
