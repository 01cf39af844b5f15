"""The simulation's host time by step (``ExecutionReport.step_seconds``) and
by ONNX node (``host_seconds_per_layer``): aligned with the compile report's
steps on one IPU, sharded, pipelined, replicated and in training (with one
and two replicas, each replica's tile memory counted once); the heavy node of
a model is where the time goes."""

import dataclasses
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel, IPUPlanWarning, losses, optim
from neurenix.hardware.graphcore.report import ExecutionReport
from onnx_models import make_model, mlp


def heavy_first(rng, width=256, wide=4096):
    """x [N, width] -> MatMul [width, wide] (nearly all of the work) ->
    ReduceSum over the features -> Tanh -> Add 1 (on [N, 1])."""
    w = (rng.standard_normal((width, wide)) / np.sqrt(width)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"], name="heavy"),
        helper.make_node("ReduceSum", ["m", "axes"], ["r"], keepdims=1, name="total"),
        helper.make_node("Tanh", ["r"], ["t"], name="squash"),
        helper.make_node("Add", ["t", "one"], ["y"], name="shift"),
    ]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array([1], np.int64), "axes"),
             numpy_helper.from_array(np.ones(1, np.float32), "one")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])
    return make_model(nodes, [x], [y], inits)


def check_aligned(run: ExecutionReport, report, one_program: bool) -> None:
    """Each kind's steps add up to that kind's host time: an entry moved to
    another step (exchanges and compute sets alternate) would break it."""
    assert len(run.step_seconds) == len(report.steps)
    assert all(t >= 0 for t in run.step_seconds)
    by_kind = {}
    for s, t in zip(report.steps, run.step_seconds):
        by_kind[s.kind] = by_kind.get(s.kind, 0.0) + t
    assert by_kind.get("compute", 0.0) == pytest.approx(run.compute_seconds, rel=1e-9, abs=1e-12)
    assert by_kind.get("exchange", 0.0) == pytest.approx(run.exchange_seconds, rel=1e-9, abs=1e-12)
    host = by_kind.get("host_to_device", 0.0) + by_kind.get("device_to_host", 0.0)
    # Carried tensors' streams count in host_io_seconds but are no report step.
    assert host <= run.host_io_seconds * (1 + 1e-9) + 1e-12
    assert run.compute_seconds > 0
    if one_program:  # (replicas and pipeline stages run side by side)
        assert sum(run.step_seconds) <= run.wall_seconds * (1 + 1e-9) + 1e-12


CONFIGS = [
    # num_ipus, replication_factor, device_iterations, execution
    (1, 1, 1, None),
    (2, 1, 2, "pipelined"),
    (2, 1, 1, "sharded"),
    (4, 2, 2, "pipelined"),
]


@pytest.mark.parametrize("n,r,d,execution", CONFIGS)
def test_host_time_by_step_is_aligned_with_the_reports_steps(n, r, d, execution):
    rng = np.random.default_rng(3)
    model = heavy_first(rng)
    micro = rng.standard_normal((16, 256)).astype(np.float32)
    with GraphCoreManager(num_ipus=n, replication_factor=r, device_iterations=d, execution=execution,
                          precision="float32", ipu_model=IPUModel(num_ipus=4, tiles_per_ipu=32)) as ipu:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IPUPlanWarning)
            compiled = ipu.compile_model(model, micro)
        runs = []
        for _ in range(5):  # the first also touches fresh tile memory
            ipu.execute_model(compiled, np.concatenate([micro] * (r * d)))
            runs.append(compiled.last_execution)
    for run in runs:
        check_aligned(run, compiled.report, one_program=n == 1)
    # Each step's fastest time, untouched by the host's other work.
    run = dataclasses.replace(runs[-1], step_seconds=[min(t) for t in zip(*(x.step_seconds for x in runs[1:]))])
    layers = run.host_seconds_per_layer(compiled.report)
    assert [e["node"] for e in layers][0] == "heavy", layers
    assert layers[0]["op_type"] == "MatMul"
    assert layers[0]["seconds"] == pytest.approx(sum(layers[0]["by_kind"].values()))
    assert layers[0]["steps"] == sum(1 for s in compiled.report.steps if s.node == "heavy")
    assert layers[0]["seconds"] > 2 * layers[1]["seconds"], layers
    # Every IPU that holds a stage did work, and its steps say so.
    for ipu_index in {p.ipu for p in compiled.report.placement}:
        assert sum(t for s, t in zip(compiled.report.steps, run.step_seconds)
                   if s.ipu == ipu_index and s.kind == "compute") > 0


def test_a_report_of_another_model_is_refused():
    rng = np.random.default_rng(5)
    small, _ = mlp([8, 4], rng)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    tiny = IPUModel(num_ipus=1, tiles_per_ipu=16)
    with GraphCoreManager(precision="float32", ipu_model=tiny) as ipu:
        a = ipu.compile_model(small, x)
        b = ipu.compile_model(heavy_first(rng), rng.standard_normal((4, 256)).astype(np.float32))
        ipu.execute_model(a, x)
        with pytest.raises(ValueError, match="pass the report of the model that ran"):
            a.last_execution.host_seconds_per_layer(b.report)


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_training_call_adds_its_micro_batches_host_time_step_by_step(replicas):
    rng = np.random.default_rng(6)
    model, _ = mlp([8, 16, 4], rng, softmax=False)
    model.graph.output[0].name = model.graph.node[-1].output[0]
    x = rng.standard_normal((4, 8)).astype(np.float32)
    labels = rng.integers(0, 4, size=4).astype(np.int64)
    memory = {}
    for r in sorted({1, replicas}):
        with GraphCoreManager(num_ipus=r, replication_factor=r, precision="float32", gradient_accumulation=2,
                              ipu_model=IPUModel(num_ipus=2, tiles_per_ipu=4)) as ipu:
            t = ipu.compile_model(model, {"x": x, "labels": labels},
                                  loss=losses.CrossEntropy(model.graph.output[0].name), optimizer=optim.SGD(lr=0.1))
            ipu.execute_model(t, {"x": np.concatenate([x] * 2 * r), "labels": np.concatenate([labels] * 2 * r)})
            run = ipu.last_execution_report
        check_aligned(run, t.report, one_program=False)
        memory[r] = run.host_memory_bytes
    # Every replica's tile memory, once (the step's update runs in the same);
    # a replicated step's program (in two segments) is a few bytes off the
    # single replica's.
    assert memory[replicas] == pytest.approx(replicas * memory[1], rel=0.05)


def test_combined_runs_add_host_time_step_by_step():
    def run(times):
        return ExecutionReport(cycles=1, compute_cycles=1, exchange_cycles=0, host_cycles=0, steps=3,
                               exchanged_bytes=0, host_bytes=0, wall_seconds=sum(times), host_memory_bytes=0,
                               clock_hz=1.0, step_seconds=list(times))

    both = ExecutionReport.combined([run([1.0, 0.0, 2.5]), run([0.5, 0.25, 0.0])])
    assert both.step_seconds == [1.5, 0.25, 2.5]
    assert both.to_dict()["step_seconds"] == [1.5, 0.25, 2.5]
    with pytest.raises(ValueError, match="different programs"):
        ExecutionReport.combined([run([1.0, 0.0, 2.5]), run([0.5, 0.25])])
