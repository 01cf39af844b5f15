// Helpers shared by the unit tests: tiny systems, running a graph end to end,
// byte conversions, error matching, and reference arithmetic that does not
// reuse the core's own code (so a bug there cannot hide in the reference).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "neurenix/compiler.h"
#include "neurenix/engine.h"
#include "neurenix/error.h"
#include "neurenix/graph.h"
#include "neurenix/target.h"

namespace nxtest {

using namespace neurenix;

// Short names of the element types, for test tables.
constexpr DeviceType kF32 = DeviceType::kFloat32, kF16 = DeviceType::kFloat16, kI32 = DeviceType::kInt32,
                     kBool = DeviceType::kBool;

inline SystemSpec tiny(uint32_t tiles, uint32_t ipus = 1, uint64_t bytes_per_tile = 0) {
  SystemSpec s;
  s.version = "ipu2";
  s.num_ipus = ipus;
  s.tiles_per_ipu = tiles;
  s.bytes_per_tile = bytes_per_tile;
  s.validate();
  return s;
}

template <typename T>
std::vector<uint8_t> to_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

template <typename T>
std::vector<T> from_bytes(const std::vector<uint8_t>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

template <typename T>
std::shared_ptr<const std::vector<uint8_t>> shared_bytes(const std::vector<T>& v) {
  return std::make_shared<const std::vector<uint8_t>>(to_bytes(v));
}

// Every output's bytes after a run of `e`.
inline std::vector<std::vector<uint8_t>> read_outputs(Engine& e) {
  std::vector<std::vector<uint8_t>> out(e.num_outputs());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].resize(e.output_bytes(static_cast<uint32_t>(i)));
    e.read_output(static_cast<uint32_t>(i), out[i].data(), out[i].size());
  }
  return out;
}

// Compiles `g`, loads it in checked mode (so every field and copy is verified
// to stay in bounds), writes `inputs` (in stream order), runs once and returns
// every output's bytes. The executable is handed back when asked for.
void check_host_layout(const Executable& exe);  // below

inline std::vector<std::vector<uint8_t>> run_graph(std::unique_ptr<Graph> g,
                                                   const std::vector<std::vector<uint8_t>>& inputs,
                                                   unsigned threads = 1,
                                                   std::shared_ptr<Executable>* exe_out = nullptr) {
  std::shared_ptr<Executable> exe = compile(std::move(g));
  if (exe_out) *exe_out = exe;
  EXPECT_TRUE(exe->fits());
  if (!exe->fits()) return {};
  check_host_layout(*exe);
  Engine e(exe, EngineOptions{threads, true});
  EXPECT_EQ(e.num_inputs(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) e.write_input(static_cast<uint32_t>(i), inputs[i].data(), inputs[i].size());
  e.run();
  return read_outputs(e);
}

// Runs `fn` and checks that it throws an neurenix::Error of `code` whose
// message contains every string of `needles`.
inline void expect_error_impl(const std::function<void()>& fn, ErrorCode code, std::initializer_list<std::string> needles) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_STREQ(error_code_name(e.code()), error_code_name(code)) << "message: " << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(std::string("[") + error_code_name(code) + "] ", 0), 0u) << e.what();
    for (const std::string& n : needles) EXPECT_NE(e.message().find(n), std::string::npos) << "'" << n << "' not in: " << e.message();
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-neurenix exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "no error thrown, expected " << error_code_name(code);
}

