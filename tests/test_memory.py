"""Tile memory: successful compiles fit every tile, models that do not fit
fail naming each overflowing tile, memory_proportion really changes the
matmul plans, and num_ipus really spreads a model over IPUs."""

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel, IPUOutOfMemoryError
from onnx_models import mlp, mlp_reference


@given(
    widths=st.lists(st.integers(1, 96), min_size=2, max_size=4),
    batch=st.integers(1, 16),
    tiles=st.integers(1, 6),
    bytes_per_tile=st.sampled_from([1024, 2048, 4096, 8192, 65536]),
    precision=st.sampled_from(["float32", "float16"]),
    seed=st.integers(0, 1000),
)
def test_compiles_fit_every_tile_or_fail_naming_the_tiles(widths, batch, tiles, bytes_per_tile, precision, seed):
    rng = np.random.default_rng(seed)
    model, params = mlp(widths, rng, softmax=False)
    x = rng.standard_normal((batch, widths[0])).astype(np.float32)
    system = IPUModel(num_ipus=1, tiles_per_ipu=tiles, bytes_per_tile=bytes_per_tile)
    with GraphCoreManager(precision=precision, ipu_model=system) as ipu:
        try:
            compiled = ipu.compile_model(model, x)
        except IPUOutOfMemoryError as e:
            if e.tensor is not None:
                # One tensor alone is larger than the IPU: refused before planning.
                assert not e.tiles and e.tensor.capacity == tiles * bytes_per_tile < e.tensor.bytes
                assert f"'{e.tensor.name}'" in str(e) and f"{e.tensor.bytes:,} bytes" in str(e)
                return
            assert e.tiles, "an out-of-memory error names at least one tile or the tensor"
            for t in e.tiles:
                assert t.used > t.capacity == bytes_per_tile and 0 <= t.tile < tiles and t.ipu == 0
                assert f"Out of memory on IPU 0 tile {t.tile}: {t.used:,} bytes used" in str(e)
            # Lower bound: even without temporaries the weights alone must
            # exceed the memory, or tiles hold at least one too-big piece.
            return
        rep = compiled.report
        assert rep.max_tile_memory <= bytes_per_tile
        assert all(t.total <= bytes_per_tile for t in rep.tiles)
        # All the weights are somewhere on the chip.
        weight_bytes = sum(p.size for p in params) * (4 if precision == "float32" else 2)
        assert sum(t.variables for t in rep.tiles) >= weight_bytes
        (y,) = ipu.execute_model(compiled, x)
        tol = 1e-4 if precision == "float32" else 5e-2 * max(1, np.abs(mlp_reference(params, x, softmax=False)).max())
        np.testing.assert_allclose(y, mlp_reference(params, x, softmax=False), atol=tol, rtol=1e-4)


def test_the_same_model_fits_big_tiles_and_overflows_small_ones():
    rng = np.random.default_rng(2)
    model, _ = mlp([64, 256, 64], rng)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    with GraphCoreManager(precision="float32", ipu_model=IPUModel(num_ipus=1, tiles_per_ipu=4)) as ipu:
        rep = ipu.compile_model(model, x).report
        assert rep.max_tile_memory <= 638976
    small = IPUModel(num_ipus=1, tiles_per_ipu=4, bytes_per_tile=8192)
    with GraphCoreManager(precision="float32", ipu_model=small) as ipu:
        with pytest.raises(IPUOutOfMemoryError) as e:
            ipu.compile_model(model, x)
        msg = str(e.value)
        lines = re.findall(r"Out of memory on IPU 0 tile (\d+): ([\d,]+) bytes used but tiles only have 8,192 bytes of memory",
                           msg)
        assert len(lines) == len(e.value.tiles) >= 1
        assert "largest on this tile" in msg and any("W" in n for t in e.value.tiles for n, _ in t.largest)
        assert isinstance(e.value, MemoryError)
        # Still usable: a small model fits.
        tiny_model, params = mlp([4, 4], rng)
        xs = np.ones((1, 4), np.float32)
        (y,) = ipu.execute_model(ipu.compile_model(tiny_model, xs), xs)
        np.testing.assert_allclose(y, mlp_reference(params, xs), rtol=1e-5, atol=1e-6)


def _plans(report):
    return {o.name: o for o in report.plans if o.kind == "matmul"}


