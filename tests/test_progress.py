"""Compile progress: the native compile reports its stages in order, and a
progress bar appears on a terminal only, and only for compiles that take a
while."""

import io

import numpy as np
import pytest

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel
from neurenix.hardware.graphcore import manager as manager_module
from neurenix.hardware.graphcore import progress
from onnx_models import mlp


class _Recorder:
    events = []

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def __call__(self, stage, done, total):
        _Recorder.events.append((stage, done, total))


def test_the_compile_reports_every_stage_in_order(monkeypatch):
    _Recorder.events = []
    monkeypatch.setattr(manager_module, "CompileProgress", _Recorder)
    model, _ = mlp([16, 32, 8], np.random.default_rng(0))
    feeds = {"x": np.zeros((4, 16), np.float32)}
    with GraphCoreManager(num_ipus=2, compile_only=True, device_iterations=2,
                          ipu_model=IPUModel(num_ipus=2, tiles_per_ipu=8)) as ipu:
        ipu.compile_model(model, feeds)
    stages = []
    for stage, done, total in _Recorder.events:
        assert 0 <= done <= total
        if not stages or stages[-1] != stage:
            stages.append(stage)
    # Two stages over two IPUs: planning chooses the split, and each stage is
    # lowered and allocated.
    assert stages[:3] == ["import", "passes", "planning"]
    assert set(stages) == set(progress.STAGES)
    lowered = [e for e in _Recorder.events if e[0] == "lowering" and e[1] == e[2]]
    assert lowered, "lowering never reported completion"
    assert ("allocation", 2, 2) in _Recorder.events


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_bar_is_drawn_on_a_terminal_after_the_delay_only():
    term = _Terminal()
    with progress.CompileProgress("m", stream=term, delay=0.0) as p:
        p("lowering", 3, 10)
        p("allocation", 1, 1)
    assert "compiling m: lowering" in term.getvalue()
    assert "compiling m: allocation" in term.getvalue()

    quick = _Terminal()
    with progress.CompileProgress("m", stream=quick, delay=60.0) as p:
        p("lowering", 3, 10)
    assert quick.getvalue() == ""


def test_no_bar_when_not_a_terminal_or_silenced(monkeypatch):
    pipe = io.StringIO()
    with progress.CompileProgress("m", stream=pipe, delay=0.0) as p:
        p("lowering", 3, 10)
    assert pipe.getvalue() == ""
    monkeypatch.setenv("NEURENIX_PROGRESS", "0")
    assert not progress.enabled(_Terminal())


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_failing_progress_callback_does_not_fail_the_compile():
    from neurenix import _native
    from neurenix.hardware.graphcore import onnx_import

    def broken(stage, done, total):
        raise RuntimeError("listener failed")

    model, _ = mlp([4, 3], np.random.default_rng(0))
    native = onnx_import.to_native(model)
    spec = _native.TensorSpec("x", "float32", [2, 4])
    exe = _native.compile(native, [spec], "version=ipu2,num_ipus=1,tiles_per_ipu=4", 1, "float32", 0.6, False,
                          progress=broken)
    assert exe.cycles_per_run > 0
