"""Every kind of bad input gets its specific error, says what and where, and
leaves the manager usable."""

import math

import numpy as np

import neurenix._native
import onnx
import pytest
from onnx import TensorProto, helper

from neurenix.hardware.graphcore import (
    DeviceNotAttachedError,
    GraphCoreManager,
    IncompatibleExecutableError,
    InputMismatchError,
    InvalidOptionError,
    InvalidOptionTypeError,
    IPUError,
    IPUModel,
    ModelFormatError,
    UnsupportedOperatorError,
    get_graphcore_manager,
)
from onnx_models import make_model, mlp, mlp_reference


def tiny(**kw):
    kw.setdefault("num_ipus", 4)
    kw.setdefault("tiles_per_ipu", 2)
    return IPUModel(**kw)


@pytest.fixture
def good():
    rng = np.random.default_rng(0)
    model, params = mlp([5, 4, 3], rng)
    x = rng.standard_normal((2, 5)).astype(np.float32)
    return model, params, x


def still_works(ipu, good):
    model, params, x = good
    (y,) = ipu.execute_model(ipu.compile_model(model, x), x)
    np.testing.assert_allclose(y, mlp_reference(params, x), atol=2e-2)


# -- options ----------------------------------------------------------------------

@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"num_ipus": 3}, InvalidOptionError, ["power of two", "3"]),
        ({"num_ipus": 0}, InvalidOptionError, ["power of two"]),
        ({"num_ipus": 8}, InvalidOptionError, ["only 4"]),
        ({"num_ipus": "2"}, InvalidOptionTypeError, ["num_ipus", "integer"]),
        ({"num_ipus": 2.0}, InvalidOptionTypeError, ["num_ipus"]),
        ({"num_ipus": True}, InvalidOptionTypeError, ["num_ipus"]),
        ({"precision": "bfloat16"}, InvalidOptionError, ["bfloat16", "float32", "float16", "mixed"]),
        ({"precision": 16}, InvalidOptionTypeError, ["precision"]),
        ({"memory_proportion": 0}, InvalidOptionError, ["(0, 1]"]),
        ({"memory_proportion": 1.5}, InvalidOptionError, ["(0, 1]"]),
        ({"memory_proportion": -0.1}, InvalidOptionError, ["(0, 1]"]),
        ({"memory_proportion": math.nan}, InvalidOptionError, ["(0, 1]"]),
        ({"memory_proportion": "0.5"}, InvalidOptionTypeError, ["memory_proportion", "number"]),
        ({"memory_proportion": None}, InvalidOptionTypeError, ["memory_proportion"]),
        ({"enable_half_partials": "yes"}, InvalidOptionTypeError, ["enable_half_partials"]),
        ({"compile_only": 1}, InvalidOptionTypeError, ["compile_only"]),
        ({"device_id": -1}, InvalidOptionError, ["device_id"]),
        ({"device_id": "0"}, InvalidOptionTypeError, ["device_id"]),
        ({"device_id": 99}, InvalidOptionError, ["99", "does not exist"]),
        ({"device_id": 4, "num_ipus": 1}, InvalidOptionError, ["group of 2", "num_ipus=1"]),
        ({"ipu_model": "version=ipu2"}, InvalidOptionTypeError, ["IPUModel"]),
        ({"attach_timeout": 0}, InvalidOptionError, ["attach_timeout"]),
        ({"simulator_threads": 0}, InvalidOptionTypeError, ["simulator_threads"]),
    ],
)
def test_invalid_options_are_rejected_by_name(kwargs, error, words):
    kwargs.setdefault("ipu_model", tiny())
    with pytest.raises(error) as e:
        GraphCoreManager(**kwargs)
    for w in words:
        assert w in str(e.value)
    assert isinstance(e.value, ValueError)
    assert isinstance(e.value, IPUError)
    if error is InvalidOptionTypeError:
        assert isinstance(e.value, TypeError)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"version": "ipu9"}, ["ipu9", "ipu2"]),
        ({"tiles_per_ipu": 5000}, ["tiles_per_ipu", "1472"]),
        ({"tiles_per_ipu": 0}, ["tiles_per_ipu"]),
        ({"bytes_per_tile": 10}, ["bytes_per_tile"]),
        ({"num_ipus": "4"}, ["num_ipus"]),
    ],
)
def test_invalid_ipu_models(kwargs, words):
    with pytest.raises(InvalidOptionError) as e:
        IPUModel(**kwargs)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize(
    "spec, bad",
    [("version=ipu2,tiles=4", "tiles"), ("num_ipus=four", "num_ipus"), ("version:ipu2", "version:ipu2"),
     ("version=mk3", "mk3"), ("bytes_per_tile=12", "bytes_per_tile")],
)
def test_malformed_environment_model_names_the_bad_key(monkeypatch, spec, bad):
    monkeypatch.setenv("NEURENIX_IPU_MODEL", spec)
    with pytest.raises(InvalidOptionError) as e:
        GraphCoreManager()
    assert "NEURENIX_IPU_MODEL" in str(e.value) and bad in str(e.value)