def test_memory_proportion_changes_the_plan():
    rng = np.random.default_rng(4)
    model, params = mlp([512, 1024, 256], rng, softmax=False)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    system = IPUModel(num_ipus=1, tiles_per_ipu=16)
    reports, outputs = {}, {}
    for p in (1.0, 0.6, 0.15, 0.05):
        with GraphCoreManager(precision="float32", memory_proportion=p, ipu_model=system) as ipu:
            compiled = ipu.compile_model(model, x)
            reports[p] = compiled.report
            outputs[p] = ipu.execute_model(compiled, x)[0]
    budget = {p: p * 638976 for p in reports}
    for p, rep in reports.items():
        for o in _plans(rep).values():
            if "above the memory target" not in o.plan:
                assert o.temp_bytes_per_tile <= budget[p]
        np.testing.assert_allclose(outputs[p], mlp_reference(params, x, softmax=False), rtol=1e-4, atol=1e-4)
    big = _plans(reports[1.0])["dense0"]
    small = _plans(reports[0.05])["dense0"]
    assert small.plan != big.plan
    assert small.temp_bytes_per_tile < big.temp_bytes_per_tile
    # Less memory costs time: more serial passes or more exchange.
    assert small.estimated_cycles >= big.estimated_cycles
    assert reports[0.05].cycles_per_run >= reports[1.0].cycles_per_run


def test_unreachable_memory_target_warns_and_uses_the_smallest_plan():
    # The weight matrix (1 MiB) cannot live on one tile, so every plan needs
    # some temporaries: none meets a target of 0.1% of a tile.
    rng = np.random.default_rng(5)
    model, params = mlp([256, 1024], rng, softmax=False)
    x = rng.standard_normal((32, 256)).astype(np.float32)
    with GraphCoreManager(precision="float32", memory_proportion=0.001,
                          ipu_model=IPUModel(num_ipus=1, tiles_per_ipu=4)) as ipu:
        compiled = ipu.compile_model(model, x)
        (y,) = ipu.execute_model(compiled, x)
    rep = compiled.report
    assert any("no plan keeps temporaries under 0.001" in w for w in rep.warnings)
    assert "above the memory target" in _plans(rep)["dense0"].plan
    assert "Warning:" in str(rep)
    np.testing.assert_allclose(y, mlp_reference(params, x, softmax=False), rtol=1e-4, atol=1e-4)
    # It is the leanest plan: a looser target is allowed more temporaries.
    with GraphCoreManager(precision="float32", memory_proportion=1.0, compile_only=True,
                          ipu_model=IPUModel(num_ipus=1, tiles_per_ipu=4)) as ipu:
        loose = _plans(ipu.compile_model(model, x).report)["dense0"]
    assert _plans(rep)["dense0"].temp_bytes_per_tile <= loose.temp_bytes_per_tile


def test_num_ipus_spreads_the_model_over_the_ipus():
    rng = np.random.default_rng(6)
    model, params = mlp([32, 64, 64, 64, 64, 64, 64, 10], rng)
    x = rng.standard_normal((4, 32)).astype(np.float32)
    system = IPUModel(num_ipus=4, tiles_per_ipu=4)
    with GraphCoreManager(num_ipus=4, precision="float32", ipu_model=system) as ipu:
        assert ipu.device["ipus"] == [0, 1, 2, 3]
        compiled = ipu.compile_model(model, x)
        (y,) = ipu.execute_model(compiled, x)
    rep = compiled.report
    ipus_used = [ipu_idx for _, _, ipu_idx in rep.placement]
    assert sorted(set(ipus_used)) == [0, 1, 2, 3]
    assert ipus_used == sorted(ipus_used), "stages follow the model's order"
    assert all(m["tiles_used"] > 0 for m in rep.memory_per_ipu())
    # Every stage after the first receives the activations over the IPU-Links.
    stages = rep.estimate.stages
    assert [s.ipu for s in stages] == [0, 1, 2, 3]
    assert not stages[0].carried_in
    for s in stages[1:]:
        assert s.carried_in and all(c.from_ipu < s.ipu for c in s.carried_in)
        assert s.copy_cycles > 0
    np.testing.assert_allclose(y, mlp_reference(params, x), rtol=1e-5, atol=1e-5)
    # Each IPU holds only its stage's weights: less than the whole model.
    weights = sum(p.nbytes for p in params)
    for m in rep.memory_per_ipu():
        assert m["total_bytes"] < weights


def test_one_ipu_holds_what_four_ipus_share():
    rng = np.random.default_rng(7)
    model, _ = mlp([64, 256, 256, 256, 64], rng)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    system = IPUModel(num_ipus=4, tiles_per_ipu=4, bytes_per_tile=131072)
    with GraphCoreManager(num_ipus=1, precision="float32", ipu_model=system) as ipu:
        with pytest.raises(IPUOutOfMemoryError):
            ipu.compile_model(model, x)
    with GraphCoreManager(num_ipus=4, precision="float32", ipu_model=system) as ipu:
        rep = ipu.compile_model(model, x).report
        assert rep.max_tile_memory <= 131072
