// cxx glue: thin adaptors from the C++ core's types to the bridge's.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "neurenix/compiler.h"
#include "neurenix/device.h"
#include "neurenix/engine.h"
#include "neurenix/graph.h"
#include "rust/cxx.h"

namespace neurenix::bridge {

struct ExprInstrFfi;
struct TileOverflowFfi;
struct TileMemoryFfi;
struct OpRecordFfi;
struct StepCostFfi;
struct RunStatsFfi;
struct SystemInfoFfi;
struct DeviceInfoFfi;

class CompiledGraph;

class GraphBuilder {
 public:
  GraphBuilder(SystemSpec spec, uint32_t num_ipus);
  uint32_t add_input(rust::Str name, uint8_t dtype, rust::Slice<const uint64_t> shape, uint32_t ipu);
  uint32_t add_constant(rust::Str name, uint8_t dtype, rust::Slice<const uint64_t> shape, rust::Slice<const uint8_t> data,
                        uint32_t ipu);
  uint32_t matmul(uint32_t a, uint32_t b, double memory_proportion, uint8_t partials, uint8_t out_dtype, uint32_t ipu,
                  rust::Str name);
  uint32_t map(rust::Slice<const ExprInstrFfi> expr, rust::Slice<const uint32_t> inputs, uint8_t out_dtype,
               rust::Slice<const uint64_t> shape, uint32_t ipu, rust::Str name);
  uint32_t reduce(uint32_t x, rust::Slice<const uint32_t> axes, uint8_t op, uint8_t final_op, double scale, uint8_t out_dtype,
                  uint32_t ipu, rust::Str name);
  uint32_t reshape(uint32_t x, rust::Slice<const uint64_t> shape);
  uint32_t rearrange(uint32_t x, int64_t offset, rust::Slice<const uint64_t> shape, rust::Slice<const int64_t> strides,
                     uint32_t ipu, rust::Str name);
  uint32_t concat(rust::Slice<const uint32_t> xs, uint32_t axis, uint32_t ipu, rust::Str name);
  uint32_t fill(uint8_t dtype, rust::Slice<const uint64_t> shape, double value, uint32_t ipu, rust::Str name);
  uint32_t copy_to_ipu(uint32_t x, uint32_t ipu, rust::Str name);
  void mark_output(uint32_t x, rust::Str name);
  uint32_t conv(uint32_t x, uint32_t w, int64_t bias, rust::Slice<const uint32_t> params, double memory_proportion,
                uint8_t partials, uint8_t out_dtype, uint32_t ipu, rust::Str name);
  uint32_t pool(uint32_t x, rust::Slice<const uint32_t> params, uint32_t ipu, rust::Str name);
  uint32_t gather_rows(uint32_t table, uint32_t indices, uint32_t ipu, rust::Str name);
  std::unique_ptr<CompiledGraph> compile();

 private:
  Graph& graph();
  const Tensor& tensor(uint32_t id) const;
  uint32_t keep(const Tensor& t);
  std::unique_ptr<Graph> graph_;
  std::vector<Tensor> tensors_;
};

class CompiledGraph {
 public:
  explicit CompiledGraph(std::shared_ptr<const Executable> exe) : exe_(std::move(exe)) {}
  bool fits() const;
  rust::Vec<TileOverflowFfi> overflows() const;
  rust::Vec<TileMemoryFfi> tile_memory() const;
  rust::Vec<OpRecordFfi> op_records() const;
  rust::Vec<StepCostFfi> step_costs() const;
  rust::Vec<rust::String> warnings() const;
  SystemInfoFfi system() const;
  uint32_t num_ipus_used() const;
  uint64_t cycles_per_run() const;
  const std::shared_ptr<const Executable>& executable() const { return exe_; }

 private:
  std::shared_ptr<const Executable> exe_;
};

class EngineHandle {
 public:
  EngineHandle(std::shared_ptr<const Executable> exe, unsigned threads) : engine_(std::move(exe), threads) {}
  void write_input(uint32_t index, rust::Slice<const uint8_t> data);
  void run();
  void read_output(uint32_t index, rust::Slice<uint8_t> out) const;
  uint64_t output_bytes(uint32_t index) const;
  RunStatsFfi last_run() const;
  uint64_t arena_bytes() const { return engine_.arena_bytes(); }

 private:
  Engine engine_;
};

class DeviceHandle {
 public:
  explicit DeviceHandle(std::unique_ptr<Device> d) : device_(std::move(d)) {}
  uint32_t id() const { return device_->id(); }
  rust::Vec<uint32_t> ipus() const;
  bool attached() const { return device_->attached(); }
  void detach() { device_->detach(); }

 private:
  std::unique_ptr<Device> device_;
};

class DeviceManagerHandle {
 public:
  DeviceManagerHandle(SystemSpec spec, std::string lock_dir) : manager_(std::move(spec), std::move(lock_dir)) {}
  rust::Vec<DeviceInfoFfi> devices() const;
  int32_t holder_pid(uint32_t ipu) const { return manager_.holder_pid(ipu); }
  rust::String lock_dir() const { return rust::String(manager_.lock_dir()); }
  std::unique_ptr<DeviceHandle> attach(uint32_t num_ipus, int64_t device_id, double timeout_seconds);
  rust::Vec<uint32_t> last_busy_ipus() const;
  rust::Vec<int32_t> last_busy_pids() const;

 private:
  DeviceManager manager_;
};

SystemInfoFfi describe_system(rust::Str spec);
rust::String expr_op_name(uint16_t code);
std::unique_ptr<GraphBuilder> new_graph(rust::Str spec, uint32_t num_ipus);
std::unique_ptr<EngineHandle> load_engine(const CompiledGraph& graph, uint32_t threads);
std::unique_ptr<DeviceManagerHandle> new_device_manager(rust::Str spec, rust::Str lock_dir);

}  // namespace neurenix::bridge
