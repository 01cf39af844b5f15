"""Several IPUs: outputs on 1, 2 and 4 IPUs (sharded, pipelined, replicated,
with device iterations) bit-identical in float32 and matching onnxruntime; a
model too large for one IPU runs on several with every IPU under capacity; the
automatic split against brute force over every legal contiguous split; the
estimate's pipelining and replication gains; batch arithmetic, manual plans
and bad options refused clearly; physical IPU numbers in the execution
report."""

import itertools
import re
import warnings

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from neurenix.hardware.graphcore import (
    GraphCoreManager,
    InputMismatchError,
    InvalidOptionError,
    IPUModel,
    IPUOutOfMemoryError,
    IPUPlanWarning,
)
from onnx_models import make_model, mlp, mlp_reference


def residual_net(rng, width=16, blocks=3, conv=True):
    """x [N, 2, 6, 6] -> Conv+Relu -> blocks of (MatMul, Tanh, Add skip) on
    the flattened features -> Gemm logits. Skips cross any cut."""
    nodes, inits = [], []

    def init(name, a):
        inits.append(numpy_helper.from_array(a.astype(np.float32), name))

    cur = "x"
    if conv:
        init("cw", rng.standard_normal((4, 2, 3, 3)) * 0.3)
        init("cb", rng.standard_normal(4) * 0.1)
        nodes += [
            helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], name="conv"),
            helper.make_node("Relu", ["c"], ["cr"], name="conv_relu"),
            helper.make_node("Flatten", ["cr"], ["f"], name="flatten"),
        ]
        init("pw", rng.standard_normal((144, width)) / 12)
        nodes.append(helper.make_node("MatMul", ["f", "pw"], ["h0"], name="project"))
        cur = "h0"
    for b in range(blocks):
        init(f"w{b}", rng.standard_normal((width, width)) / np.sqrt(width))
        nodes += [
            helper.make_node("MatMul", [cur, f"w{b}"], [f"m{b}"], name=f"mm{b}"),
            helper.make_node("Tanh", [f"m{b}"], [f"t{b}"], name=f"tanh{b}"),
            helper.make_node("Add", [f"t{b}", cur], [f"h{b + 1}"], name=f"skip{b}"),
        ]
        cur = f"h{b + 1}"
    init("ow", rng.standard_normal((width, 5)) / np.sqrt(width))
    init("ob", rng.standard_normal(5) * 0.1)
    nodes.append(helper.make_node("Gemm", [cur, "ow", "ob"], ["y"], name="logits"))
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 6, 6])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])
    return make_model(nodes, [x_info], [y_info], inits)


def tiny(num_ipus=4, tiles=4, bytes_per_tile=None):
    return IPUModel(num_ipus=num_ipus, tiles_per_ipu=tiles, bytes_per_tile=bytes_per_tile)


