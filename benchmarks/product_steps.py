"""One matrix product on one full simulated `ipu2`, and the host time of each
step of its run: what the product's operand A costs when the product lays
it out itself (A is a model input) against when an element-wise result
brings it in its own layout (`--before relu`, `--before layernorm`), and
what an element-wise operand added to the result costs (`--add bias`: a
[N] bias repeated over the rows; `--add scalar`).

    python benchmarks/product_steps.py [--m 128] [--k 256] [--n 1024]
        [--before none|relu|layernorm] [--add none|bias|scalar] [--runs 200]

Prints, for every step, the median host time over `--runs` runs (the
report's step times, `last_execution.step_seconds`), the estimated cycles
and the exchange's busiest-tile terms (bytes and copy descriptors).
"""

from __future__ import annotations

import argparse

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel


def product_model(m, k, n, before, add, rng):
    inits = [numpy_helper.from_array((rng.standard_normal((k, n)) * 0.05).astype(np.float32), "W")]
    nodes, a = [], "x"
    if before == "relu":
        nodes.append(helper.make_node("Relu", ["x"], ["h"]))
        a = "h"
    elif before == "layernorm":
        inits += [numpy_helper.from_array(np.ones(k, np.float32), "scale"),
                  numpy_helper.from_array(np.zeros(k, np.float32), "shift")]
        nodes.append(helper.make_node("LayerNormalization", ["x", "scale", "shift"], ["h"], axis=-1))
        a = "h"
    nodes.append(helper.make_node("MatMul", [a, "W"], ["y"]))
    out = "y"
    if add != "none":
        shape = (n,) if add == "bias" else (1,)
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), "b"))
        nodes += [helper.make_node("Add", ["y", "b"], ["z"]), helper.make_node("Relu", ["z"], ["r"])]
        out = "r"
    graph = helper.make_graph(nodes, "product", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, m, k])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, m, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=int, default=128)
    p.add_argument("--k", type=int, default=256)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--before", choices=["none", "relu", "layernorm"], default="none")
    p.add_argument("--add", choices=["none", "bias", "scalar"], default="none")
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    model = product_model(a.m, a.k, a.n, a.before, a.add, rng)
    feeds = {"x": rng.standard_normal((1, a.m, a.k)).astype(np.float32)}
    with GraphCoreManager(num_ipus=1, precision="float32", ipu_model=IPUModel.from_spec("version=ipu2,num_ipus=1"),
                          simulator_threads=a.threads) as ipu:
        compiled = ipu.compile_model(model, feeds)
        for _ in range(3):
            ipu.execute_model(compiled, feeds)
        runs = []
        for _ in range(a.runs):
            ipu.execute_model(compiled, feeds)
            runs.append(compiled.last_execution.step_seconds)
        seconds = np.median(np.array(runs), axis=0) * 1e6
        print(f"[{a.m}, {a.k}] x [{a.k}, {a.n}], before: {a.before}, add: {a.add}; medians of {a.runs} runs")
        for step, us in zip(compiled.report.steps, seconds):
            terms = "; ".join(t.name for t in step.terms)
            print(f"{us:9.1f} us  {step.kind:<15} {step.cycles:6d} cycles  {step.name}  ({terms})")


if __name__ == "__main__":
    main()
