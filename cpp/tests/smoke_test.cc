#include <gtest/gtest.h>

#include <random>

#include "neurenix/compiler.h"
#include "neurenix/engine.h"
#include "neurenix/ops.h"

using namespace neurenix;

TEST(Smoke, MatMulRelu) {
  SystemSpec spec = parse_system_spec("version=ipu2,num_ipus=1,tiles_per_ipu=4");
  auto g = std::make_unique<Graph>(spec, 1);
  const uint64_t M = 5, K = 7, N = 3;
  Tensor x = g->add_variable("x", DType::kFloat32, {1, M, K}, VarKind::kInput, 0);
  std::vector<float> w(K * N);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& v : w) v = nd(rng);
  auto bytes = std::make_shared<std::vector<uint8_t>>(reinterpret_cast<uint8_t*>(w.data()),
                                                      reinterpret_cast<uint8_t*>(w.data()) + w.size() * 4);
  Tensor wt = g->add_constant("w", DType::kFloat32, {1, K, N}, 0, bytes);
  g->add_input_stream("x", x);
  ops::MatMulOptions mo;
  Tensor y = ops::matmul(*g, x, wt, mo);
  Tensor r = ops::map(*g, {{ExprOpCode::kInput, 0}, {ExprOpCode::kRelu}}, {y}, DType::kFloat32, y.shape, 0, "relu");
  g->add_output_stream("y", r);
  std::shared_ptr<Executable> exe = compile(std::move(g));
  ASSERT_TRUE(exe->fits());
  Engine e(exe, 2);
  std::vector<float> xin(M * K);
  for (auto& v : xin) v = nd(rng);
  e.write_input(0, reinterpret_cast<uint8_t*>(xin.data()), xin.size() * 4);
  e.run();
  std::vector<float> out(M * N);
  e.read_output(0, reinterpret_cast<uint8_t*>(out.data()), out.size() * 4);
  for (uint64_t i = 0; i < M; ++i)
    for (uint64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (uint64_t k = 0; k < K; ++k) acc += xin[i * K + k] * w[k * N + j];
      EXPECT_NEAR(out[i * N + j], acc > 0 ? acc : 0, 1e-5);
    }
  EXPECT_GT(e.last_run().cycles, 0u);
}
