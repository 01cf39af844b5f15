// Element-wise expression vertex.
//
// The expression is evaluated a block of elements at a time: every instruction
// runs over the whole block before the next one, so the per-element cost is a
// tight loop rather than an interpreter dispatch. An instruction flagged
// `half` rounds its float result to binary16, as the chip's half-precision
// pipeline would.
#include "neurenix/codelets/map.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "neurenix/error.h"
#include "neurenix/float8.h"
#include "neurenix/float_math.h"
#include "neurenix/half.h"
#include "neurenix/stochastic_rounding.h"
#include "scratch.h"

// GCC 12 reports the AVX-512 conversion intrinsics' own placeholder
// operands as (maybe) uninitialized (a false positive in its headers, as in
// codelets/gemm.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace neurenix {
namespace {

constexpr size_t kBlock = 256;
// A repeated operand's element loaded and a run's loop set up.
constexpr uint64_t kCyclesPerRun = 4;

// Only reachable when an expression that check_expression rejects gets here.
[[noreturn]] void bad(ExprOpCode op, const char* why) {
  fail(ErrorCode::kInvalidArgument, std::string("malformed element-wise expression at ") + expr_op_name(op) + ": " + why);
}

// A block of values; floats and ints share storage by kind.
struct Slot {
  ValueKind kind;
  alignas(32) float f[kBlock];
  alignas(32) int32_t i[kBlock];
};

inline float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
inline float round_half_even(float x) { return std::nearbyint(x); }
// Python's %: the sign of the divisor, a zero result included (ONNX Mod 28).
inline float py_mod(float a, float b) {
  float r = std::fmod(a, b);
  if (r == 0) return std::copysign(0.0f, b);
  if ((r < 0) != (b < 0)) r += b;
  return r;
}
// Integer division never traps: x / 0 gives 0 and INT32_MIN / -1 wraps.
inline int32_t safe_div_i(int32_t a, int32_t b) {
  if (b == 0) return 0;
  if (b == -1) return static_cast<int32_t>(0u - static_cast<uint32_t>(a));
  return a / b;
}
inline int32_t safe_rem_i(int32_t a, int32_t b) { return (b == 0 || b == -1) ? 0 : a % b; }
inline int32_t py_mod_i(int32_t a, int32_t b) {
  if (b == 0) return 0;
  int32_t r = safe_rem_i(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// A float32 rounded to the nearest bfloat16 (ties to even), as a float32.
inline float round_to_bf16(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return x;  // NaN
  b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &b, 4);
  return x;
}

void unary_float(ExprOpCode op, const ExprInstr& ins, float* x, size_t n) {
  switch (op) {
    case ExprOpCode::kNeg: for (size_t j = 0; j < n; ++j) x[j] = -x[j]; break;
    case ExprOpCode::kAbs: for (size_t j = 0; j < n; ++j) x[j] = std::fabs(x[j]); break;
    case ExprOpCode::kRelu: for (size_t j = 0; j < n; ++j) x[j] = x[j] > 0.0f ? x[j] : (x[j] == x[j] ? 0.0f : x[j]); break;
    case ExprOpCode::kSigmoid: {
      // 1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) below.
      float e[kBlock];
      for (size_t j = 0; j < n; ++j) e[j] = x[j] >= 0 ? -x[j] : x[j];
      exp_block(e, n);
      for (size_t j = 0; j < n; ++j) x[j] = x[j] >= 0 ? 1.0f / (1.0f + e[j]) : e[j] / (1.0f + e[j]);
      break;
    }
    case ExprOpCode::kTanh: for (size_t j = 0; j < n; ++j) x[j] = std::tanh(x[j]); break;
    case ExprOpCode::kExp: exp_block(x, n); break;
    case ExprOpCode::kLog: for (size_t j = 0; j < n; ++j) x[j] = std::log(x[j]); break;
    case ExprOpCode::kSqrt: for (size_t j = 0; j < n; ++j) x[j] = std::sqrt(x[j]); break;
    case ExprOpCode::kRsqrt: for (size_t j = 0; j < n; ++j) x[j] = 1.0f / std::sqrt(x[j]); break;
    case ExprOpCode::kReciprocal: for (size_t j = 0; j < n; ++j) x[j] = 1.0f / x[j]; break;
    case ExprOpCode::kErf: erf_block(x, n); break;
    case ExprOpCode::kGeluErf: {
      float e[kBlock];
      for (size_t j = 0; j < n; ++j) e[j] = x[j] * 0.70710678118654752f;
      erf_block(e, n);
      for (size_t j = 0; j < n; ++j) x[j] = 0.5f * x[j] * (1.0f + e[j]);
      break;
    }
    case ExprOpCode::kGeluTanh: for (size_t j = 0; j < n; ++j) x[j] = gelu_tanh(x[j]); break;
    case ExprOpCode::kFloor: for (size_t j = 0; j < n; ++j) x[j] = std::floor(x[j]); break;
    case ExprOpCode::kCeil: for (size_t j = 0; j < n; ++j) x[j] = std::ceil(x[j]); break;
    case ExprOpCode::kRound: for (size_t j = 0; j < n; ++j) x[j] = round_half_even(x[j]); break;
    case ExprOpCode::kSign: for (size_t j = 0; j < n; ++j) x[j] = x[j] > 0 ? 1.0f : (x[j] < 0 ? -1.0f : x[j]); break;
    case ExprOpCode::kSin: for (size_t j = 0; j < n; ++j) x[j] = std::sin(x[j]); break;
    case ExprOpCode::kCos: for (size_t j = 0; j < n; ++j) x[j] = std::cos(x[j]); break;
    case ExprOpCode::kSquare: for (size_t j = 0; j < n; ++j) x[j] = x[j] * x[j]; break;
    case ExprOpCode::kSoftplus: {
      // x + log1p(exp(-x)) for x > 0, log1p(exp(x)) below.
      float e[kBlock];
      for (size_t j = 0; j < n; ++j) e[j] = x[j] > 0 ? -x[j] : x[j];
      exp_block(e, n);
      for (size_t j = 0; j < n; ++j) x[j] = x[j] > 0 ? x[j] + std::log1p(e[j]) : std::log1p(e[j]);
      break;
    }
    case ExprOpCode::kSoftsign: for (size_t j = 0; j < n; ++j) x[j] = x[j] / (1.0f + std::fabs(x[j])); break;
    case ExprOpCode::kClamp: {
      float lo = static_cast<float>(ins.imm), hi = static_cast<float>(ins.imm2);
      for (size_t j = 0; j < n; ++j) x[j] = x[j] < lo ? lo : (x[j] > hi ? hi : x[j]);
      break;
    }
    case ExprOpCode::kLeakyRelu: {
      float a = static_cast<float>(ins.imm);
      for (size_t j = 0; j < n; ++j) x[j] = x[j] >= 0 ? x[j] : a * x[j];
      break;
    }
    case ExprOpCode::kElu: {
      float a = static_cast<float>(ins.imm);
      // exp only where it is used: exp of a large x would overflow.
      float e[kBlock];
      for (size_t j = 0; j < n; ++j) e[j] = x[j] >= 0 ? 0.0f : x[j];
      exp_block(e, n);
      for (size_t j = 0; j < n; ++j) x[j] = x[j] >= 0 ? x[j] : a * (e[j] - 1.0f);
      break;
    }
    case ExprOpCode::kHardSigmoid: {
      float a = static_cast<float>(ins.imm), b = static_cast<float>(ins.imm2);
      for (size_t j = 0; j < n; ++j) {
        float v = a * x[j] + b;
        x[j] = v < 0 ? 0 : (v > 1 ? 1 : v);
      }
      break;
    }
    case ExprOpCode::kRoundBf16: for (size_t j = 0; j < n; ++j) x[j] = round_to_bf16(x[j]); break;
    case ExprOpCode::kRoundF8: {
      const Float8Format& f = float8_format(static_cast<int>(ins.imm));
      const bool saturate = ins.imm2 != 0.0;
      for (size_t j = 0; j < n; ++j) x[j] = round_to_float8(x[j], f, saturate);
      break;
    }
    default: bad(op, "not a float unary operation");
  }
}

void unary_int(ExprOpCode op, int32_t* x, size_t n) {
  switch (op) {
    case ExprOpCode::kNeg: for (size_t j = 0; j < n; ++j) x[j] = -x[j]; break;
    case ExprOpCode::kAbs: for (size_t j = 0; j < n; ++j) x[j] = x[j] < 0 ? -x[j] : x[j]; break;
    case ExprOpCode::kRelu: for (size_t j = 0; j < n; ++j) x[j] = x[j] > 0 ? x[j] : 0; break;
    case ExprOpCode::kSign: for (size_t j = 0; j < n; ++j) x[j] = (x[j] > 0) - (x[j] < 0); break;
    case ExprOpCode::kSquare: for (size_t j = 0; j < n; ++j) x[j] = x[j] * x[j]; break;
    default: bad(op, "not an integer unary operation");
  }
}

// The binary operations binary_arith does.
bool binary_arith_op(ExprOpCode op) {
  return op == ExprOpCode::kAdd || op == ExprOpCode::kSub || op == ExprOpCode::kMul || op == ExprOpCode::kMin ||
         op == ExprOpCode::kMax;
}
// out[j] = a[j] op b[j]; out may be a or b (each element is read before it
// is written), or apart from both.
template <typename T>
inline void binary_arith(ExprOpCode op, T* out, const T* a, const T* b, size_t n) {
  switch (op) {
    case ExprOpCode::kAdd: for (size_t j = 0; j < n; ++j) out[j] = a[j] + b[j]; break;
    case ExprOpCode::kSub: for (size_t j = 0; j < n; ++j) out[j] = a[j] - b[j]; break;
    case ExprOpCode::kMul: for (size_t j = 0; j < n; ++j) out[j] = a[j] * b[j]; break;
    case ExprOpCode::kMin: for (size_t j = 0; j < n; ++j) out[j] = (b[j] < a[j] || b[j] != b[j]) ? b[j] : a[j]; break;
    case ExprOpCode::kMax: for (size_t j = 0; j < n; ++j) out[j] = (b[j] > a[j] || b[j] != b[j]) ? b[j] : a[j]; break;
    default: break;
  }
}

// The unary operations the interpreter does itself on a slot (predicates
// and conversions, which change the slot's kind); every other one is
// unary_float's on float values and unary_int's on integers.
bool slot_unary(ExprOpCode op) {
  return op == ExprOpCode::kNot || op == ExprOpCode::kIsNan || op == ExprOpCode::kIsInf || op == ExprOpCode::kCastF32 ||
         op == ExprOpCode::kCastF16 || op == ExprOpCode::kCastI32 || op == ExprOpCode::kCastBool;
}

#if defined(__AVX512F__)
// x op y for the register paths' arithmetic, in the lanes of k (the others
// zero: no floating-point exception from lanes past the end).
inline __m512 arith(ExprOpCode op, __mmask16 k, __m512 x, __m512 y) {
  switch (op) {
    case ExprOpCode::kAdd: return _mm512_maskz_add_ps(k, x, y);
    case ExprOpCode::kSub: return _mm512_maskz_sub_ps(k, x, y);
    case ExprOpCode::kMul: return _mm512_maskz_mul_ps(k, x, y);
    case ExprOpCode::kDiv: return _mm512_maskz_div_ps(k, x, y);
    default: NX_CHECK(false, "an instruction the registers do not run");
  }
  return x;
}

// Float16 in the register paths (where the build has 16-bit masked loads
// and stores): operands widened as they are loaded, `half` instructions'
// results rounded to half and widened again, a float16 output rounded as it
// is stored: round_to_half_n's and float_to_half_n's roundings (to nearest
// even), lane by lane.
#if defined(__AVX512BW__)
constexpr bool kHalfRegisters = true;
#else
constexpr bool kHalfRegisters = false;
#endif
inline __m512 round16(__m512 x) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// Sixteen elements of a float32 or float16 operand at p, the lanes of k.
inline __m512 load16(DeviceType dtype, const uint8_t* p, __mmask16 k) {
#if defined(__AVX512BW__)
  if (dtype == DeviceType::kFloat16) return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(k, p)));
#endif
  (void)dtype;
  return _mm512_maskz_loadu_ps(k, p);
}
inline void store16(DeviceType dtype, uint8_t* p, __mmask16 k, __m512 x) {
#if defined(__AVX512BW__)
  if (dtype == DeviceType::kFloat16) {
    const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_mask_storeu_epi16(p, k, _mm512_zextsi256_si512(h));
    return;
  }
#endif
  (void)dtype;
  _mm512_mask_storeu_ps(reinterpret_cast<float*>(p), k, x);
}
// Element i of a float32 or float16 field at p (a scalar's, a run's value).
inline float element(DeviceType dtype, const uint8_t* p, size_t i) {
  if (dtype == DeviceType::kFloat16) return half_to_float(reinterpret_cast<const half_bits*>(p)[i]);
  return reinterpret_cast<const float*>(p)[i];
}
// A leaf's value: an operand rounded to half when the leaf says so (a
// float16 one is half already), a constant likewise.
inline __m512 leaf_value(const ExprInstr& ins, const MapVertex::Operand& o, __m512 v) {
  return ins.half && o.dtype != DeviceType::kFloat16 ? round16(v) : v;
}
inline float const_value(const ExprInstr& ins) {
  const float v = static_cast<float>(ins.imm);
  return ins.half ? round_to_half(v) : v;
}

