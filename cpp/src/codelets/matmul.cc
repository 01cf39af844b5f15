// Matrix-product vertices.
//
// Arithmetic follows the accumulating matrix product (AMP) unit: products of
// the input type are exact in float; with float partials the block is summed
// in float; with half partials the products are summed in chunks of
// `kHalfPartialsDepth` (amp.h), each chunk rounded to half and accumulated in
// half. Float8 operands (the IPU21's) have half partials, in chunks of 32,
// each chunk's float sum multiplied by the operands' scale before rounding.
#include "neurenix/codelets/matmul.h"

#include <algorithm>
#include <cstring>

#include "neurenix/codelets/gemm.h"
#include "neurenix/error.h"
#include "neurenix/half.h"
#include "neurenix/stochastic_rounding.h"
#include "amp.h"
#include "scratch.h"

namespace neurenix {
namespace {

// Widens a row-major block (rows x cols, leading dimension ld) to packed floats.
void load_block(const uint8_t* p, DeviceType dtype, uint32_t rows, uint32_t cols, uint32_t ld, float* dst) {
  const size_t es = device_type_size(dtype);
  if (ld == cols) {  // contiguous rows: one conversion
    load_floats(p, dtype, dst, static_cast<size_t>(rows) * cols);
    return;
  }
  for (uint32_t r = 0; r < rows; ++r)
    load_floats(p + static_cast<size_t>(r) * ld * es, dtype, dst + static_cast<size_t>(r) * cols, cols);
}

void store_block(const float* src, uint32_t rows, uint32_t cols, uint8_t* p, DeviceType dtype, uint32_t ld) {
  const size_t es = device_type_size(dtype);
  if (ld == cols) {  // contiguous rows: one conversion
    store_floats(src, dtype, p, static_cast<size_t>(rows) * cols);
    return;
  }
  for (uint32_t r = 0; r < rows; ++r)
    store_floats(src + static_cast<size_t>(r) * cols, dtype, p + static_cast<size_t>(r) * ld * es, cols);
}

// A host thread's scratch for the product and partial-sum vertices
// (thread_scratch).
struct ProductScratch {
  std::vector<float> abuf, bbuf, cbuf, tbuf, acc, part;
  std::vector<const float*> rows;
  std::vector<const half_bits*> half_rows;
  std::vector<half_bits> hacc;
};

}  // namespace

MatMulVertex::MatMulVertex(uint32_t tile_, Field a, Field b, Field c, MatMulBlock shape, DeviceType in_dtype,
                           DeviceType partials_dtype, DeviceType out_dtype)
    : a_(a), b_(b), c_(c), s_(shape), in_(in_dtype), partials_(partials_dtype), out_(out_dtype) {
  tile = tile_;
  a_.field().access = Access::kRead;
  b_.field().access = Access::kRead;
  c_.field().access = Access::kWrite;
  NX_CHECK((is_float(in_) || is_float8(in_)) && is_float(partials_) && is_float(out_), "matmul vertex on non-float data");
  NX_CHECK(!(partials_ == DeviceType::kFloat16 && in_ == DeviceType::kFloat32), "half partials need half inputs");
  NX_CHECK(!is_float8(in_) || partials_ == DeviceType::kFloat16, "float8 operands need half partials");
  auto extent = [](uint32_t rows, uint32_t cols, uint32_t ld) -> uint64_t {
    return rows == 0 || cols == 0 ? 0 : static_cast<uint64_t>(rows - 1) * ld + cols;
  };
  NX_CHECK(extent(s_.m, s_.k, s_.lda) <= a_.count, "matmul A block exceeds its field");
  NX_CHECK(extent(s_.k, s_.n, s_.ldb) <= b_.count, "matmul B block exceeds its field");
  NX_CHECK(extent(s_.m, s_.n, s_.ldc) <= c_.count, "matmul C block exceeds its field");
}

void MatMulVertex::set_scales(Field a, Field b) {
  NX_CHECK(a.count >= 1 && b.count >= 1, "matmul scale field is empty");
  scales_ = std::make_unique<Float8Scales>(Float8Scales{a, b});
  scales_->a.access = Access::kRead;
  scales_->b.access = Access::kRead;
}

void MatMulVertex::list_fields(std::vector<Field*>& out) {
  out.push_back(&a_.field());
  out.push_back(&b_.field());
  out.push_back(&c_.field());
  if (scales_) {
    out.push_back(&scales_->a);
    out.push_back(&scales_->b);
  }
}

void MatMulVertex::list_refs(std::vector<const FieldRef*>& out) const {
  out.push_back(&a_);
  out.push_back(&b_);
  out.push_back(&c_);
}

uint64_t MatMulVertex::cycles(const TargetSpec& t) const {
  const uint32_t rate = std::max<uint32_t>(1, amp_flops_per_cycle(t, in_));
  const uint32_t depth = amp_depth(in_);  // AMP input-channel grouping
  const uint64_t k_eff = (static_cast<uint64_t>(s_.k) + depth - 1) / depth * depth;
  const uint64_t flops = 2ull * s_.m * s_.n * k_eff;
  // The AMP's rate is the same for float and half partials (the published
  // FP16 peak); half partials save memory and the bytes reduced later.
  const uint64_t compute = flops / rate;
  const uint64_t per_row = 8ull * s_.m;  // row set-up on the workers
  return t.vertex_overhead_cycles + compute + per_row;
}

void MatMulVertex::compute(uint8_t* mem) const {
  const uint32_t m = s_.m, n = s_.n, k = s_.k;
  if (m == 0 || n == 0) return;
  if (in_ == DeviceType::kFloat32 && out_ == DeviceType::kFloat32) {
    // Float data is multiplied where it lies, straight into the result.
    gemm_f32(reinterpret_cast<const float*>(mem + a_.address), reinterpret_cast<const float*>(mem + b_.address),
             reinterpret_cast<float*>(mem + c_.address), m, n, k, s_.lda, s_.ldb, s_.ldc, false);
    return;
  }
  ProductScratch& scratch = thread_scratch<ProductScratch>();
  std::vector<float> &abuf = scratch.abuf, &bbuf = scratch.bbuf, &cbuf = scratch.cbuf, &tbuf = scratch.tbuf;
  abuf.resize(static_cast<size_t>(m) * k);
  cbuf.resize(static_cast<size_t>(m) * n);
  load_block(mem + a_.address, in_, m, k, s_.lda, abuf.data());
  if (in_ == DeviceType::kFloat16 && partials_ == DeviceType::kFloat16 && !active_rounding_rng()) {
    // Half B is multiplied where it lies, each row widened as the kernel
    // loads it (the same floats as widening it into a buffer first).
    std::vector<const half_bits*>& rows = scratch.half_rows;
    rows.resize(k);
    const half_bits* b = reinterpret_cast<const half_bits*>(mem + b_.address);
    for (uint32_t kk = 0; kk < k; ++kk) rows[kk] = b + static_cast<size_t>(kk) * s_.ldb;
    gemm_half_partials_rows(abuf.data(), k, rows.data(), cbuf.data(), m, n, k, n, amp_depth(in_),
                            operand_scale(mem, scales_.get()), false);
    store_block(cbuf.data(), m, n, mem + c_.address, out_, s_.ldc);
    return;
  }
  bbuf.resize(static_cast<size_t>(k) * n);
  load_block(mem + b_.address, in_, k, n, s_.ldb, bbuf.data());
  if (partials_ == DeviceType::kFloat32) {
    gemm_f32(abuf.data(), bbuf.data(), cbuf.data(), m, n, k, k, n, n, false);
  } else {
    NX_CHECK(scales_ || !is_float8(in_), "float8 matmul vertex without its scale");
    const float scale = operand_scale(mem, scales_.get());
    if (!active_rounding_rng()) {
      std::vector<const float*>& rows = scratch.rows;
      rows.resize(k);
      for (uint32_t kk = 0; kk < k; ++kk) rows[kk] = bbuf.data() + static_cast<size_t>(kk) * n;
      gemm_half_partials_rows(abuf.data(), k, rows.data(), cbuf.data(), m, n, k, n, amp_depth(in_), scale, false);
    } else {
      // Stochastic rounding draws per element in pass order: chunk by chunk.
      sum_in_half_partials(cbuf, tbuf, k, amp_depth(in_), scale, [&](uint32_t k0, uint32_t kc, float* out) {
        gemm_f32(abuf.data() + k0, bbuf.data() + static_cast<size_t>(k0) * n, out, m, n, kc, k, n, n, false);
      });
    }
  }
  store_block(cbuf.data(), m, n, mem + c_.address, out_, s_.ldc);
}

SumPartialsVertex::SumPartialsVertex(uint32_t tile_, Field in, Field out, uint32_t parts, uint32_t rows, uint32_t cols,
                                     uint32_t ld_out, DeviceType partials_dtype, DeviceType out_dtype)
    : in_(in), out_(out), parts_(parts), rows_(rows), cols_(cols), ld_out_(ld_out), partials_(partials_dtype),
      out_dtype_(out_dtype) {
  tile = tile_;
  in_.field().access = Access::kRead;
  in_.field().piecewise = true;  // the parts are received from the tiles that computed them
  out_.field().access = Access::kWrite;
  NX_CHECK(in_.count == static_cast<uint64_t>(parts) * rows * cols, "partials field size mismatch");
  NX_CHECK(rows == 0 || static_cast<uint64_t>(rows - 1) * ld_out + cols <= out_.count, "partials output exceeds its field");
}

void SumPartialsVertex::set_bias(Field bias, DeviceType dtype) {
  NX_CHECK(bias.count >= rows_, "partials bias shorter than its rows");
  bias_ = std::make_unique<BiasField>(BiasField{bias, dtype});
  bias_->field.access = Access::kRead;
}

void SumPartialsVertex::list_fields(std::vector<Field*>& out) {
  out.push_back(&in_.field());
  out.push_back(&out_.field());
  if (bias_) out.push_back(&bias_->field);
}

void SumPartialsVertex::list_refs(std::vector<const FieldRef*>& out) const {
  out.push_back(&in_);
  out.push_back(&out_);
}

uint64_t SumPartialsVertex::cycles(const TargetSpec& t) const {
  const double per = partials_ == DeviceType::kFloat16 ? 0.25 : 0.5;
  const uint64_t items = worker_rounded(t, in_.count);
  return t.vertex_overhead_cycles + static_cast<uint64_t>(per * static_cast<double>(items)) +
         items * device_type_size(partials_) / t.local_read_bytes_per_cycle + 4ull * rows_;
}

void SumPartialsVertex::compute(uint8_t* mem) const {
  const uint64_t n = static_cast<uint64_t>(rows_) * cols_;
  ProductScratch& scratch = thread_scratch<ProductScratch>();
  std::vector<float> &acc = scratch.acc, &part = scratch.part;
  if (partials_ == DeviceType::kFloat32) {
    // Added straight from each part's bytes (its pieces, when it is read at
    // its senders), in part order as below: 0 + p0 + p1 + ... A float32
    // output whose rows follow one another is the running sum itself.
    const bool direct = out_dtype_ == DeviceType::kFloat32 && (ld_out_ == cols_ || rows_ <= 1);
    float* sum = direct ? reinterpret_cast<float*>(mem + out_.address) : (acc.resize(n), acc.data());
    // (One walk over the parts, in order: a run may hold the end of one part
    // and the start of the next.)
    for_each_part_run(mem, n, sizeof(float), [&](uint32_t p, const uint8_t* src, uint64_t at, uint64_t len) {
      const float* s = reinterpret_cast<const float*>(src);
      float* a = sum + at;
      if (p == 0) {
        for (uint64_t i = 0; i < len; ++i) a[i] = 0.0f + s[i];
      } else {
        for (uint64_t i = 0; i < len; ++i) a[i] += s[i];
      }
    });
    if (direct) {
      if (bias_) {
        for (uint32_t r = 0; r < rows_; ++r) {
          const float bv = static_cast<float>(load_element(mem + bias_->field.address, bias_->dtype, r));
          for (uint32_t c = 0; c < cols_; ++c) sum[static_cast<size_t>(r) * cols_ + c] += bv;
        }
      }
      return;
    }
  } else if (partials_ == DeviceType::kFloat16 && !active_rounding_rng()) {
    // The same sums kept in half, each part added straight from its bytes
    // (the first to zero: zero_plus_half_n, the sum's bits without the sum).
    std::vector<half_bits>& hacc = scratch.hacc;
    hacc.resize(n);
    if (parts_ == 0) std::fill(hacc.begin(), hacc.end(), half_bits{0});
    for_each_part_run(mem, n, sizeof(half_bits), [&](uint32_t p, const uint8_t* src, uint64_t at, uint64_t len) {
      if (p == 0) zero_plus_half_n(hacc.data() + at, reinterpret_cast<const half_bits*>(src), len);
      else add_half_n(hacc.data() + at, reinterpret_cast<const half_bits*>(src), len);
    });
    if (out_dtype_ == DeviceType::kFloat16) {
      // Stored row by row, each with its bias added and rounded on the way.
      uint8_t* o = mem + out_.address;
      for (uint32_t r = 0; r < rows_; ++r) {
        half_bits* row = reinterpret_cast<half_bits*>(o + static_cast<size_t>(r) * ld_out_ * sizeof(half_bits));
        const half_bits* sum = hacc.data() + static_cast<size_t>(r) * cols_;
        if (bias_)
          add_scalar_half_n(sum, static_cast<float>(load_element(mem + bias_->field.address, bias_->dtype, r)), row, cols_);
        else
          std::memcpy(row, sum, cols_ * sizeof(half_bits));
      }
      return;
    }
    acc.resize(n);
    half_to_float_n(hacc.data(), acc.data(), n);
  } else {
    acc.assign(n, 0.0f);
    part.resize(n);
    for (uint32_t p = 0; p < parts_; ++p) {
      load_field_floats(mem, in_, partials_, p * n, n, part.data());
      for (uint64_t i = 0; i < n; ++i) acc[i] += part[i];
      if (partials_ == DeviceType::kFloat16) round_to_half_n(acc.data(), n);
    }
  }
  if (bias_) {
    for (uint32_t r = 0; r < rows_; ++r) {
      const float bv = static_cast<float>(load_element(mem + bias_->field.address, bias_->dtype, r));
      for (uint32_t c = 0; c < cols_; ++c) acc[static_cast<size_t>(r) * cols_ + c] += bv;
    }
    if (partials_ == DeviceType::kFloat16 || out_dtype_ == DeviceType::kFloat16) round_to_half_n(acc.data(), n);
  }
  store_block(acc.data(), rows_, cols_, mem + out_.address, out_dtype_, ld_out_);
}

}  // namespace neurenix