#define EXPECT_NX_ERROR(code, stmt, ...)                                                 \
  do {                                                                                   \
    SCOPED_TRACE(#stmt);                                                                 \
    ::nxtest::expect_error_impl([&]() { stmt; }, ::neurenix::ErrorCode::code, {__VA_ARGS__}); \
  } while (0)

// ---------------------------------------------------------------------------
// Independent binary16 reference: decodes with ldexp and rounds a double to
// the nearest binary16 (ties to even) with plain integer logic.

inline double ref_half_to_double(uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int exp = (h >> 10) & 0x1f;
  const int man = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(static_cast<double>(man), -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(static_cast<double>(1024 + man), exp - 25);
  return sign ? -v : v;
}

// Rounds to an integer, ties to even, without relying on the FPU mode.
inline double ref_round_even(double q) {
  double fl = std::floor(q);
  double frac = q - fl;
  if (frac > 0.5) return fl + 1;
  if (frac < 0.5) return fl;
  return std::fmod(fl, 2.0) == 0 ? fl : fl + 1;
}

// Nearest binary16 of a double. NaN maps to a quiet NaN of the same sign.
inline uint16_t ref_double_to_half(double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return static_cast<uint16_t>(sign | 0x7e00);
  double a = std::fabs(x);
  if (a >= 65520.0) return static_cast<uint16_t>(sign | 0x7c00);  // at or past the midpoint to 2^16
  if (a < std::ldexp(1.0, -14)) {
    double q = ref_round_even(a * std::ldexp(1.0, 24));  // units of 2^-24; 1024 becomes the smallest normal
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(q));
  }
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  e -= 1;             // a in [2^e, 2^(e+1))
  double q = ref_round_even(a * std::ldexp(1.0, 10 - e));  // in [1024, 2048]
  uint32_t bits = (static_cast<uint32_t>(e + 15) << 10) + (static_cast<uint32_t>(q) - 1024);
  return static_cast<uint16_t>(sign | bits);
}

inline double ref_round_half(double x) { return ref_half_to_double(ref_double_to_half(x)); }

// Distance in units in the last place between two floats (0 for equal,
// including +0/-0; large for NaN against a number).
inline int64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return (std::isnan(a) && std::isnan(b)) ? 0 : INT64_MAX;
  auto key = [](float f) -> int64_t {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : i;
  };
  int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

// Host data in a device element type, from and to doubles (binary16 through
// the reference rounding above, never through the core's converters).
inline std::vector<uint8_t> encode(DeviceType dt, const std::vector<double>& v) {
  std::vector<uint8_t> out(v.size() * device_type_size(dt));
  for (size_t i = 0; i < v.size(); ++i) {
    uint8_t* p = out.data() + i * device_type_size(dt);
    switch (dt) {
      case DeviceType::kFloat32: { float x = static_cast<float>(v[i]); std::memcpy(p, &x, 4); break; }
      case DeviceType::kFloat16: { uint16_t h = ref_double_to_half(v[i]); std::memcpy(p, &h, 2); break; }
      case DeviceType::kInt32: { int32_t x = static_cast<int32_t>(v[i]); std::memcpy(p, &x, 4); break; }
      case DeviceType::kBool: *p = v[i] != 0; break;
      default: ADD_FAILURE() << "no reference encoding for " << device_type_name(dt); break;
    }
  }
  return out;
}

inline std::vector<double> decode(DeviceType dt, const std::vector<uint8_t>& b) {
  std::vector<double> out(b.size() / device_type_size(dt));
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t* p = b.data() + i * device_type_size(dt);
    switch (dt) {
      case DeviceType::kFloat32: { float x; std::memcpy(&x, p, 4); out[i] = x; break; }
      case DeviceType::kFloat16: { uint16_t h; std::memcpy(&h, p, 2); out[i] = ref_half_to_double(h); break; }
      case DeviceType::kInt32: { int32_t x; std::memcpy(&x, p, 4); out[i] = x; break; }
      case DeviceType::kBool: out[i] = *p; break;
      default: ADD_FAILURE() << "no reference decoding for " << device_type_name(dt); break;
    }
  }
  return out;
}

// Row-major strides of a shape, in elements.
inline std::vector<int64_t> row_major_strides(const std::vector<uint64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * static_cast<int64_t>(shape[i + 1]);
  return s;
}

// Multi-index of flat element `f` in `shape`.
inline std::vector<uint64_t> unravel(uint64_t f, const std::vector<uint64_t>& shape) {
  std::vector<uint64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? f % shape[d] : 0;
    f = shape[d] ? f / shape[d] : 0;
  }
  return idx;
}

// Flat index in `in_shape` of the element that broadcasting (numpy rules)
// sends to multi-index `out_idx` of the result.
inline uint64_t broadcast_source(const std::vector<uint64_t>& out_idx, const std::vector<uint64_t>& in_shape) {
  const size_t lead = out_idx.size() - in_shape.size();
  uint64_t f = 0;
  for (size_t i = 0; i < in_shape.size(); ++i) f = f * in_shape[i] + (in_shape[i] == 1 ? 0 : out_idx[lead + i]);
  return f;
}

// Every (source, destination) tile-local element index pair a copy moves,
// in order: `outer` rows of `count` elements.
inline std::vector<std::pair<int64_t, int64_t>> copy_pairs(const Copy& c) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (uint64_t o = 0; o < c.outer; ++o)
    for (uint64_t k = 0; k < c.count; ++k)
      out.push_back({static_cast<int64_t>(c.src_local) + static_cast<int64_t>(o) * c.src_outer + static_cast<int64_t>(k) * c.src_stride,
                     static_cast<int64_t>(c.dst_local) + static_cast<int64_t>(o) * c.dst_outer + static_cast<int64_t>(k)});
  return out;
}

inline uint64_t copy_elements(const Copy& c) { return static_cast<uint64_t>(c.count) * c.outer; }

// First and last program step (of the executable's program) that touches
// each variable, derived from the steps themselves; constants live throughout.
struct LiveRange {
  int64_t first = -1;
  int64_t last = -1;
  bool overlaps(const LiveRange& o) const { return first >= 0 && o.first >= 0 && first <= o.last && o.first <= last; }
};