def test_environment_model_is_used(monkeypatch):
    monkeypatch.setenv("NEURENIX_IPU_MODEL", "version=bow, num_ipus=2, tiles_per_ipu=3")
    m = GraphCoreManager(compile_only=True)
    info = m.get_ipu_info()
    assert len(info) == 2 and info[0]["version"] == "bow" and info[0]["tiles"] == 3
    assert info[0]["clock_hz"] == pytest.approx(1.85e9)


# -- models -----------------------------------------------------------------------

def test_malformed_models(tmp_path, good):
    with GraphCoreManager(ipu_model=tiny()) as ipu:
        x = good[2]
        with pytest.raises(ModelFormatError, match="not a serialized ONNX model"):
            ipu.compile_model(b"\x08\x07garbage\xff\xff", x)
        with pytest.raises(ModelFormatError, match="does not exist"):
            ipu.compile_model(str(tmp_path / "missing.onnx"), x)
        with pytest.raises(ModelFormatError, match="directory"):
            ipu.compile_model(str(tmp_path), x)
        with pytest.raises(InvalidOptionTypeError, match="ModelProto"):
            ipu.compile_model(42, x)
        bad = make_model([helper.make_node("Relu", ["x"], ["y"])],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        bad.graph.node[0].input[0] = "nowhere"
        with pytest.raises(ModelFormatError, match="nowhere"):
            ipu.compile_model(bad, np.zeros(2, np.float32))
        still_works(ipu, good)


def _big_weight_model():
    """x @ w with a 32x32 weight: large enough that the ONNX checker sees it
    as an empty stand-in and the import checks its data."""
    w = onnx.numpy_helper.from_array(np.ones((32, 32), np.float32), "w")
    return make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32])], [w])


def _truncate(t):
    t.raw_data = t.raw_data[:-4]


def _two_fields(t):
    t.float_data.append(1.0)


def _no_values(t):
    t.ClearField("raw_data")


def _no_type(t):
    t.data_type = TensorProto.UNDEFINED


def _undefined_input(m):
    m.graph.node[0].input[0] = "nowhere"


@pytest.mark.parametrize("break_it, words", [
    (lambda m: _truncate(m.graph.initializer[0]), ["'w'", "4092 bytes", "4096"]),
    (lambda m: _two_fields(m.graph.initializer[0]), ["'w'", "exactly one field", "float_data", "raw_data"]),
    (lambda m: _no_values(m.graph.initializer[0]), ["'w'", "exactly one field", "uses 0"]),
    (lambda m: _no_type(m.graph.initializer[0]), ["'w'", "no element type"]),
    (_undefined_input, ["nowhere"]),
])
def test_malformed_large_initializers_and_graphs_around_them(good, break_it, words):
    x = np.ones((2, 32), np.float32)
    with GraphCoreManager(ipu_model=tiny()) as ipu:
        model = _big_weight_model()
        (y,) = ipu.execute_model(ipu.compile_model(model, x), x)
        np.testing.assert_allclose(y, np.full((2, 32), 32.0, np.float32))
        break_it(model)
        with pytest.raises(ModelFormatError) as e:
            ipu.compile_model(model, x)
        for w in words:
            assert w in str(e.value)
        still_works(ipu, good)


def test_unsupported_operator_names_op_node_opset_and_alternatives(good):
    model = make_model(
        [helper.make_node("Relu", ["x"], ["r"], name="first"),
         helper.make_node("Hardmax", ["r"], ["y"], name="the_hardmax"),
         ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        opset=13,
    )
    with GraphCoreManager(ipu_model=tiny()) as ipu:
        with pytest.raises(UnsupportedOperatorError) as e:
            ipu.compile_model(model, np.zeros((2, 3), np.float32))
        err = e.value
        assert err.op_type == "Hardmax" and err.node == "the_hardmax" and err.opset == 13
        assert "Relu" in err.supported and "MatMul" in err.supported
        msg = str(err)
        assert "Hardmax" in msg and "the_hardmax" in msg and "opset 13" in msg and "Supported operators" in msg
        assert isinstance(err, NotImplementedError)
        still_works(ipu, good)


def test_custom_domain_operators_are_unsupported():
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("FusedGemm", ["x", "x"], ["y"], domain="com.microsoft", name="fg")],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
        ),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    with GraphCoreManager(ipu_model=tiny()) as ipu:
        with pytest.raises(UnsupportedOperatorError) as e:
            ipu.compile_model(model, np.zeros((2, 2), np.float32))
        assert e.value.domain == "com.microsoft" and e.value.op_type == "FusedGemm"