CONFIGS = [
    # num_ipus, replication_factor, device_iterations, execution
    (1, 1, 1, None),
    (1, 1, 3, None),
    (2, 1, 1, "sharded"),
    (2, 1, 2, "pipelined"),
    (4, 1, 4, "pipelined"),
    (4, 1, 1, "sharded"),
    (4, 2, 3, None),
    (4, 4, 2, None),
]


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_outputs_are_bit_identical_on_1_2_and_4_ipus(precision):
    rng = np.random.default_rng(0)
    model = residual_net(rng)
    micro = rng.standard_normal((2, 2, 6, 6)).astype(np.float32)
    with GraphCoreManager(num_ipus=1, precision=precision, ipu_model=tiny()) as ipu:
        (one,) = ipu.execute_model(ipu.compile_model(model, micro), micro)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": micro})[0]
    tol = 1e-5 if precision == "float32" else 3e-2
    np.testing.assert_allclose(one, want, rtol=tol, atol=tol)
    for n, r, d, execution in CONFIGS:
        k = r * d
        batch = np.concatenate([micro * (i + 1) for i in range(k)])
        with GraphCoreManager(num_ipus=n, replication_factor=r, device_iterations=d, execution=execution,
                              precision=precision, ipu_model=tiny()) as ipu:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", IPUPlanWarning)
                compiled = ipu.compile_model(model, micro)
            (got,) = ipu.execute_model(compiled, batch)
            # Each micro-batch alone on one IPU, for the exact reference.
        with GraphCoreManager(num_ipus=1, precision=precision, ipu_model=tiny()) as ipu1:
            c1 = ipu1.compile_model(model, micro)
            ref = np.concatenate([ipu1.execute_model(c1, micro * (i + 1))[0] for i in range(k)])
        assert got.shape == (2 * k, 5)
        assert np.array_equal(got, ref), f"{n} IPUs, R={r}, D={d}, {execution}"
        stages = {p.ipu for p in compiled.report.placement}
        assert stages == set(range(n // r)), f"{n} IPUs, R={r}: every IPU of a replica holds a stage"


def test_a_model_too_large_for_one_ipu_runs_on_two_and_four():
    rng = np.random.default_rng(3)
    model, params = mlp([64, 96, 96, 96, 96, 10], rng)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    system = tiny(tiles=4, bytes_per_tile=32768)
    with GraphCoreManager(num_ipus=1, precision="float32", ipu_model=system) as ipu:
        with pytest.raises(IPUOutOfMemoryError) as e:
            ipu.compile_model(model, x)
    # The advice names a number of IPUs, and that number does hold the model.
    advised = int(re.search(r"An estimated (\d+) IPUs per replica would hold it: num_ipus=\1", str(e.value)).group(1))
    assert "float16 or mixed precision" in str(e.value) and "smaller batch" in str(e.value)
    with GraphCoreManager(num_ipus=advised, device_iterations=advised, precision="float32", ipu_model=system,
                          compile_only=True) as ipu:
        ipu.compile_model(model, x)
    want = mlp_reference(params, x)
    for n in (2, 4):
        with GraphCoreManager(num_ipus=n, device_iterations=n, precision="float32", ipu_model=system) as ipu:
            compiled = ipu.compile_model(model, x)
            (y,) = ipu.execute_model(compiled, np.concatenate([x] * n))
        np.testing.assert_allclose(y, np.concatenate([want] * n), rtol=1e-5, atol=1e-5)
        rep = compiled.report
        per_ipu = rep.memory_per_ipu()
        assert len(per_ipu) == n
        for m in per_ipu:
            assert 0 < m["max_tile_bytes"] <= 32768, m
        assert [s.ipu for s in rep.estimate.stages] == list(range(n))


def test_no_split_fits_says_how_many_ipus_would():
    rng = np.random.default_rng(4)
    model, _ = mlp([64, 128, 128, 128, 128, 128, 10], rng)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    system = tiny(num_ipus=16, tiles=4, bytes_per_tile=24576)
    with GraphCoreManager(num_ipus=2, precision="float32", ipu_model=system) as ipu:
        with pytest.raises(IPUOutOfMemoryError) as e:
            ipu.compile_model(model, x)
    msg = str(e.value)
    assert "No split of the model over 2 IPUs fits." in msg
    advised = int(re.search(r"An estimated (\d+) IPUs per replica would hold it: num_ipus=\1", msg).group(1))
    with GraphCoreManager(num_ipus=advised, device_iterations=advised, precision="float32", ipu_model=system,
                          compile_only=True) as ipu:
        ipu.compile_model(model, x)  # the advice holds
    # One layer's weights alone (64 KiB) are more than a 4 x 16 KiB IPU: no number of IPUs helps.
    with GraphCoreManager(num_ipus=2, precision="float32", ipu_model=tiny(num_ipus=16, tiles=4, bytes_per_tile=16384),
                          compile_only=True) as ipu:
        with pytest.raises(IPUOutOfMemoryError, match="not even 16 IPUs per replica"):
            ipu.compile_model(model, x)
    with GraphCoreManager(num_ipus=2, precision="float32", ipu_model=system) as ipu:
        ipu.compile_model(mlp([4, 4], rng)[0], np.zeros((1, 4), np.float32))  # the manager stays usable


def _layered(draw_rng, n_layers, width, skip_every):
    """A chain of MatMul+Tanh layers with residual Adds, as an ONNX model,
    and the names of its nodes."""
    nodes, inits = [], []
    cur = "x"
    prev_block = "x"
    for i in range(n_layers):
        w = (draw_rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [cur, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"t{i}"], name=f"tanh{i}"))
        cur = f"t{i}"
        if skip_every and i % skip_every == skip_every - 1:
            nodes.append(helper.make_node("Add", [cur, prev_block], [f"s{i}"], name=f"skip{i}"))
            cur = f"s{i}"
            prev_block = cur
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])
    y_info = helper.make_tensor_value_info(cur, TensorProto.FLOAT, [4, width])
    return make_model(nodes, [x_info], [y_info], inits)