// MapVertex::compute's small float32 or float16 expressions that call exp
// or erf: a vector instruction at a time over the whole vertex (at most
// kRegisterElements, a stack slot of kRegisterElements floats per depth),
// each function over the slot at once: the same operations on the same
// values as the interpreter, without its leaves' copies and its dispatch
// per block. Out of line: its slots would enlarge the frame of every
// vertex's compute call.
__attribute__((noinline)) void map_in_slots(const std::vector<ExprInstr>& expr,
                                             const std::vector<MapVertex::Operand>& operands, const uint8_t* const* src,
                                             uint8_t* out, DeviceType out_dtype, uint64_t total) {
  constexpr size_t kDepth = MapVertex::kRegisterDepth;
  constexpr uint64_t kElements = MapVertex::kRegisterElements;
  alignas(64) float stack[kDepth][kElements];
  const size_t chunks = static_cast<size_t>((total + 15) / 16);
  const __mmask16 tail = static_cast<__mmask16>(total % 16 == 0 ? 0xFFFFu : (1u << (total % 16)) - 1);
  auto mask = [&](size_t c) { return c + 1 < chunks ? static_cast<__mmask16>(0xFFFFu) : tail; };
  size_t sp = 0;
  for (const ExprInstr& ins : expr) {
    float* top = stack[sp];
    switch (ins.op) {
      case ExprOpCode::kInput: {
        const MapVertex::Operand& o = operands[ins.arg];
        const uint8_t* p = src[ins.arg];
        const size_t es = device_type_size(o.dtype);
        if (o.scalar) {
          const __m512 v = leaf_value(ins, o, _mm512_set1_ps(element(o.dtype, p, 0)));
          for (size_t c = 0; c < chunks; ++c) _mm512_store_ps(top + 16 * c, v);
        } else if (!o.runs.empty()) {
          size_t j = 0;
          for (size_t r = 0; r < o.runs.size(); ++r) {
            const float v = element(o.dtype, p, r);
            for (uint32_t e = 0; e < o.runs[r]; ++e) top[j++] = v;
          }
          if (ins.half && o.dtype != DeviceType::kFloat16)
            for (size_t c = 0; c < chunks; ++c) _mm512_store_ps(top + 16 * c, round16(_mm512_maskz_load_ps(mask(c), top + 16 * c)));
        } else {
          for (size_t c = 0; c < chunks; ++c)
            _mm512_store_ps(top + 16 * c, leaf_value(ins, o, load16(o.dtype, p + 16 * c * es, mask(c))));
        }
        ++sp;
        break;
      }
      case ExprOpCode::kConstF: {
        const __m512 v = _mm512_set1_ps(const_value(ins));
        for (size_t c = 0; c < chunks; ++c) _mm512_store_ps(top + 16 * c, v);
        ++sp;
        break;
      }
      case ExprOpCode::kExp:
      case ExprOpCode::kErf: {
        float* x = stack[sp - 1];
        if (ins.op == ExprOpCode::kExp) exp_block(x, static_cast<size_t>(total));
        else erf_block(x, static_cast<size_t>(total));
        if (ins.half)
          for (size_t c = 0; c < chunks; ++c) _mm512_store_ps(x + 16 * c, round16(_mm512_maskz_load_ps(mask(c), x + 16 * c)));
        break;
      }
      default: {
        float* a = stack[sp - 2];
        const float* b = stack[sp - 1];
        --sp;
        for (size_t c = 0; c < chunks; ++c) {
          const __m512 r = arith(ins.op, mask(c), _mm512_load_ps(a + 16 * c), _mm512_load_ps(b + 16 * c));
          _mm512_store_ps(a + 16 * c, ins.half ? round16(r) : r);
        }
      }
    }
  }
  const size_t out_es = device_type_size(out_dtype);
  for (size_t c = 0; c < chunks; ++c)
    store16(out_dtype, out + 16 * c * out_es, mask(c), _mm512_load_ps(stack[0] + 16 * c));
}
#endif

}  // namespace

