// The accumulating matrix product (AMP) unit's half partials, shared by the
// matrix-product and convolution vertices (internal header).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "neurenix/device_type.h"
#include "neurenix/graph.h"
#include "neurenix/half.h"

namespace neurenix {

// The product's scale: the float8 operands' two float32 scales multiplied,
// or 1 for operands without scales.
inline float operand_scale(const uint8_t* mem, const Float8Scales* scales) {
  if (!scales) return 1.0f;
  return static_cast<float>(load_element(mem + scales->a.address, DeviceType::kFloat32, 0)) *
         static_cast<float>(load_element(mem + scales->b.address, DeviceType::kFloat32, 0));
}

// acc = the half-partials sum over K: `product(k0, kc, out)` writes the exact
// float product of the K range [k0, k0 + kc) into out (acc.size() floats);
// K is taken in chunks of `depth` (amp_depth: 16 for half operands, 32 for
// float8), each chunk's sum is multiplied by `scale` (the operands' float8
// scales; 1 otherwise), rounded to half and accumulated in half.
template <typename Product>
void sum_in_half_partials(std::vector<float>& acc, std::vector<float>& tmp, uint32_t k, uint32_t depth, float scale,
                          Product&& product) {
  std::fill(acc.begin(), acc.end(), 0.0f);
  tmp.resize(acc.size());
  for (uint32_t k0 = 0; k0 < k; k0 += depth) {
    const uint32_t kc = std::min(depth, k - k0);
    product(k0, kc, tmp.data());
    add_rounded_to_half(acc.data(), tmp.data(), acc.size(), scale);
  }
}

}  // namespace neurenix