@settings(max_examples=12, deadline=None)
@given(
    n_layers=st.integers(2, 4),
    width=st.sampled_from([8, 24, 48]),
    skip_every=st.sampled_from([0, 2, 3]),
    stages=st.sampled_from([2, 4]),
    seed=st.integers(0, 100),
)
def test_the_automatic_split_is_within_10_percent_of_the_best_legal_split(n_layers, width, skip_every, stages,
                                                                          seed):
    model = _layered(np.random.default_rng(seed), n_layers, width, skip_every)
    x = np.zeros((4, width), np.float32)
    system = tiny(num_ipus=4, tiles=4, bytes_per_tile=65536)
    kw = dict(num_ipus=stages, device_iterations=stages, precision="float32", ipu_model=system, compile_only=True)
    with GraphCoreManager(num_ipus=1, precision="float32", ipu_model=system, compile_only=True) as ipu:
        order = [p.node for p in ipu.compile_model(model, x).report.placement]
    if len(order) < stages:
        return
    with GraphCoreManager(**kw) as ipu:
        auto = ipu.compile_model(model, x).report
    capacity = auto.bytes_per_tile
    for m in auto.memory_per_ipu():
        assert 0 < m["max_tile_bytes"] <= capacity, "every stage holds something and fits"
    best = None
    for starts in itertools.combinations(order[1:], stages - 1):
        with GraphCoreManager(sharding=list(starts), **kw) as ipu:
            rep = ipu.compile_model(model, x).report
        best = rep.interval_cycles if best is None else min(best, rep.interval_cycles)
    assert auto.interval_cycles <= 1.10 * best, (auto.interval_cycles, best, [s.nodes for s in auto.estimate.stages])


def _balanced(layers=4, width=256):
    rng = np.random.default_rng(5)
    model, _ = mlp([width] * (layers + 1), rng, softmax=False)
    return model, rng.standard_normal((16, width)).astype(np.float32)


def test_a_balanced_pipeline_on_four_ipus_has_at_least_2_5x_the_throughput_of_one():
    model, x = _balanced()
    system = IPUModel(num_ipus=8, tiles_per_ipu=64)
    kw = dict(precision="float16", ipu_model=system, compile_only=True, device_iterations=8)
    with GraphCoreManager(num_ipus=1, **kw) as ipu:
        one = ipu.compile_model(model, x).report
    with GraphCoreManager(num_ipus=4, **kw) as ipu:
        four = ipu.compile_model(model, x).report
    assert four.execution == "pipelined" and four.num_stages == 4
    gain = four.estimated_throughput / one.estimated_throughput
    assert gain >= 2.5, gain
    # The steady state is the slowest stage; the call adds the fill.
    assert four.interval_cycles == max(s.interval_cycles for s in four.estimate.stages)
    assert four.cycles_per_run == sum(s.interval_cycles for s in four.estimate.stages) + 7 * four.interval_cycles
    for r in (2, 4, 8):
        with GraphCoreManager(num_ipus=r, replication_factor=r, **kw) as ipu:
            rep = ipu.compile_model(model, x).report
        ratio = rep.estimated_throughput / one.estimated_throughput
        # Replicas share their M2000's host link: a little less than R.
        assert 0.7 * r <= ratio <= r + 1e-9, (r, ratio)


def test_sharded_execution_is_not_faster_than_one_ipu():
    model, x = _balanced()
    system = IPUModel(num_ipus=4, tiles_per_ipu=64)
    kw = dict(precision="float16", ipu_model=system, compile_only=True)
    with GraphCoreManager(num_ipus=1, **kw) as ipu:
        one = ipu.compile_model(model, x).report
    with GraphCoreManager(num_ipus=4, execution="sharded", **kw) as ipu:
        four = ipu.compile_model(model, x).report
    # One IPU at a time, plus the copies between them.
    assert four.interval_cycles == sum(s.interval_cycles for s in four.estimate.stages)
    assert four.estimated_throughput < one.estimated_throughput


def test_the_host_batch_arithmetic_is_spelled_out():
    rng = np.random.default_rng(1)
    model, _ = mlp([8, 8, 4], rng)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    with GraphCoreManager(num_ipus=4, replication_factor=2, device_iterations=5, precision="float32",
                          ipu_model=tiny()) as ipu:
        compiled = ipu.compile_model(model, x)
        assert compiled.inputs[0].shape == (30, 8) and compiled.micro_batch_inputs[0].shape == (3, 8)
        with pytest.raises(InputMismatchError) as e:
            ipu.execute_model(compiled, x)
        msg = str(e.value)
        assert "micro-batch (3, from the example inputs) x device_iterations (5) x replication_factor (2) = 30" in msg
        (y,) = ipu.execute_model(compiled, np.tile(x, (10, 1)))
        assert y.shape == (30, 4)