MapVertex::MapVertex(uint32_t tile_, std::shared_ptr<const std::vector<ExprInstr>> expr, std::vector<Operand> operands,
                     Field out, DeviceType out_dtype)
    : expr_(std::move(expr)), operands_(std::move(operands)), out_(out), out_dtype_(out_dtype) {
  tile = tile_;
  out_.field().access = Access::kWrite;
  for (auto& o : operands_) {
    o.field.field().access = Access::kRead;
    if (!o.runs.empty()) {
      has_runs_ = true;
      uint64_t covered = 0;
      for (uint32_t r : o.runs) covered += r;
      NX_CHECK(!o.scalar && o.field.count == o.runs.size() && covered == out_.count,
               "map operand runs do not cover its output");
      continue;
    }
    NX_CHECK(o.scalar ? o.field.count == 1 : o.field.count == out_.count, "map operand size differs from its output");
  }
  in_registers_ = registers_fit();
  rounds_half_ = out_dtype_ == DeviceType::kFloat16;
  for (const auto& o : operands_) rounds_half_ |= o.dtype == DeviceType::kFloat16;
  for (const ExprInstr& ins : *expr_) {
    calls_function_ |= in_registers_ && expr_arity(ins.op) == ExprArity::kUnary;
    rounds_half_ |= ins.half;
  }
}

