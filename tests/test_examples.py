"""Every script in examples/ runs on the simulator."""

import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script, tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.setdefault("NEURENIX_IPU_MODEL", "version=ipu2,num_ipus=4,tiles_per_ipu=64")
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert r.stdout.strip()


def test_there_are_examples():
    assert any(p.name == "quickstart.py" for p in EXAMPLES)


def test_cli_compiles_and_runs(tmp_path):
    import numpy as np
    import onnx

    from onnx_models import mlp

    model, _ = mlp([8, 4], np.random.default_rng(0))
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    cmd = [sys.executable, "-m", "neurenix.hardware.graphcore"]
    spec = "version=ipu2,num_ipus=1,tiles_per_ipu=4"
    r = subprocess.run(cmd + ["run", str(path), "--input", "x=2,8", "--ipu-model", spec, "--precision", "float32"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "output y: float32[2, 4]" in r.stdout and "cycles per run" in r.stdout
    r = subprocess.run(cmd + ["compile", str(path), "--ipu-model", spec], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0 and "dynamic shape" in r.stderr
    r = subprocess.run(cmd + ["info", "--ipu-model", "version=ipu1,num_ipus=2"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.count("GC2 (Mk1)") == 2
