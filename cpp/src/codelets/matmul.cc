// Matrix-product vertices.
//
// Arithmetic follows the accumulating matrix product (AMP) unit: products of
// the input type are exact in float; with float partials the block is summed
// in float; with half partials the products are summed in chunks of
// `kHalfPartialsDepth`, each chunk rounded to half and accumulated in half.
#include <algorithm>
#include <cstring>

#include "neurenix/codelets.h"
#include "neurenix/error.h"

namespace neurenix {
namespace {

constexpr uint32_t kHalfPartialsDepth = 16;

// Widens a row-major block (rows x cols, leading dimension ld) to packed floats.
void load_block(const uint8_t* p, DType dtype, uint32_t rows, uint32_t cols, uint32_t ld, float* dst) {
  for (uint32_t r = 0; r < rows; ++r) {
    if (dtype == DType::kFloat32) {
      std::memcpy(dst + static_cast<size_t>(r) * cols, p + static_cast<size_t>(r) * ld * 4, cols * 4);
    } else {
      half_to_float_n(reinterpret_cast<const half_bits*>(p) + static_cast<size_t>(r) * ld, dst + static_cast<size_t>(r) * cols,
                      cols);
    }
  }
}

void store_block(const float* src, uint32_t rows, uint32_t cols, uint8_t* p, DType dtype, uint32_t ld) {
  for (uint32_t r = 0; r < rows; ++r) {
    if (dtype == DType::kFloat32) {
      std::memcpy(p + static_cast<size_t>(r) * ld * 4, src + static_cast<size_t>(r) * cols, cols * 4);
    } else {
      float_to_half_n(src + static_cast<size_t>(r) * cols, reinterpret_cast<half_bits*>(p) + static_cast<size_t>(r) * ld, cols);
    }
  }
}

void round_to_half_n(float* x, size_t n) {
  thread_local std::vector<half_bits> tmp;
  if (tmp.size() < n) tmp.resize(n);
  float_to_half_n(x, tmp.data(), n);
  half_to_float_n(tmp.data(), x, n);
}

}  // namespace

MatMulVertex::MatMulVertex(uint32_t tile_, Field a, Field b, Field c, MatMulBlock shape, DType in_dtype,
                           DType partials_dtype, DType out_dtype)
    : a_(a), b_(b), c_(c), s_(shape), in_(in_dtype), partials_(partials_dtype), out_(out_dtype) {
  tile = tile_;
  a_.access = Access::kRead;
  b_.access = Access::kRead;
  c_.access = Access::kWrite;
  NX_CHECK(is_float(in_) && is_float(partials_) && is_float(out_), "matmul vertex on non-float data");
  NX_CHECK(!(partials_ == DType::kFloat16 && in_ == DType::kFloat32), "half partials need half inputs");
  auto extent = [](uint32_t rows, uint32_t cols, uint32_t ld) -> uint64_t {
    return rows == 0 || cols == 0 ? 0 : static_cast<uint64_t>(rows - 1) * ld + cols;
  };
  NX_CHECK(extent(s_.m, s_.k, s_.lda) <= a_.count, "matmul A block exceeds its field");
  NX_CHECK(extent(s_.k, s_.n, s_.ldb) <= b_.count, "matmul B block exceeds its field");
  NX_CHECK(extent(s_.m, s_.n, s_.ldc) <= c_.count, "matmul C block exceeds its field");
}

void MatMulVertex::list_fields(std::vector<Field*>& out) {
  out.push_back(&a_);
  out.push_back(&b_);
  out.push_back(&c_);
}

uint64_t MatMulVertex::cycles(const TargetSpec& t) const {
  const bool half = in_ == DType::kFloat16;
  const uint32_t rate = half ? t.fp16_flops_per_cycle : t.fp32_flops_per_cycle;
  const uint32_t depth = half ? 16 : 8;  // AMP input-channel grouping
  const uint64_t k_eff = (static_cast<uint64_t>(s_.k) + depth - 1) / depth * depth;
  const uint64_t flops = 2ull * s_.m * s_.n * k_eff;
  // Half partials halve the accumulator traffic, which the AMP turns into
  // throughput on Mk2 for small blocks; modelled as a 10% saving.
  uint64_t compute = flops / rate;
  if (partials_ == DType::kFloat16) compute = compute * 9 / 10;
  const uint64_t per_row = 8ull * s_.m;  // row set-up on the workers
  return t.vertex_overhead_cycles + compute + per_row;
}

void MatMulVertex::compute(uint8_t* mem) const {
  const uint32_t m = s_.m, n = s_.n, k = s_.k;
  if (m == 0 || n == 0) return;
  if (in_ == DType::kFloat32 && out_ == DType::kFloat32) {
    // Float data is multiplied where it lies, straight into the result.
    gemm_f32(reinterpret_cast<const float*>(mem + a_.byte_offset), reinterpret_cast<const float*>(mem + b_.byte_offset),
             reinterpret_cast<float*>(mem + c_.byte_offset), m, n, k, s_.lda, s_.ldb, s_.ldc, false);
    return;
  }
  thread_local std::vector<float> abuf, bbuf, cbuf, tbuf;
  abuf.resize(static_cast<size_t>(m) * k);
  bbuf.resize(static_cast<size_t>(k) * n);
  cbuf.resize(static_cast<size_t>(m) * n);
  load_block(mem + a_.byte_offset, in_, m, k, s_.lda, abuf.data());
  load_block(mem + b_.byte_offset, in_, k, n, s_.ldb, bbuf.data());
  if (partials_ == DType::kFloat32) {
    gemm_f32(abuf.data(), bbuf.data(), cbuf.data(), m, n, k, k, n, n, false);
  } else {
    std::fill(cbuf.begin(), cbuf.end(), 0.0f);
    tbuf.resize(static_cast<size_t>(m) * n);
    for (uint32_t k0 = 0; k0 < k; k0 += kHalfPartialsDepth) {
      const uint32_t kc = std::min(kHalfPartialsDepth, k - k0);
      gemm_f32(abuf.data() + k0, bbuf.data() + static_cast<size_t>(k0) * n, tbuf.data(), m, n, kc, k, n, n, false);
      round_to_half_n(tbuf.data(), tbuf.size());
      for (size_t i = 0; i < cbuf.size(); ++i) cbuf[i] += tbuf[i];
      round_to_half_n(cbuf.data(), cbuf.size());
    }
  }
  store_block(cbuf.data(), m, n, mem + c_.byte_offset, out_, s_.ldc);
}

SumPartialsVertex::SumPartialsVertex(uint32_t tile_, Field in, Field out, uint32_t parts, uint32_t rows, uint32_t cols,
                                     uint32_t ld_out, DType partials_dtype, DType out_dtype)
    : in_(in), out_(out), parts_(parts), rows_(rows), cols_(cols), ld_out_(ld_out), partials_(partials_dtype),
      out_dtype_(out_dtype) {
  tile = tile_;
  in_.access = Access::kRead;
  out_.access = Access::kWrite;
  NX_CHECK(in_.count == static_cast<uint64_t>(parts) * rows * cols, "partials field size mismatch");
  NX_CHECK(rows == 0 || static_cast<uint64_t>(rows - 1) * ld_out + cols <= out_.count, "partials output exceeds its field");
}

void SumPartialsVertex::set_bias(Field bias, DType dtype) {
  NX_CHECK(bias.count >= rows_, "partials bias shorter than its rows");
  bias_ = bias;
  bias_.access = Access::kRead;
  bias_dtype_ = dtype;
  has_bias_ = true;
}

void SumPartialsVertex::list_fields(std::vector<Field*>& out) {
  out.push_back(&in_);
  out.push_back(&out_);
  if (has_bias_) out.push_back(&bias_);
}

uint64_t SumPartialsVertex::cycles(const TargetSpec& t) const {
  const double per = partials_ == DType::kFloat16 ? 0.25 : 0.5;
  return t.vertex_overhead_cycles + static_cast<uint64_t>(per * static_cast<double>(in_.count)) +
         in_.count * dtype_size(partials_) / t.local_read_bytes_per_cycle + 4ull * rows_;
}

void SumPartialsVertex::compute(uint8_t* mem) const {
  const uint64_t n = static_cast<uint64_t>(rows_) * cols_;
  thread_local std::vector<float> acc, part;
  acc.assign(n, 0.0f);
  part.resize(n);
  const uint8_t* in = mem + in_.byte_offset;
  for (uint32_t p = 0; p < parts_; ++p) {
    if (partials_ == DType::kFloat32) {
      std::memcpy(part.data(), in + p * n * 4, n * 4);
    } else {
      half_to_float_n(reinterpret_cast<const half_bits*>(in) + p * n, part.data(), n);
    }
    for (uint64_t i = 0; i < n; ++i) acc[i] += part[i];
    if (partials_ == DType::kFloat16) round_to_half_n(acc.data(), n);
  }
  if (has_bias_) {
    for (uint32_t r = 0; r < rows_; ++r) {
      const float bv = static_cast<float>(load_element(mem + bias_.byte_offset, bias_dtype_, r));
      for (uint32_t c = 0; c < cols_; ++c) acc[static_cast<size_t>(r) * cols_ + c] += bv;
    }
    if (partials_ == DType::kFloat16 || out_dtype_ == DType::kFloat16) round_to_half_n(acc.data(), n);
  }
  store_block(acc.data(), rows_, cols_, mem + out_.byte_offset, out_dtype_, ld_out_);
}

}  // namespace neurenix
