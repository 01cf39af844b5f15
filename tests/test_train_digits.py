"""examples/train_digits.py: a small CNN trained on scikit-learn's digits on
the simulated IPU reaches at least 95% test accuracy in float32, and mixed
precision (half compute, float32 master weights, static loss scaling) lands
within one point of it."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))

from train_digits import train  # noqa: E402


def test_the_digits_cnn_learns_in_float32_and_in_mixed_precision(monkeypatch):
    monkeypatch.setenv("NEURENIX_IPU_MODEL", "version=ipu2,num_ipus=1,tiles_per_ipu=64")
    acc32, curve32, step32 = train("float32", epochs=15, verbose=False)
    acc_mixed, curve_mixed, _ = train("mixed", epochs=15, verbose=False)
    assert acc32 >= 0.95, acc32
    assert abs(acc_mixed - acc32) <= 0.01, (acc32, acc_mixed)
    # The loss falls: the last epoch's mean is a small fraction of the first's.
    assert curve32[-1] < 0.1 * curve32[0], curve32
    assert curve_mixed[-1] < 0.1 * curve_mixed[0], curve_mixed
    assert step32 > 0
