"""The command line, neurenix-ipu: its commands, their output, exit statuses,
and one-line errors for every kind of bad input."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_models import make_model, mlp, mlp_reference

from neurenix import _native
from neurenix.hardware.graphcore import IPUModel, cli, find_max_batch, find_min_ipus

TINY = "version=ipu2,num_ipus=2,tiles_per_ipu=4"


def run_cli(*args):
    """Runs the command line in this process: (exit status, stdout, stderr)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in args])
        except SystemExit as e:  # argparse's errors
            code = e.code
    return code, out.getvalue(), err.getvalue()


def one_line_error(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("neurenix-ipu: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def small(tmp_path):
    """A 8 -> 16 -> 4 perceptron with a dynamic batch, and its parameters."""
    model, params = mlp([8, 16, 4], np.random.default_rng(0))
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    return path, params


def big_mlp(tmp_path):
    """Activations that outgrow a 4-tile IPU at a large batch."""
    model, _ = mlp([64, 256, 256, 10], np.random.default_rng(1))
    path = tmp_path / "big.onnx"
    onnx.save(model, path)
    return path, model


def fixed_batch_model(tmp_path, batch=2):
    """x [batch, 4, 3] -> Reshape [batch, 12] (a constant target) -> MatMul W [12, 5] -> y."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((12, 5)).astype(np.float32)
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["flat"]), helper.make_node("MatMul", ["flat", "W"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 5])],
        [numpy_helper.from_array(np.array([batch, 12], dtype=np.int64), "shape"), numpy_helper.from_array(w, "W")],
    )
    path = tmp_path / "fixed.onnx"
    onnx.save(model, path)
    return path, w


# -- the installed entry point ------------------------------------------------------------


def test_module_entry_point_runs_and_fails_cleanly(small, tmp_path):
    path, _ = small
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    cmd = [sys.executable, "-m", "neurenix.hardware.graphcore"]
    r = subprocess.run(cmd + ["run", str(path), "--input", "x=2,8", "--ipu-model", TINY, "--precision", "float32"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "output y: float32[2, 4]" in r.stdout and "cycles" in r.stdout
    r = subprocess.run(cmd + ["compile", str(tmp_path / "missing.onnx")], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert "does not exist" in one_line_error(r.stderr)


# -- info -----------------------------------------------------------------------------------


def test_info_describes_the_system_and_every_version():
    code, out, err = run_cli("info", "--ipu-model", "version=ipu1,num_ipus=2")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Simulated system: 2 x ipu1")
    assert "IPUs 0-1: free" in out
    for version in ("ipu1", "ipu2", "bow", "ipu21"):
        t = _native.describe_system(f"version={version}")
        (row,) = [ln for ln in lines if ln.startswith(version + " ")]
        cells = row.split()
        for expected in (f"{t.tiles_per_ipu:,}", f"{t.bytes_per_tile:,}", f"{t.clock_hz / 1e9:.2f}",
                         str(t.fp16_flops_per_cycle), str(t.fp32_flops_per_cycle), str(t.ipu_links)):
            assert expected in cells, (version, expected, row)
        assert t.chip in row
    code, out, _ = run_cli("info", "--ipu-version", "bow", "--ipu-model", TINY)
    assert code == 0 and out.startswith("Simulated system: 2 x bow") and "4 tiles" in out


# -- compile ----------------------------------------------------------------------------------


def test_compile_reports_fit_memory_and_estimates(small):
    path, _ = small
    code, out, err = run_cli("compile", path, "--batch", 4, "--ipu-model", TINY, "--ipu-version", "bow")
    assert code == 0, err
    assert out.startswith("Fits: yes, on 1 x bow") and "busiest tile" in out
    assert "Estimated: latency" in out and "samples/s" in out
    assert "Target: 1 x bow" in out  # the compile report follows


def test_compile_out_of_memory_prints_the_diagnosis_and_exits_1(tmp_path):
    path, _ = big_mlp(tmp_path)
    code, out, err = run_cli("compile", path, "--batch", 2048, "--ipu-model", TINY, "--precision", "float32")
    assert code == 1
    assert out.startswith("Fits: no") and "Out of memory on IPU 0 tile" in out and "largest on this tile" in out
    assert "the model does not fit" in one_line_error(err)


def test_compile_only_plans_for_more_ipus_than_the_system_has(small):
    path, _ = small
    code, out, err = run_cli("compile", path, "--batch", 2, "--ipu-model", TINY, "--num-ipus", 8, "--precision",
                             "float32")
    assert code == 0, err
    assert "Target: 8 x ipu2" in out
    code, _, err = run_cli("run", path, "--batch", 2, "--ipu-model", TINY, "--num-ipus", 8)
    assert code == 2 and "only 2 IPU(s)" in one_line_error(err)


def test_max_batch_and_min_ipus_print_the_searches(tmp_path):
    path, model = big_mlp(tmp_path)
    system = IPUModel.from_spec(TINY)
    code, out, err = run_cli("compile", path, "--max-batch", "--ipu-model", TINY, "--precision", "float32")
    assert code == 0, err
    expected = find_max_batch(model, np.zeros((1, 64), np.float32), ipu_model=system, precision="float32")
    assert out.splitlines()[0].startswith(f"Largest batch that fits: {expected.largest} ")
    assert len(out.strip().splitlines()) == 2 + len(expected.rows)

    wide, _ = mlp([128, 512, 512, 512, 512, 10], np.random.default_rng(3))
    onnx.save(wide, tmp_path / "wide.onnx")
    code, out, err = run_cli("compile", tmp_path / "wide.onnx", "--min-ipus", "--max-ipus", 8, "--batch", 4,
                             "--ipu-model", TINY, "--precision", "float32")
    assert code == 0, err
    expected = find_min_ipus(wide, np.zeros((4, 128), np.float32), max_ipus=8, ipu_model=system,
                             precision="float32")
    assert expected.smallest is not None and expected.smallest > 1
    assert out.splitlines()[0].startswith(f"Fewest IPUs that fit: {expected.smallest} ")


# -- run --------------------------------------------------------------------------------------


def test_run_writes_outputs_that_match_numpy(small, tmp_path):
    path, params = small
    x = np.random.default_rng(5).standard_normal((5, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    out_path = tmp_path / "out.npz"
    code, out, err = run_cli("run", path, "--inputs", tmp_path / "in.npz", "--output", out_path, "--ipu-model", TINY,
                             "--precision", "float32")
    assert code == 0, err
    assert "input x: float32[5, 8] from file" in out and "Run:" in out
    with np.load(out_path) as f:
        assert list(f.files) == ["y"]
        y = f["y"]
    np.testing.assert_allclose(y, mlp_reference(params, x), rtol=1e-4, atol=1e-5)

    np.save(tmp_path / "x.npy", x)
    code, _, err = run_cli("run", path, "--input-file", f"x={tmp_path / 'x.npy'}", "--output", tmp_path / "again",
                           "--ipu-model", TINY, "--precision", "float32")
    assert code == 0, err
    with np.load(tmp_path / "again.npz") as f:
        np.testing.assert_array_equal(f["y"], y)


def test_run_reads_bfloat16_inputs_from_npz_files(tmp_path):
    """numpy keeps ml_dtypes arrays in .npz files as raw bytes: they are read
    as the model's bfloat16 again, and random inputs are random floats."""
    import ml_dtypes

    g = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 3])])
    path = tmp_path / "bf16.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), path)
    x = np.array([[1.5, -2.25, 3.0], [0.0, 100.5, -1e-3]], ml_dtypes.bfloat16)
    np.savez(tmp_path / "in.npz", x=x)
    code, out, err = run_cli("run", path, "--inputs", tmp_path / "in.npz", "--output", tmp_path / "out.npz",
                             "--ipu-model", TINY)
    assert code == 0, err
    assert "input x: bfloat16[2, 3] from file" in out and "output y: bfloat16[2, 3]" in out
    with np.load(tmp_path / "out.npz") as f:
        np.testing.assert_array_equal(f["y"].view(ml_dtypes.bfloat16).astype(np.float32), -x.astype(np.float32))
    code, out, err = run_cli("run", path, "--ipu-model", TINY)
    assert code == 0 and "input x: bfloat16[2, 3] random" in out, err