bool MapVertex::registers_fit() const {
#if defined(__AVX512F__)
  // (Float16 operands and output, and half instructions, where the build
  // has 16-bit masked loads and stores.)
  auto fits = [](DeviceType t) { return t == DeviceType::kFloat32 || (kHalfRegisters && t == DeviceType::kFloat16); };
  if (!fits(out_dtype_) || operands_.size() > kRegisterOperands) return false;
  int depth = 0, deepest = 0;
  for (const ExprInstr& ins : *expr_) {
    if (ins.half && !kHalfRegisters) return false;
    switch (expr_arity(ins.op)) {
      case ExprArity::kLeaf: {
        if (ins.op == ExprOpCode::kInput) {
          // (Whole, a scalar, or repeated over runs.)
          if (!fits(operands_[ins.arg].dtype)) return false;
        } else if (ins.op != ExprOpCode::kConstF) {
          return false;
        }
        deepest = std::max(deepest, ++depth);
        break;
      }
      case ExprArity::kUnary:
        // exp and erf (a softmax's exponent, a GELU written out): the
        // expression then runs a vector instruction at a time over the
        // whole vertex, each function once over all of it (called chunk
        // by chunk it cost more than the passes saved: 1.147).
        if (ins.op != ExprOpCode::kExp && ins.op != ExprOpCode::kErf) return false;
        break;
      case ExprArity::kBinary:
        if (ins.op != ExprOpCode::kAdd && ins.op != ExprOpCode::kSub && ins.op != ExprOpCode::kMul &&
            ins.op != ExprOpCode::kDiv)
          return false;
        --depth;
        break;
      default:
        return false;
    }
  }
  return depth == 1 && deepest <= static_cast<int>(kRegisterDepth);
#else
  return false;
#endif
}

uint64_t MapVertex::state_bytes() const {
  uint64_t runs = 0;
  for (const auto& o : operands_) runs += o.runs.size();
  return 4 * runs;
}

void MapVertex::list_fields(std::vector<Field*>& out) {
  for (auto& o : operands_) out.push_back(&o.field.field());
  out.push_back(&out_.field());
}

void MapVertex::list_refs(std::vector<const FieldRef*>& out) const {
  for (const auto& o : operands_) out.push_back(&o.field);
  out.push_back(&out_);
}

bool MapVertex::uses_random() const {
  for (const auto& ins : *expr_)
    if (ins.op == ExprOpCode::kRandomUniform) return true;
  return false;
}

uint64_t MapVertex::cycles(const TargetSpec& t) const {
  double per = 0;
  for (const auto& ins : *expr_) per += expr_op_cycles(ins.op, ins.half);
  // Loads and stores through the 64-bit memory path.
  double bytes = static_cast<double>(device_type_size(out_dtype_));
  // A repeated operand is read once per run and held in a register over it.
  uint64_t runs = 0;
  for (const auto& o : operands_) {
    if (!o.runs.empty()) runs += o.runs.size();
    else if (!o.scalar) bytes += static_cast<double>(device_type_size(o.dtype));
  }
  per += bytes / t.local_read_bytes_per_cycle;
  return t.vertex_overhead_cycles + static_cast<uint64_t>(per * static_cast<double>(worker_rounded(t, out_.count)) + 0.5) +
         kCyclesPerRun * runs;
}

