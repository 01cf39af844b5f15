"""benchmarks/bench_models.py refuses counts below 1 and unknown or missing
models before it measures anything, with argparse's usage error (exit 2)
naming the argument."""

import importlib.util
import pathlib

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _bench_models(monkeypatch):
    monkeypatch.syspath_prepend(str(_ROOT / "benchmarks"))  # its sibling modules
    spec = importlib.util.spec_from_file_location("bench_models_cli", _ROOT / "benchmarks" / "bench_models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("argv, says", [
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--repeat", "0"], "--repeat must be at least 1"),
    (["--threads", "-1"], "--threads must be at least 1"),
    (["--models"], "--models needs at least one model"),
    (["--models", "no-such-model"], "unknown model(s) ['no-such-model']"),
])
def test_bad_arguments_are_refused_before_measuring(argv, says, capsys, monkeypatch):
    mod = _bench_models(monkeypatch)
    # Measuring the machine would mean the arguments were accepted.
    monkeypatch.setattr(mod, "measure_machine", lambda threads: pytest.fail("measured with bad arguments"))
    with pytest.raises(SystemExit) as exit_info:
        mod.main(argv)
    assert exit_info.value.code == 2
    assert says in capsys.readouterr().err