@pytest.mark.parametrize("beyond", [1, 71])
def test_operator_sets_newer_than_implemented_are_refused_with_the_range(good, beyond):
    version = neurenix._native.supported_opsets()[1] + beyond
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        opset=version,
    )
    first, last = neurenix._native.supported_opsets()
    with GraphCoreManager(ipu_model=tiny()) as ipu:
        with pytest.raises(UnsupportedOperatorError) as e:
            ipu.compile_model(model, np.zeros(2, np.float32))
        assert e.value.opset == version and e.value.domain == "ai.onnx"
        assert f"operator set {version}" in str(e.value) and f"{first} to {last}" in str(e.value)
        still_works(ipu, good)


def test_unnamed_nodes_are_named_by_operator_and_position():
    model = make_model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"], name="Relu_0x")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    with GraphCoreManager(ipu_model=tiny()) as ipu:
        compiled = ipu.compile_model(model, np.zeros(2, np.float32))
        assert [p.node for p in compiled.report.placement] == ["Relu_0", "Relu_0x"]


# -- inputs -----------------------------------------------------------------------

def test_wrong_inputs_at_compile_time(good):
    model, _, x = good
    with GraphCoreManager(ipu_model=tiny()) as ipu:
        cases = [
            (x.astype(np.int32), ["'x'", "float32", "int32"]),
            (x[:, :4], ["'x'", "dimension 1 is 4, not 5"]),
            (x[None], ["'x'", "rank 3"]),
            ({"y": x}, ["unknown input", "'y'", "'x'"]),
            ({}, ["missing", "'x'"]),
            ([x, x], ["1 input", "2 were given"]),
            ("text", ["'x'", "array"]),
        ]
        for given_inputs, words in cases:
            with pytest.raises(InputMismatchError) as e:
                ipu.compile_model(model, given_inputs)
            for w in words:
                assert w in str(e.value), (w, str(e.value))
            assert e.value.input_name in ("x", "y", "")
        with pytest.raises(InputMismatchError, match="dynamic shape"):
            ipu.compile_model(model)
        still_works(ipu, good)


def test_wrong_inputs_at_execution_time(good):
    model, _, x = good
    with GraphCoreManager(ipu_model=tiny()) as ipu:
        compiled = ipu.compile_model(model, x)
        with pytest.raises(InputMismatchError, match=r"'x' must be float32, got int32.*astype"):
            ipu.execute_model(compiled, x.astype(np.int32))
        with pytest.raises(InputMismatchError, match=r"shape \[2, 5\] \(as compiled\), got \[3, 5\]"):
            ipu.execute_model(compiled, np.zeros((3, 5), np.float32))
        with pytest.raises(InputMismatchError, match="unknown input"):
            ipu.execute_model(compiled, {"z": x})
        with pytest.raises(InvalidOptionTypeError, match="CompiledModel"):
            ipu.execute_model(model, x)
        # Python lists take the model's type.
        (y,) = ipu.execute_model(compiled, x.tolist())
        assert y.shape == (2, 3)
        still_works(ipu, good)


def test_symbolic_dimensions_must_bind_consistently():
    model = make_model(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
    )
    with GraphCoreManager(ipu_model=tiny()) as ipu:
        with pytest.raises(InputMismatchError, match="'n' is 4 here but 2"):
            ipu.compile_model(model, [np.zeros((2, 3), np.float32), np.zeros((4, 3), np.float32)])


def test_int64_inputs_outside_int32_are_refused():
    model = make_model(
        [helper.make_node("Add", ["a", "a"], ["y"])],
        [helper.make_tensor_value_info("a", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [3])],
    )
    a = np.array([1, 2, 3], np.int64)
    with GraphCoreManager(ipu_model=tiny()) as ipu:
        compiled = ipu.compile_model(model, a)
        (y,) = ipu.execute_model(compiled, a)
        assert y.dtype == np.int64 and list(y) == [2, 4, 6]
        with pytest.raises(InputMismatchError, match=r"'a' element 1 is 8589934592.*int32"):
            ipu.execute_model(compiled, np.array([1, 2**33, 3], np.int64))
        (y,) = ipu.execute_model(compiled, np.array([-5, 0, 5], np.int64))
        assert list(y) == [-10, 0, 10]