void MapVertex::compute(uint8_t* mem) const {
  const std::vector<ExprInstr>& expr = *expr_;
  // A leaf that reads a whole operand of type `dtype` element by element,
  // as it is (a half flag rounds a float32 operand; a float16 one is half
  // already).
  auto plain_leaf = [&](const ExprInstr& ins, DeviceType dtype) {
    if (expr_arity(ins.op) != ExprArity::kLeaf || ins.op == ExprOpCode::kRandomUniform ||
        ins.op == ExprOpCode::kConstF || ins.op == ExprOpCode::kConstI)
      return false;
    const Operand& o = operands_[ins.arg];
    return o.dtype == dtype && o.runs.empty() && !o.scalar && (dtype == DeviceType::kFloat16 || !ins.half);
  };
  // One float32 operand through one float operation into a float32 output
  // (ReLU and the like): the operand copied to the output at once (not at
  // all when the two are the same bytes) and the operation run there,
  // instead of through a scratch slot block by block; the same values.
  if (expr.size() == 2 && out_dtype_ == DeviceType::kFloat32 && !expr[1].half &&
      plain_leaf(expr[0], DeviceType::kFloat32) && expr_arity(expr[1].op) == ExprArity::kUnary &&
      !slot_unary(expr[1].op)) {
    float* out = reinterpret_cast<float*>(mem + out_.address);
    const float* in = reinterpret_cast<const float*>(mem + operands_[expr[0].arg].field.address);
    const uint64_t n = out_.count;
    if (expr[1].op == ExprOpCode::kRelu && (in + n <= out || out + n <= in)) {
      // ReLU, the usual case, in one pass from the operand to the output
      // (each output line written once: a copy, then the operation there,
      // wrote it twice), the same values as unary_float's.
      for (uint64_t j = 0; j < n; ++j) out[j] = in[j] > 0.0f ? in[j] : (in[j] == in[j] ? 0.0f : in[j]);
      return;
    }
    if (in != out) std::memmove(out, in, n * sizeof(float));
    for (uint64_t base = 0; base < out_.count; base += kBlock)  // (its scratch is a block)
      unary_float(expr[1].op, expr[1], out + base, static_cast<size_t>(std::min<uint64_t>(kBlock, out_.count - base)));
    return;
  }
#if defined(__AVX512BW__)
  // Float16 ReLU (not under stochastic rounding, which draws per element):
  // on the binary16 bits, 32 at a time, in one pass. A value the
  // interpreter widens, clamps, rounds to half and narrows comes back as it
  // was when positive (+inf too) and as +0 when negative (-0 and -inf too):
  // so the bits are kept or cleared by their sign. A chunk holding a NaN
  // goes the interpreter's way (its bits and flags as the interpreter's).
  if (expr.size() == 2 && out_dtype_ == DeviceType::kFloat16 && plain_leaf(expr[0], DeviceType::kFloat16) &&
      expr[1].op == ExprOpCode::kRelu && !active_rounding_rng()) {
    half_bits* out = reinterpret_cast<half_bits*>(mem + out_.address);
    const half_bits* in = reinterpret_cast<const half_bits*>(mem + operands_[expr[0].arg].field.address);
    const uint64_t n = out_.count;
    if (in == out || in + n <= out || out + n <= in) {
      const __m512i magnitude = _mm512_set1_epi16(0x7fff), inf = _mm512_set1_epi16(0x7c00);
      for (uint64_t j = 0; j < n; j += 32) {
        const size_t m = static_cast<size_t>(std::min<uint64_t>(32, n - j));
        const __mmask32 k = m == 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << m) - 1);
        const __m512i h = _mm512_maskz_loadu_epi16(k, in + j);
        if (_mm512_cmpgt_epu16_mask(_mm512_and_si512(h, magnitude), inf)) {
          alignas(64) float f[32];
          half_to_float_n(in + j, f, m);
          unary_float(expr[1].op, expr[1], f, m);
          if (expr[1].half) round_to_half_n(f, m);
          float_to_half_n(f, out + j, m);
          continue;
        }
        _mm512_mask_storeu_epi16(out + j, k, _mm512_maskz_mov_epi16(~_mm512_movepi16_mask(h), h));
      }
      return;
    }
  }
#endif
  // Two operands through one arithmetic operation into an output, all
  // float32 or all float16 (a residual Add and the like): float32 computed
  // straight from the operands into the output; float16 a block at a time
  // converted to float, computed, rounded as the interpreter rounds, and
  // stored. Each operand is the same bytes as the output or apart from
  // them; the same values as the interpreter.
  const DeviceType od = out_dtype_;
  if (expr.size() == 3 && (od == DeviceType::kFloat32 || od == DeviceType::kFloat16) && binary_arith_op(expr[2].op) &&
      (od == DeviceType::kFloat16 || !expr[2].half) && plain_leaf(expr[0], od) && plain_leaf(expr[1], od)) {
    const uint64_t n = out_.count;
    const size_t es = device_type_size(od);
    uint8_t* out = mem + out_.address;
    const uint8_t* a = mem + operands_[expr[0].arg].field.address;
    const uint8_t* b = mem + operands_[expr[1].arg].field.address;
    auto same_or_apart = [bytes = n * es](const uint8_t* x, const uint8_t* y) {
      return x == y || x + bytes <= y || y + bytes <= x;
    };
    if (same_or_apart(out, a) && same_or_apart(out, b)) {
      const ExprOpCode op = expr[2].op;
      if (od == DeviceType::kFloat32) {
        binary_arith(op, reinterpret_cast<float*>(out), reinterpret_cast<const float*>(a),
                     reinterpret_cast<const float*>(b), static_cast<size_t>(n));
      } else {
        alignas(64) float fa[kBlock], fb[kBlock];
        for (uint64_t base = 0; base < n; base += kBlock) {
          const size_t m = static_cast<size_t>(std::min<uint64_t>(kBlock, n - base));
          half_to_float_n(reinterpret_cast<const half_bits*>(a) + base, fa, m);
          half_to_float_n(reinterpret_cast<const half_bits*>(b) + base, fb, m);
          binary_arith(op, fa, fa, fb, m);
          if (expr[2].half) round_to_half_n(fa, m);
          float_to_half_n(fa, reinterpret_cast<half_bits*>(out) + base, m);
        }
      }
      return;
    }
  }
