// Element-wise vertices: an expression (expr.h) over operand fields, and fills.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "neurenix/expr.h"
#include "neurenix/graph.h"

namespace neurenix {

class MapVertex : public Vertex {
 public:
  // One operand: a field of `count` elements, or a single element broadcast
  // (`scalar`), or a repeated operand: when `runs` is not empty, the field
  // holds one element per run and run i covers the next runs[i] elements of
  // the output (a broadcast operand kept compact: a channel's scale over
  // the channel's plane).
  struct Operand {
    FieldRef field;
    DeviceType dtype;
    bool scalar;
    RareList<uint32_t> runs{};
  };
  MapVertex(uint32_t tile, std::shared_ptr<const std::vector<ExprInstr>> expr, std::vector<Operand> operands,
            Field out, DeviceType out_dtype);
  const char* name() const override { return "Map"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 512; }
  uint64_t state_bytes() const override;
  bool uses_random() const override;
  // The register path's limits: operands, stack depth, elements a vertex.
  static constexpr size_t kRegisterOperands = 8, kRegisterDepth = 8;
  static constexpr uint64_t kRegisterElements = 128;

 protected:
  void list_fields(std::vector<Field*>& out) override;
  void list_refs(std::vector<const FieldRef*>& out) const override;

 private:
  std::shared_ptr<const std::vector<ExprInstr>> expr_;
  std::vector<Operand> operands_;
  bool has_runs_ = false;  // some operand is repeated
  // The expression can run sixteen elements at a time in registers
  // (compute(): float32 or float16 operands and constants, + - x /, exp and
  // erf, half roundings).
  bool in_registers_ = false;
  // Some operand, instruction or the output is half (rounds to binary16).
  bool rounds_half_ = false;
  // ... and calls exp or erf: it runs an instruction at a time over the
  // whole vertex instead.
  bool calls_function_ = false;
  bool registers_fit() const;
  FieldRef out_;
  DeviceType out_dtype_;
};

// Fills a field with one value.
class FillVertex : public Vertex {
 public:
  FillVertex(uint32_t tile, Field out, DeviceType dtype, double value);
  const char* name() const override { return "Fill"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 64; }

 protected:
  void list_fields(std::vector<Field*>& out) override { out.push_back(&out_.field()); }
  void list_refs(std::vector<const FieldRef*>& out) const override { out.push_back(&out_); }

 private:
  FieldRef out_;
  DeviceType dtype_;
  double value_;
};

}  // namespace neurenix
