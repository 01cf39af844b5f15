// Benchmark of one convolution vertex's compute, everything hot in the
// caches: the cost of the small vertices a model spread over a chip's tiles
// is made of. The shapes are those of float16 SqueezeNet's most frequent
// tile shares (8 or 24 output channels a tile, one to three output rows;
// 1x1 windows read as half rows, 3x3 windows widened into padded planes),
// float16 operands, half partials, a float16 output with a bias. For each:
// the best of seven timings of 20,000 calls, and the product's 16-lane
// multiply-adds (its columns, the output rows each with the kernel's
// width - 1 columns of padding, in whole 16-lane vectors, for every output
// channel and every step of its depth), and the time a call over them.
//
//   cmake -S cpp -B build/cpp && cmake --build build/cpp --target neurenix_conv_vertex_bench
//   build/cpp/neurenix_conv_vertex_bench
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "neurenix/codelets/conv.h"
#include "neurenix/half.h"

using namespace neurenix;

namespace {

struct VertexShape {
  uint32_t cin, cout, rows, width, kernel;  // `rows` output rows `width` wide, a kernel x kernel window
};

Field field_at(uint64_t byte, uint64_t count) {
  Field f(0, 0, 0, count);
  f.byte_offset = byte;
  f.address = static_cast<int64_t>(byte);
  return f;
}

}  // namespace

int main() {
  const VertexShape shapes[] = {{16, 8, 1, 13, 1}, {24, 8, 1, 13, 1}, {40, 8, 1, 13, 1}, {16, 8, 1, 55, 1},
                                {104, 24, 2, 13, 1}, {8, 8, 3, 13, 3}, {8, 8, 1, 55, 3}, {8, 8, 2, 13, 3}};
  std::printf("%-28s %10s %14s %10s\n", "cin x cout x rows x width, k", "ns a call", "16-lane FMAs", "ns an FMA");
  std::mt19937 rng(1);
  for (const VertexShape& sh : shapes) {
    ConvWindow s;
    const uint32_t pad = sh.kernel / 2;
    s.cin = sh.cin;
    s.cout = sh.cout;
    s.in_w = sh.width;
    s.in_h = 64;
    s.in_rows = sh.rows + sh.kernel - 1;  // the output rows' window, from input row ho0 - pad = 0
    s.hi0 = 0;
    s.ho0 = pad;
    s.rows = sh.rows;
    s.out_w = sh.width;
    s.kh = s.kw = sh.kernel;
    s.pad_top = s.pad_left = static_cast<int32_t>(pad);
    s.ldw = sh.cin * sh.kernel * sh.kernel;
    s.ld_out = sh.rows * sh.width;
    const uint64_t in_n = static_cast<uint64_t>(s.cin) * s.in_rows * s.in_w, w_n = static_cast<uint64_t>(s.cout) * s.ldw;
    const uint64_t out_n = static_cast<uint64_t>(s.cout) * s.ld_out;
    // Fields one after another, 64 bytes apart.
    auto next = [](uint64_t at, uint64_t count) { return (at + 2 * count + 64 + 63) / 64 * 64; };
    const uint64_t w_at = next(0, in_n), out_at = next(w_at, w_n), b_at = next(out_at, out_n), end = next(b_at, s.cout);
    std::vector<uint8_t> mem(end);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (uint64_t i = 0; i + 1 < end; i += 2) {
      const half_bits h = float_to_half(value(rng));
      std::memcpy(&mem[i], &h, 2);
    }
    ConvVertex v(0, field_at(0, in_n), field_at(w_at, w_n), field_at(out_at, out_n), s, DeviceType::kFloat16,
                 DeviceType::kFloat16, DeviceType::kFloat16);
    v.set_bias(field_at(b_at, s.cout), DeviceType::kFloat16);
    constexpr int kCalls = 20000;
    double best = 1e30;
    for (int t = 0; t < 7; ++t) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls; ++i) v.compute(mem.data());
      best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kCalls);
    }
    // The product's columns: the output rows, each with its padding
    // (width + kernel - 1), in whole 16-lane vectors; its depth cin x
    // kernel x kernel.
    const uint64_t vectors = (static_cast<uint64_t>(sh.rows) * (sh.width + sh.kernel - 1) + 15) / 16;
    const uint64_t fmas = static_cast<uint64_t>(sh.cout) * vectors * s.ldw;
    char name[64];
    std::snprintf(name, sizeof name, "%u x %u x %u x %u, %ux%u", sh.cin, sh.cout, sh.rows, sh.width, sh.kernel,
                  sh.kernel);
    std::printf("%-28s %10.0f %14llu %10.2f\n", name, best, static_cast<unsigned long long>(fmas),
                best / static_cast<double>(fmas));
  }
  return 0;
}