def test_run_random_inputs_are_seeded(small, tmp_path):
    path, _ = small
    outs = []
    for seed in (7, 7, 8):
        code, out, err = run_cli("run", path, "--batch", 3, "--seed", seed, "--output", tmp_path / f"o{len(outs)}.npz",
                                 "--ipu-model", TINY)
        assert code == 0, err
        assert f"input x: float32[3, 8] random (seed {seed})" in out
        with np.load(tmp_path / f"o{len(outs)}.npz") as f:
            outs.append(f["y"])
    np.testing.assert_array_equal(outs[0], outs[1])
    assert not np.array_equal(outs[0], outs[2])


def test_batch_rewrites_a_fixed_batch_model(tmp_path):
    path, w = fixed_batch_model(tmp_path, batch=2)
    x = np.random.default_rng(6).standard_normal((6, 4, 3)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    code, out, err = run_cli("run", path, "--batch", 6, "--inputs", tmp_path / "in.npz", "--output",
                             tmp_path / "out.npz", "--ipu-model", TINY, "--precision", "float32")
    assert code == 0, err
    with np.load(tmp_path / "out.npz") as f:
        np.testing.assert_allclose(f["y"], x.reshape(6, 12) @ w, rtol=1e-4, atol=1e-5)
    # Without --batch the model keeps its own.
    code, _, err = run_cli("run", path, "--inputs", tmp_path / "in.npz", "--ipu-model", TINY)
    assert code == 2 and "InputMismatchError" in one_line_error(err)


def test_run_with_device_iterations_and_replicas(small, tmp_path):
    path, params = small
    x = np.random.default_rng(9).standard_normal((8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    code, out, err = run_cli("run", path, "--inputs", tmp_path / "in.npz", "--device-iterations", 2,
                             "--replication-factor", 2, "--num-ipus", 2, "--output", tmp_path / "out.npz",
                             "--ipu-model", TINY, "--precision", "float32")
    assert code == 0, err
    assert "micro-batch of 2" in out
    with np.load(tmp_path / "out.npz") as f:
        np.testing.assert_allclose(f["y"], mlp_reference(params, x), rtol=1e-4, atol=1e-5)


def test_report_dir(small, tmp_path):
    path, _ = small
    code, out, err = run_cli("run", path, "--batch", 2, "--ipu-model", TINY, "--report-dir", tmp_path / "rep")
    assert code == 0, err
    listed = [ln.strip() for ln in out.split(f"Report files in {tmp_path / 'rep'}:", 1)[1].splitlines() if ln.strip()]
    names = {os.path.basename(p) for p in listed}
    assert {"report.html", "report.json"} <= names
    assert all(os.path.isfile(p) for p in listed)
    with open(tmp_path / "rep" / "report.json") as f:
        json.load(f)
    code, out, err = run_cli("compile", path, "--batch", 2, "--ipu-model", TINY, "--report-dir", tmp_path / "rep2")
    assert code == 0, err
    assert os.path.isfile(tmp_path / "rep2" / "report.html")


# -- bad input: one line on stderr, status 2 -------------------------------------------------------


def _bad_cases(tmp_path, model_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n")
    np.savez(tmp_path / "unknown.npz", z=np.zeros((2, 8), np.float32))
    np.savez(tmp_path / "wrong.npz", x=np.zeros((2, 9), np.float32))
    return {
        "missing model": (["compile", tmp_path / "nope.onnx"], "does not exist"),
        "not onnx": (["compile", text, "--batch", 2], "not a readable ONNX model"),
        "missing npz": (["run", model_path, "--inputs", tmp_path / "nope.npz"], "no such file"),
        "bad npz": (["run", model_path, "--inputs", text], "not a numpy"),
        "npz is npy": (["run", model_path, "--input-file", f"x={text}"], "not a numpy"),
        "unknown input in npz": (["run", model_path, "--inputs", tmp_path / "unknown.npz"], "'z'"),
        "unknown --input": (["compile", model_path, "--input", "q=2,8"], "'q'"),
        "wrong shape": (["run", model_path, "--inputs", tmp_path / "wrong.npz"], "InputMismatchError"),
        "bad dims": (["compile", model_path, "--input", "x=2,b"], "integers"),
        "bad dtype": (["compile", model_path, "--input", "x=2,8:float99"], "float99"),
        "dynamic shape": (["compile", model_path], "dynamic shape"),
        "memory proportion": (["compile", model_path, "--batch", 2, "--memory-proportion", 1.5], "memory_proportion"),
        "num ipus": (["compile", model_path, "--batch", 2, "--num-ipus", 3], "power of two"),
        "replication": (["compile", model_path, "--batch", 2, "--replication-factor", 3], "replication_factor"),
        "ipu model": (["compile", model_path, "--batch", 2, "--ipu-model", "version=ipu2,tiles=3"], "tiles"),
        "precision (argparse)": (["compile", model_path, "--precision", "float4"], "--precision"),
        "float8 off ipu21": (["compile", model_path, "--batch", 2, "--precision", "float8"], "only the ipu21"),
        "version (argparse)": (["compile", model_path, "--ipu-version", "ipu9"], "--ipu-version"),
        "batch (argparse)": (["compile", model_path, "--batch", 0], "--batch"),
        "no command": ([], "required"),
    }


@pytest.mark.parametrize("case", [
    "missing model", "not onnx", "missing npz", "bad npz", "npz is npy", "unknown input in npz", "unknown --input",
    "wrong shape", "bad dims", "bad dtype", "dynamic shape", "memory proportion", "num ipus", "replication",
    "ipu model", "precision (argparse)", "float8 off ipu21", "version (argparse)", "batch (argparse)", "no command",
])
def test_bad_input_is_one_line_and_status_2(case, small, tmp_path):
    path, _ = small
    args, needle = _bad_cases(tmp_path, path)[case]
    code, out, err = run_cli(*args)
    assert code == 2, (out, err)
    assert needle in one_line_error(err)