def test_float64_data_for_float32_inputs_is_cast_within_range(good):
    model, _, x = good
    with GraphCoreManager(ipu_model=tiny()) as ipu:
        # A float64 example compiles the model for its declared float32.
        compiled = ipu.compile_model(model, x.astype(np.float64))
        assert compiled.inputs[0].dtype == "float32"
        (want,) = ipu.execute_model(compiled, x)
        (got,) = ipu.execute_model(compiled, x.astype(np.float64))
        np.testing.assert_array_equal(got, want)
        # inf and nan are float32 values too; finite values beyond its range are not.
        special = x.astype(np.float64)
        special[0, 0], special[1, 1] = np.inf, np.nan
        ipu.execute_model(compiled, special)
        big = x.astype(np.float64)
        big[1, 2] = 1e39
        with pytest.raises(InputMismatchError, match=r"'x' is float64 and element 7 is 1e\+39, beyond float32's range") as e:
            ipu.execute_model(compiled, big)
        assert e.value.input_name == "x"
        still_works(ipu, good)


def test_int32_data_for_int64_inputs_is_widened():
    model = make_model(
        [helper.make_node("Add", ["a", "a"], ["y"])],
        [helper.make_tensor_value_info("a", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [3])],
    )
    with GraphCoreManager(ipu_model=tiny()) as ipu:
        compiled = ipu.compile_model(model, np.array([1, 2, 3], np.int32))
        assert compiled.inputs[0].dtype == "int64"
        (y,) = ipu.execute_model(compiled, np.array([-7, 0, 2**29], np.int32))
        assert y.dtype == np.int64 and list(y) == [-14, 0, 2**30]


# -- states -----------------------------------------------------------------------

def test_compile_only_compiles_but_refuses_to_execute(good):
    model, _, x = good
    ipu = GraphCoreManager(compile_only=True, ipu_model=tiny())
    with ipu:
        compiled = ipu.compile_model(model, x)
        assert compiled.report.cycles_per_run > 0
        assert all(i["status"] == "free" for i in ipu.get_ipu_info())
        with pytest.raises(DeviceNotAttachedError, match="compile_only=True"):
            ipu.execute_model(compiled, x)


def test_finalized_manager_refuses_until_initialized_again(good):
    model, params, x = good
    ipu = GraphCoreManager(ipu_model=tiny())
    compiled = ipu.compile_model(model, x)
    ipu.execute_model(compiled, x)  # attaches on first use
    assert ipu.is_initialized
    ipu.finalize()
    with pytest.raises(DeviceNotAttachedError, match="initialize"):
        ipu.execute_model(compiled, x)
    ipu.initialize()
    (y,) = ipu.execute_model(compiled, x)
    np.testing.assert_allclose(y, mlp_reference(params, x), atol=2e-2)
    ipu.finalize()


def test_models_compiled_for_another_system_are_refused(good):
    model, _, x = good
    with GraphCoreManager(ipu_model=tiny()) as a, GraphCoreManager(ipu_model=tiny(tiles_per_ipu=3)) as b:
        compiled = a.compile_model(model, x)
        with pytest.raises(IncompatibleExecutableError, match="compile it with this manager"):
            b.execute_model(compiled, x)
        still_works(b, good)


def test_default_manager_from_environment_is_shared_across_threads(monkeypatch):
    import threading

    from neurenix.hardware.graphcore import manager as manager_module

    monkeypatch.setattr(manager_module, "_default_manager", None)
    monkeypatch.setenv("NEURENIX_IPU_MODEL", "version=ipu21,num_ipus=2,tiles_per_ipu=2")
    monkeypatch.setenv("NEURENIX_PRECISION", "mixed")
    monkeypatch.setenv("NEURENIX_MEMORY_PROPORTION", "0.3")
    monkeypatch.setenv("NEURENIX_HALF_PARTIALS", "false")
    monkeypatch.setenv("NEURENIX_NUM_IPUS", "2")
    seen = []
    barrier = threading.Barrier(8)

    def grab():
        barrier.wait()
        seen.append(get_graphcore_manager())

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(m is seen[0] for m in seen)
    m = seen[0]
    assert (m.num_ipus, m.precision, m.memory_proportion, m.enable_half_partials) == (2, "mixed", 0.3, False)
    assert m.get_ipu_info()[0]["version"] == "ipu21"
    monkeypatch.setattr(manager_module, "_default_manager", None)
    monkeypatch.setenv("NEURENIX_MEMORY_PROPORTION", "lots")
    with pytest.raises(InvalidOptionError, match="NEURENIX_MEMORY_PROPORTION"):
        get_graphcore_manager()
    monkeypatch.setattr(manager_module, "_default_manager", None)