#if defined(__AVX512F__)
  // Float32 arithmetic (a normalisation's scale and shift, a bias and a
  // residual added) sixteen elements at a time, every instruction on a
  // register, instead of a pass over the block per instruction: the same
  // IEEE operations on the same values, so the same results. Lanes past
  // the end are masked off (computing nothing, raising no floating-point
  // exception). Operands must be the output's bytes or apart from them: a
  // chunk is stored before the next is read. A scalar operand is its value
  // in every lane; a repeated one each run's value over its lanes (a row's
  // mean and scale over the row). Only for small vertices
  // (kRegisterElements at most): over longer ones a pass per instruction
  // costs less than its dispatch per chunk (BERT-style b8's maps of 270-740
  // elements 1.027 in registers).
  // Float16 likewise (operands widened as they are loaded, each half
  // instruction's result rounded, the output rounded as it is stored), but
  // not under stochastic rounding, which draws per element in the
  // interpreter's order.
  if (in_registers_ && out_.count <= kRegisterElements && !(rounds_half_ && active_rounding_rng())) {
    const uint64_t total = out_.count;
    uint8_t* out = mem + out_.address;
    const uint8_t* out_end = out + total * device_type_size(out_dtype_);
    const uint8_t* src[kRegisterOperands];
    bool apart = true;
    for (size_t i = 0; i < operands_.size(); ++i) {
      const Operand& o = operands_[i];
      const uint8_t* p = mem + o.field.address;
      const uint8_t* end = p + o.field.count * device_type_size(o.dtype);  // (one per run, or the scalar)
      // (The output's own bytes only as a whole operand of its element
      // size: each chunk is read before it is overwritten.)
      const bool same = p == out && o.runs.empty() && !o.scalar && o.dtype == out_dtype_;
      apart &= o.field.pieces.empty() && (same || end <= out || out_end <= p);
      src[i] = p;
    }
    if (apart && calls_function_) {
      map_in_slots(expr, operands_, src, out, out_dtype_, total);
      return;
    }
    if (apart) {
      // Where each repeated operand's runs stand: run `run`, `left` of its
      // elements still to cover.
      size_t run[kRegisterOperands];
      uint32_t left[kRegisterOperands];
      for (size_t i = 0; i < operands_.size(); ++i) {
        run[i] = 0;
        left[i] = operands_[i].runs.empty() ? 0 : operands_[i].runs[0];
      }
      __m512 opv[kRegisterOperands];
      __m512 st[kRegisterDepth];
      for (uint64_t j0 = 0; j0 < total; j0 += 16) {
        const size_t m = static_cast<size_t>(std::min<uint64_t>(16, total - j0));
        const __mmask16 k = static_cast<__mmask16>(m == 16 ? 0xFFFFu : (1u << m) - 1);
        // This chunk of every operand, once (an operand may be read twice).
        for (size_t i = 0; i < operands_.size(); ++i) {
          const Operand& o = operands_[i];
          if (o.runs.empty()) {
            opv[i] = o.scalar ? _mm512_set1_ps(element(o.dtype, src[i], 0))
                              : load16(o.dtype, src[i] + j0 * device_type_size(o.dtype), k);
            continue;
          }
          if (left[i] >= m) {  // inside one run
            opv[i] = _mm512_set1_ps(element(o.dtype, src[i], run[i]));
            left[i] -= static_cast<uint32_t>(m);
          } else {
            alignas(64) float lanes[16];
            for (size_t j = 0; j < m; ++j) {
              while (left[i] == 0) left[i] = o.runs[++run[i]];
              lanes[j] = element(o.dtype, src[i], run[i]);
              --left[i];
            }
            opv[i] = _mm512_maskz_load_ps(k, lanes);
          }
          if (left[i] == 0 && run[i] + 1 < o.runs.size()) left[i] = o.runs[++run[i]];
        }
        size_t sp = 0;
        for (const ExprInstr& ins : expr) {
          switch (ins.op) {
            case ExprOpCode::kInput: st[sp++] = leaf_value(ins, operands_[ins.arg], opv[ins.arg]); break;
            case ExprOpCode::kConstF: st[sp++] = _mm512_set1_ps(const_value(ins)); break;
            default:
              --sp;
              st[sp - 1] = arith(ins.op, k, st[sp - 1], st[sp]);
              if (ins.half) st[sp - 1] = round16(st[sp - 1]);
          }
        }
        store16(out_dtype_, out + j0 * device_type_size(out_dtype_), k, st[0]);
      }
      return;
    }
  }