def test_bad_multi_ipu_options_are_refused_clearly():
    rng = np.random.default_rng(2)
    model, _ = mlp([8, 8, 8, 4], rng)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    with pytest.raises(InvalidOptionError, match="replication_factor must divide num_ipus=4"):
        GraphCoreManager(num_ipus=4, replication_factor=3, ipu_model=tiny())
    with pytest.raises(InvalidOptionError, match="device_iterations"):
        GraphCoreManager(device_iterations=0, ipu_model=tiny())
    with pytest.raises(InvalidOptionError, match="unknown execution"):
        GraphCoreManager(execution="parallel", ipu_model=tiny())
    with pytest.raises(InvalidOptionError, match="IPUs 0..1"):
        GraphCoreManager(num_ipus=2, sharding={"dense1": 2}, ipu_model=tiny())
    with pytest.raises(InvalidOptionError, match="sharding must be 'auto'"):
        GraphCoreManager(sharding="even", ipu_model=tiny())
    with GraphCoreManager(num_ipus=4, execution="pipelined", device_iterations=2, precision="float32",
                          ipu_model=tiny()) as ipu:
        with pytest.raises(InvalidOptionError, match=r"needs device_iterations >= 4 .* got 2"):
            ipu.compile_model(model, x)
    with GraphCoreManager(num_ipus=2, sharding=["nope"], precision="float32", ipu_model=tiny()) as ipu:
        with pytest.raises(InvalidOptionError, match="unknown node name.*'nope'.*'dense0'"):
            ipu.compile_model(model, x)
    with GraphCoreManager(num_ipus=2, sharding={"dense1": 1, "act0": 0}, precision="float32",
                          ipu_model=tiny()) as ipu:
        # act0 comes before dense1 in the model: naming it IPU 0 is legal.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IPUPlanWarning)
            assert [p.ipu for p in ipu.compile_model(model, x).report.placement] == [0, 0, 1, 1, 1, 1]
    with GraphCoreManager(num_ipus=2, sharding={"dense1": 1, "act1": 0}, precision="float32",
                          ipu_model=tiny()) as ipu:
        with pytest.raises(InvalidOptionError, match="not a legal cut.*'act1' on IPU 0 reads"):
            ipu.compile_model(model, x)


def test_too_few_device_iterations_run_sharded_with_a_warning():
    rng = np.random.default_rng(2)
    model, params = mlp([8, 8, 8, 4], rng)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    with GraphCoreManager(num_ipus=2, precision="float32", ipu_model=tiny()) as ipu:
        with pytest.warns(IPUPlanWarning, match="needs device_iterations >= 2"):
            compiled = ipu.compile_model(model, x)
        assert compiled.report.execution == "sharded"
        np.testing.assert_allclose(ipu.execute_model(compiled, x)[0], mlp_reference(params, x), rtol=1e-5,
                                   atol=1e-6)


def test_the_execution_report_names_the_physical_ipus():
    rng = np.random.default_rng(8)
    model, _ = mlp([8, 16, 16, 4], rng)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    # Device 5 of a 4-IPU system is the pair of IPUs 2 and 3.
    with GraphCoreManager(num_ipus=2, device_id=5, device_iterations=2, precision="float32",
                          ipu_model=tiny()) as ipu:
        compiled = ipu.compile_model(model, x)
        ipu.execute_model(compiled, np.concatenate([x, x]))
        run = ipu.last_execution_report
    assert {p.ipu for p in compiled.report.placement} == {0, 1}, "the compile report speaks of the replica's IPUs"
    assert run.ipus == [2, 3]
    assert "on IPUs 2, 3" in str(run)


def test_plans_that_use_fewer_ipus_pipeline_over_the_stages_they_use():
    rng = np.random.default_rng(9)
    model, params = mlp([8, 8, 8, 4], rng)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    # Two stages on a 4-IPU replica: two device iterations fill that pipeline.
    with GraphCoreManager(num_ipus=4, device_iterations=2, sharding={"dense1": 1}, precision="float32",
                          ipu_model=tiny()) as ipu:
        with pytest.warns(IPUPlanWarning, match="uses 2 of the replica's 4 IPUs"):
            compiled = ipu.compile_model(model, x)
        assert compiled.report.execution == "pipelined" and compiled.report.num_stages == 2
        (y,) = ipu.execute_model(compiled, np.concatenate([x, x]))
    np.testing.assert_allclose(y, np.concatenate([mlp_reference(params, x)] * 2), rtol=1e-5, atol=1e-6)
    with GraphCoreManager(num_ipus=4, sharding={"dense1": 2}, precision="float32", ipu_model=tiny()) as ipu:
        with pytest.raises(InvalidOptionError, match="IPU 1 would hold no node"):
            ipu.compile_model(model, x)


