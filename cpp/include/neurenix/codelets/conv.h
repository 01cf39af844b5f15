// Convolution: one tile's block of a 2-D convolution (one group, one image
// segment): out[co][r][wo] for `rows` output rows starting at `ho0`, from an
// input window holding rows [hi0, hi0 + in_rows) of `cin` channels (each row
// `in_w` wide; rows outside the window are padding) and weights
// [cout][cin][kh][kw] (leading dimension `ldw` between output channels).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "neurenix/graph.h"

namespace neurenix {

struct ConvWindow {
  uint32_t cin = 0, cout = 0;
  uint32_t in_w = 0, in_h = 0;      // full input width and height
  int32_t hi0 = 0;                  // first input row held
  uint32_t in_rows = 0;             // input rows held
  uint32_t ho0 = 0, rows = 0, out_w = 0;
  uint32_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int32_t pad_top = 0, pad_left = 0;
  uint32_t ldw = 0;                 // between output channels in the weight field
  uint32_t ld_out = 0;              // between output channels in the output field
};

class ConvVertex : public Vertex {
 public:
  ConvVertex(uint32_t tile, Field in, Field weights, Field out, ConvWindow shape, DeviceType in_dtype, DeviceType partials_dtype,
             DeviceType out_dtype);
  void set_bias(Field bias, DeviceType dtype);
  // The scale fields of float8 operands (required for them): float32
  // scalars, the input's and the weights' power-of-two scales.
  void set_scales(Field a, Field b);
  const char* name() const override { return "Conv"; }
  void compute(uint8_t* mem) const override;
  uint64_t cycles(const TargetSpec& t) const override;
  uint64_t code_bytes() const override { return 2048; }

 protected:
  void list_fields(std::vector<Field*>& out) override;
  void list_refs(std::vector<const FieldRef*>& out) const override;
  void derive() override;

 private:
  // A 1x1, stride-1, unpadded window whose rows are the output's: it is its
  // own (only) phase plane.
  bool window_is_plane() const;
  // Such a window in float32 (partials in float): the product reads it in
  // place, in tile memory.
  bool reads_in_place() const;
  // Such a window in float16 under half partials: the half-rows product
  // reads its channel rows where they lie (not under stochastic rounding,
  // which gathers and widens it first).
  bool reads_half_rows() const;
  // Channels [first, first + count) of a window read in place (float32 or
  // half rows) in pieces lie `stride` bytes apart from `address` (as a
  // field's): its channel runs. derive() finds them; none where a channel
  // straddles two pieces (the window is then gathered).
  struct ChannelRun {
    uint32_t first, count;
    int64_t address, stride;
  };
  FieldRef in_, w_, out_;
  RareList<ChannelRun> channels_;
  ConvWindow s_;
  DeviceType in_dtype_, partials_, out_dtype_;
  std::unique_ptr<BiasField> bias_;       // if it has one
  std::unique_ptr<Float8Scales> scales_;  // float8 operands only
};

}  // namespace neurenix