#endif
  // Where each repeated operand's runs stand at output element `at`.
  struct RunCursor {
    uint64_t at = 0;
    size_t run = 0;
    uint32_t used = 0;  // elements of that run before `at`
  };
  // A host thread's scratch (thread_scratch): one slot per stack depth, and
  // the cursors.
  struct Scratch {
    std::vector<Slot> slots;
    std::vector<RunCursor> cursors;
  };
  Scratch& scratch = thread_scratch<Scratch>();
  std::vector<Slot>& slots = scratch.slots;
  if (slots.size() < expr.size() + 1) slots.resize(expr.size() + 1);
  std::vector<RunCursor>& cursors = scratch.cursors;
  if (has_runs_) cursors.assign(operands_.size(), RunCursor{});
  uint8_t* out = mem + out_.address;
  const uint64_t total = out_.count;
  for (uint64_t base = 0; base < total; base += kBlock) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, total - base));
    size_t sp = 0;
    for (const ExprInstr& ins : expr) {
      switch (expr_arity(ins.op)) {
        case ExprArity::kLeaf: {
          Slot& s = slots[sp++];
          if (ins.op == ExprOpCode::kRandomUniform) {
            s.kind = ValueKind::kFloat;
            RoundingRng* rng = active_random_rng();
            if (rng == nullptr) fail(ErrorCode::kInvalidState, "random_uniform outside a run on a tile");
            const double lo = ins.imm, span = ins.imm2 - ins.imm;
            for (size_t j = 0; j < n; ++j)
              s.f[j] = static_cast<float>(lo + span * (static_cast<double>(rng->next32()) * 0x1p-32));
          } else if (ins.op == ExprOpCode::kConstF) {
            s.kind = ValueKind::kFloat;
            float v = static_cast<float>(ins.imm);
            if (ins.half) v = round_to_half(v);
            for (size_t j = 0; j < n; ++j) s.f[j] = v;
          } else if (ins.op == ExprOpCode::kConstI) {
            s.kind = ValueKind::kInt;
            const int32_t v = truncate_to_int32(ins.imm);
            for (size_t j = 0; j < n; ++j) s.i[j] = v;
          } else {
            const Operand& o = operands_[ins.arg];
            const uint8_t* p = mem + o.field.address;
            s.kind = value_kind(o.dtype);
            if (!o.runs.empty()) {
              // Each run's element over the run's part in this block.
              RunCursor& c = cursors[ins.arg];
              for (uint64_t skip = base - c.at; skip;) {
                const uint64_t step = std::min<uint64_t>(skip, o.runs[c.run] - c.used);
                c.used += static_cast<uint32_t>(step);
                skip -= step;
                if (c.used == o.runs[c.run]) {
                  ++c.run;
                  c.used = 0;
                }
              }
              c.at = base;
              size_t run = c.run;
              uint32_t used = c.used;
              for (size_t j = 0; j < n;) {
                const size_t take = std::min<size_t>(n - j, o.runs[run] - used);
                if (s.kind == ValueKind::kFloat) {
                  const float v = static_cast<float>(load_element(p, o.dtype, run));
                  std::fill(s.f + j, s.f + j + take, v);
                } else {
                  const int32_t v = static_cast<int32_t>(load_element(p, o.dtype, run));
                  std::fill(s.i + j, s.i + j + take, v);
                }
                j += take;
                ++run;
                used = 0;
              }
            } else if (o.scalar) {
              double v = load_element(p, o.dtype, 0);
              if (s.kind == ValueKind::kFloat)
                for (size_t j = 0; j < n; ++j) s.f[j] = static_cast<float>(v);
              else
                for (size_t j = 0; j < n; ++j) s.i[j] = static_cast<int32_t>(v);
            } else {
              switch (o.dtype) {
                case DeviceType::kFloat32: std::memcpy(s.f, p + base * 4, n * 4); break;
                case DeviceType::kFloat16: half_to_float_n(reinterpret_cast<const half_bits*>(p) + base, s.f, n); break;
                case DeviceType::kInt32: std::memcpy(s.i, p + base * 4, n * 4); break;
                case DeviceType::kBool:
                  for (size_t j = 0; j < n; ++j) s.i[j] = p[base + j] ? 1 : 0;
                  break;
                case DeviceType::kFloat8E4M3FNUZ:
                case DeviceType::kFloat8E5M2FNUZ: load_floats(p + base, o.dtype, s.f, n); break;
              }
            }
            if (ins.half && s.kind == ValueKind::kFloat && o.dtype != DeviceType::kFloat16) round_to_half_n(s.f, n);
          }
          break;
        }
        case ExprArity::kUnary: {
          Slot& s = slots[sp - 1];
          if (!slot_unary(ins.op)) {
            if (s.kind == ValueKind::kFloat) {
              unary_float(ins.op, ins, s.f, n);
              if (ins.half) round_to_half_n(s.f, n);
            } else {
              unary_int(ins.op, s.i, n);
            }
            break;
          }
          switch (ins.op) {
            case ExprOpCode::kNot: for (size_t j = 0; j < n; ++j) s.i[j] = !s.i[j]; break;
            case ExprOpCode::kIsNan:
              for (size_t j = 0; j < n; ++j) s.i[j] = std::isnan(s.f[j]);
              s.kind = ValueKind::kBool;
              break;
            case ExprOpCode::kIsInf:
              for (size_t j = 0; j < n; ++j) s.i[j] = std::isinf(s.f[j]);
              s.kind = ValueKind::kBool;
              break;
            case ExprOpCode::kCastF32:
            case ExprOpCode::kCastF16:
              if (s.kind != ValueKind::kFloat)
                for (size_t j = 0; j < n; ++j) s.f[j] = static_cast<float>(s.i[j]);
              s.kind = ValueKind::kFloat;
              if (ins.op == ExprOpCode::kCastF16 || ins.half) round_to_half_n(s.f, n);
              break;
            case ExprOpCode::kCastI32:
              if (s.kind == ValueKind::kFloat)
                for (size_t j = 0; j < n; ++j) {
                  float v = s.f[j];
                  // Truncate toward zero, saturating (NaN -> INT32_MIN as on x86).
                  s.i[j] = (v != v) ? INT32_MIN
                           : v >= 2147483647.0f ? INT32_MAX
                           : v <= -2147483648.0f ? INT32_MIN : static_cast<int32_t>(v);
                }
              s.kind = ValueKind::kInt;
              break;
            case ExprOpCode::kCastBool:
              if (s.kind == ValueKind::kFloat)
                for (size_t j = 0; j < n; ++j) s.i[j] = s.f[j] != 0.0f;
              else
                for (size_t j = 0; j < n; ++j) s.i[j] = s.i[j] != 0;
              s.kind = ValueKind::kBool;
              break;
            default: bad(ins.op, "not an operation on a slot");
          }
          break;
        }
        case ExprArity::kBinary: {
          Slot& a = slots[sp - 2];
          const Slot& b = slots[sp - 1];
          --sp;
          const bool fl = a.kind == ValueKind::kFloat;
          switch (ins.op) {
            case ExprOpCode::kAdd: case ExprOpCode::kSub: case ExprOpCode::kMul:
            case ExprOpCode::kMin: case ExprOpCode::kMax:
              if (fl) binary_arith(ins.op, a.f, a.f, b.f, n);
              else binary_arith(ins.op, a.i, a.i, b.i, n);
              break;
            case ExprOpCode::kDivPow2:  // float operands (check_expression)
              for (size_t j = 0; j < n; ++j) a.f[j] = a.f[j] / b.f[j];
              break;
            case ExprOpCode::kDiv:
              if (fl) for (size_t j = 0; j < n; ++j) a.f[j] = a.f[j] / b.f[j];
              else for (size_t j = 0; j < n; ++j) a.i[j] = safe_div_i(a.i[j], b.i[j]);
              break;
            case ExprOpCode::kPow:
              if (fl) for (size_t j = 0; j < n; ++j) a.f[j] = std::pow(a.f[j], b.f[j]);
              else for (size_t j = 0; j < n; ++j) a.i[j] = truncate_to_int32(std::pow(static_cast<double>(a.i[j]), static_cast<double>(b.i[j])));
              break;
            case ExprOpCode::kMod:
              if (fl) for (size_t j = 0; j < n; ++j) a.f[j] = py_mod(a.f[j], b.f[j]);
              else for (size_t j = 0; j < n; ++j) a.i[j] = py_mod_i(a.i[j], b.i[j]);
              break;
            case ExprOpCode::kFmod:
              if (fl) for (size_t j = 0; j < n; ++j) a.f[j] = std::fmod(a.f[j], b.f[j]);
              else for (size_t j = 0; j < n; ++j) a.i[j] = safe_rem_i(a.i[j], b.i[j]);
              break;
            case ExprOpCode::kEq:
              if (fl) for (size_t j = 0; j < n; ++j) a.i[j] = a.f[j] == b.f[j];
              else for (size_t j = 0; j < n; ++j) a.i[j] = a.i[j] == b.i[j];
              a.kind = ValueKind::kBool;
              break;
            case ExprOpCode::kLt:
              if (fl) for (size_t j = 0; j < n; ++j) a.i[j] = a.f[j] < b.f[j];
              else for (size_t j = 0; j < n; ++j) a.i[j] = a.i[j] < b.i[j];
              a.kind = ValueKind::kBool;
              break;
            case ExprOpCode::kLe:
              if (fl) for (size_t j = 0; j < n; ++j) a.i[j] = a.f[j] <= b.f[j];
              else for (size_t j = 0; j < n; ++j) a.i[j] = a.i[j] <= b.i[j];
              a.kind = ValueKind::kBool;
              break;
            case ExprOpCode::kGt:
              if (fl) for (size_t j = 0; j < n; ++j) a.i[j] = a.f[j] > b.f[j];
              else for (size_t j = 0; j < n; ++j) a.i[j] = a.i[j] > b.i[j];
              a.kind = ValueKind::kBool;
              break;
            case ExprOpCode::kGe:
              if (fl) for (size_t j = 0; j < n; ++j) a.i[j] = a.f[j] >= b.f[j];
              else for (size_t j = 0; j < n; ++j) a.i[j] = a.i[j] >= b.i[j];
              a.kind = ValueKind::kBool;
              break;
            case ExprOpCode::kAnd: for (size_t j = 0; j < n; ++j) a.i[j] = a.i[j] && b.i[j]; break;
            case ExprOpCode::kOr: for (size_t j = 0; j < n; ++j) a.i[j] = a.i[j] || b.i[j]; break;
            case ExprOpCode::kXor: for (size_t j = 0; j < n; ++j) a.i[j] = (a.i[j] != 0) != (b.i[j] != 0); break;
            default: bad(ins.op, "not a binary operation");
          }
          if (fl && a.kind == ValueKind::kFloat && ins.half) round_to_half_n(a.f, n);
          break;
        }
        case ExprArity::kTernary: {
          Slot& c = slots[sp - 3];
          const Slot& x = slots[sp - 2];
          const Slot& y = slots[sp - 1];
          sp -= 2;
          if (x.kind == ValueKind::kFloat) {
            for (size_t j = 0; j < n; ++j) c.f[j] = c.i[j] ? x.f[j] : y.f[j];
          } else {
            for (size_t j = 0; j < n; ++j) c.i[j] = c.i[j] ? x.i[j] : y.i[j];
          }
          c.kind = x.kind;
          if (c.kind == ValueKind::kFloat && ins.half) round_to_half_n(c.f, n);
          break;
        }
      }
    }
    const Slot& r = slots[0];
    switch (out_dtype_) {
      case DeviceType::kFloat32:
        if (r.kind == ValueKind::kFloat) std::memcpy(out + base * 4, r.f, n * 4);
        else for (size_t j = 0; j < n; ++j) reinterpret_cast<float*>(out)[base + j] = static_cast<float>(r.i[j]);
        break;
      case DeviceType::kFloat16: {
        alignas(32) float tmp[kBlock];
        const float* src = r.f;
        if (r.kind != ValueKind::kFloat) {
          for (size_t j = 0; j < n; ++j) tmp[j] = static_cast<float>(r.i[j]);
          src = tmp;
        }
        float_to_half_n(src, reinterpret_cast<half_bits*>(out) + base, n);
        break;
      }
      case DeviceType::kInt32:
        if (r.kind == ValueKind::kFloat)
          for (size_t j = 0; j < n; ++j) reinterpret_cast<int32_t*>(out)[base + j] = truncate_to_int32(r.f[j]);
        else
          std::memcpy(out + base * 4, r.i, n * 4);
        break;
      case DeviceType::kBool:
        if (r.kind == ValueKind::kFloat)
          for (size_t j = 0; j < n; ++j) out[base + j] = r.f[j] != 0.0f;
        else
          for (size_t j = 0; j < n; ++j) out[base + j] = r.i[j] != 0;
        break;
      case DeviceType::kFloat8E4M3FNUZ:
      case DeviceType::kFloat8E5M2FNUZ: {
        alignas(32) float tmp[kBlock];
        const float* src = r.f;
        if (r.kind != ValueKind::kFloat) {
          for (size_t j = 0; j < n; ++j) tmp[j] = static_cast<float>(r.i[j]);
          src = tmp;
        }
        store_floats(src, out_dtype_, out + base, n);
        break;
      }
    }
  }
}

FillVertex::FillVertex(uint32_t tile_, Field out, DeviceType dtype, double value) : out_(out), dtype_(dtype), value_(value) {
  tile = tile_;
  out_.field().access = Access::kWrite;
}

void FillVertex::compute(uint8_t* mem) const {
  uint8_t* p = mem + out_.address;
  uint8_t pattern[4];
  store_element(pattern, dtype_, 0, value_);
  size_t es = device_type_size(dtype_);
  for (uint64_t i = 0; i < out_.count; ++i) std::memcpy(p + i * es, pattern, es);
}

uint64_t FillVertex::cycles(const TargetSpec& t) const {
  return t.vertex_overhead_cycles + worker_rounded(t, out_.count) * device_type_size(dtype_) / t.local_write_bytes_per_cycle;
}

}  // namespace neurenix