def test_an_output_also_read_by_a_later_stage_is_streamed_and_carried():
    rng = np.random.default_rng(10)
    w1 = (rng.standard_normal((8, 8)) / 3).astype(np.float32)
    w2 = (rng.standard_normal((8, 4)) / 3).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
        helper.make_node("Tanh", ["m1"], ["hidden"], name="tanh1"),
        helper.make_node("MatMul", ["hidden", "w2"], ["m2"], name="mm2"),
        helper.make_node("Tanh", ["m2"], ["pooled"], name="tanh2"),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [2, 8]),
         helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    x = rng.standard_normal((2, 8)).astype(np.float32)
    with GraphCoreManager(num_ipus=2, device_iterations=2, sharding=["mm2"], precision="float32",
                          ipu_model=tiny()) as ipu:
        compiled = ipu.compile_model(model, x)
        hidden, pooled = ipu.execute_model(compiled, np.concatenate([x, x]))
    h = np.tanh(x @ w1)
    np.testing.assert_allclose(hidden, np.concatenate([h, h]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pooled, np.concatenate([np.tanh(h @ w2)] * 2), rtol=1e-5, atol=1e-6)
    s0, s1 = compiled.report.estimate.stages
    # Stage 0 streams x in and `hidden` out to the host; stage 1 receives
    # `hidden` over the IPU-Links and streams `pooled` out.
    assert [c.name for c in s1.carried_in] == ["hidden"] and s1.copy_cycles > 0
    host_steps = [(s.ipu, s.kind, s.name) for s in compiled.report.steps if s.kind != "compute" and s.kind != "exchange"]
    assert (0, "device_to_host", "device->host hidden") in host_steps
    assert not any("carried" in name for _, _, name in host_steps), "carried tensors are not host transfers"


def test_sharding_plans_of_the_wrong_type_are_refused(monkeypatch):
    from neurenix.hardware.graphcore import InvalidOptionTypeError
    from neurenix.hardware.graphcore.options import options_from_env

    with pytest.raises(InvalidOptionTypeError, match="names the nodes at which stages begin"):
        GraphCoreManager(num_ipus=2, sharding=["dense1", 3], ipu_model=tiny())
    with pytest.raises(InvalidOptionTypeError, match="maps node names"):
        GraphCoreManager(num_ipus=2, sharding={1: 1}, ipu_model=tiny())
    with pytest.raises(InvalidOptionTypeError, match="IPUs are integers"):
        GraphCoreManager(num_ipus=2, sharding={"dense1": "1"}, ipu_model=tiny())
    with pytest.raises(InvalidOptionError, match="names a node twice"):
        GraphCoreManager(num_ipus=4, sharding=["dense1", "dense1"], ipu_model=tiny())
    with pytest.raises(InvalidOptionTypeError, match="sharding must be"):
        GraphCoreManager(num_ipus=2, sharding=3, ipu_model=tiny())
    with pytest.raises(InvalidOptionTypeError, match="replication_factor must be an integer"):
        GraphCoreManager(num_ipus=2, replication_factor=2.0, ipu_model=tiny())
    # The environment sets the new options too, validated the same way.
    monkeypatch.setenv("NEURENIX_REPLICATION_FACTOR", "2")
    monkeypatch.setenv("NEURENIX_DEVICE_ITERATIONS", "3")
    monkeypatch.setenv("NEURENIX_EXECUTION", "sharded")
    opts = options_from_env()
    assert (opts["replication_factor"], opts["device_iterations"], opts["execution"]) == (2, 3, "sharded")
    m = GraphCoreManager(num_ipus=2, ipu_model=tiny(), **{k: opts[k] for k in ("replication_factor",
                                                                              "device_iterations", "execution")})
    assert (m.replication_factor, m.device_iterations, m.execution) == (2, 3, "sharded")
    monkeypatch.setenv("NEURENIX_DEVICE_ITERATIONS", "three")
    with pytest.raises(InvalidOptionError, match="NEURENIX_DEVICE_ITERATIONS"):
        options_from_env()