inline std::vector<LiveRange> live_ranges(const Executable& exe) {
  const Graph& g = exe.graph();
  std::vector<LiveRange> live(g.num_vars());
  auto touch = [&](VarId v, int64_t s) {
    if (live[v].first < 0) live[v].first = s;
    live[v].last = std::max(live[v].last, s);
  };
  const auto& prog = exe.program();
  for (int64_t s = 0; s < static_cast<int64_t>(prog.size()); ++s) {
    const Step& st = prog[s];
    switch (st.kind) {
      case StepKind::kCompute:
        for (const auto& v : g.compute_sets()[st.index].vertices)
          for (Field* f : const_cast<Vertex&>(*v).all_fields()) touch(f->var, s);
        break;
      case StepKind::kExchange:
        for (const Copy& c : g.exchanges()[st.index].copies) {
          touch(c.src, s);
          touch(c.dst, s);
        }
        break;
      case StepKind::kHostToDevice: touch(g.inputs()[st.index].tensor.var, s); break;
      case StepKind::kDeviceToHost: touch(g.outputs()[st.index].tensor.var, s); break;
    }
  }
  for (size_t v = 0; v < g.num_vars(); ++v)
    if (g.var(static_cast<VarId>(v)).kind == VarKind::kConstant) live[v] = {0, static_cast<int64_t>(prog.size())};
  return live;
}

// The host block laid out by variable (Executable::host_offset): each
// variable's shares side by side in tile order, inside the block, and no two
// variables share host bytes while both live: on the device, into the step
// after a fused exchange that reads or writes them (its tiles run the next
// step's vertices as they finish their copies), and to the last vertex that
// reads them through a receive alias. Shadowed variables, kept in the
// shadow regions, take none.
inline void check_host_layout(const Executable& exe) {
  const Graph& g = exe.graph();
  if (!exe.by_variable()) {
    // Kept tile-major (compiler.h): each share at its tile's arena offset.
    ADD_FAILURE() << "the host block is tile-major";
    return;
  }
  auto live = live_ranges(exe);
  auto touch = [&](VarId v, int64_t s) {
    if (live[v].first < 0 || s < live[v].first) live[v].first = s;
    live[v].last = std::max(live[v].last, s);
  };
  std::vector<bool> shadowed(g.num_vars(), false);
  const auto& prog = exe.program();
  for (int64_t s = 0; s < static_cast<int64_t>(prog.size()); ++s) {
    if (prog[s].kind == StepKind::kExchange && (!exe.fused(s).empty() || !exe.fused_late(s).empty()))
      for (const Copy& c : g.exchanges()[prog[s].index].copies) {
        touch(c.src, s + 1);
        touch(c.dst, s + 1);
      }
    if (prog[s].kind != StepKind::kCompute) continue;
    for (const auto& v : g.compute_sets()[prog[s].index].vertices)
      for (const Field* f : v->fields()) {
        shadowed[f->var] = shadowed[f->var] || f->shadow;
        if (f->pieces.empty() && f->alias_tile != UINT32_MAX) touch(f->alias_var, s);
        for (const Field::Piece& p : f->pieces)
          if (p.tile != UINT32_MAX) touch(p.var, s);
      }
  }
  struct Span {
    VarId var;
    uint64_t begin, end;
  };
  std::vector<Span> spans;
  for (size_t v = 0; v < g.num_vars(); ++v) {
    const Variable& var = g.var(static_cast<VarId>(v));
    if (live[v].first < 0 || shadowed[v] || var.tiles.empty()) continue;
    const uint64_t es = device_type_size(var.dtype);
    uint64_t at = exe.host_offset(static_cast<VarId>(v), 0);
    const uint64_t begin = at;
    for (size_t si = 0; si < var.tiles.size(); ++si) {
      if (si) {
        EXPECT_GT(var.tiles[si].tile, var.tiles[si - 1].tile);
      }
      EXPECT_EQ(exe.host_offset(static_cast<VarId>(v), si), at) << var.name << ": shares back to back in tile order";
      at += var.tiles[si].count * es;
    }
    EXPECT_EQ(begin % 8, 0u) << var.name << ": on an 8-byte boundary";
    EXPECT_LE(at, exe.variables_end()) << var.name;
    spans.push_back({static_cast<VarId>(v), begin, at});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < spans.size(); ++i)
    for (size_t j = i + 1; j < spans.size() && spans[j].begin < spans[i].end; ++j)
      if (spans[j].begin < spans[j].end) {
        EXPECT_FALSE(live[spans[i].var].overlaps(live[spans[j].var]))
            << "'" << g.var(spans[i].var).name << "' and '" << g.var(spans[j].var).name
            << "' share host bytes while both are live";
      }
}

}  // namespace nxtest
