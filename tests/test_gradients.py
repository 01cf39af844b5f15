"""Every gradient rule against central finite differences in float64.

For one operator with random small shapes and attributes, the model's inputs
are trainable initializers and the loss is ``sum(op(...) * R)`` for a fixed
random R; the device's gradients (``gradient_outputs``, computed in float32)
are compared with finite differences of the same model evaluated in float64
by onnx's reference evaluator.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel, optim
from neurenix.hardware.graphcore.errors import UnsupportedOperatorError

TINY = IPUModel(num_ipus=1, tiles_per_ipu=4)


def op_model(op, inputs, out_shape, attrs, dtype, extra_inits=()):
    """loss = ReduceSum(op(inputs...) * R); inputs are initializers. Extra
    initializers named ``arg...`` are further inputs of the op (``arg0...``:
    in front of the trained ones)."""
    np_dtype = np.float64 if dtype == TensorProto.DOUBLE else np.float32
    inits = [numpy_helper.from_array(a.astype(np_dtype), n) for n, a in inputs]
    inits += [numpy_helper.from_array(a, n) for n, a in extra_inits]
    rng = np.random.default_rng(len(out_shape) * 7 + sum(out_shape))
    r = rng.standard_normal(out_shape).astype(np_dtype)
    inits.append(numpy_helper.from_array(r, "R"))
    front = [n for n, _ in extra_inits if n.startswith("arg0")]
    names = front + [n for n, _ in inputs] + [n for n, _ in extra_inits if n.startswith("arg") and n not in front]
    nodes = [
        helper.make_node(op, names, ["y"], name="op", **attrs),
        helper.make_node("Mul", ["y", "R"], ["yr"]),
        helper.make_node("ReduceSum", ["yr"], ["loss"], keepdims=0),
    ]
    g = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("loss", dtype, [])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20 if op == "Gelu" else 17)])


def device_gradients(op, inputs, out_shape, attrs, extra_inits=()):
    model = op_model(op, inputs, out_shape, attrs, TensorProto.FLOAT, extra_inits)
    names = [n for n, _ in inputs]
    with GraphCoreManager(precision="float32", ipu_model=TINY) as ipu:
        t = ipu.compile_model(model, {}, loss="loss", optimizer=optim.SGD(lr=0.0), gradient_outputs=names,
                              trainable=names)
        outs = ipu.execute_model(t, {})
    got = dict(zip([o.name for o in t.outputs], outs))
    return {n: got[f"{n}.grad"] for n in names}


def fd_gradients(op, inputs, out_shape, attrs, extra_inits=(), h=1e-6):
    def loss_at(vals):
        m = op_model(op, list(zip([n for n, _ in inputs], vals)), out_shape, attrs, TensorProto.DOUBLE, extra_inits)
        return float(ReferenceEvaluator(m).run(None, {})[0])

    base = [np.array(a, dtype=np.float64) for _, a in inputs]
    grads = {}
    for k, (name, _) in enumerate(inputs):
        g = np.zeros_like(base[k])
        for i in np.ndindex(base[k].shape):
            plus = [b.copy() for b in base]
            minus = [b.copy() for b in base]
            plus[k][i] += h
            minus[k][i] -= h
            g[i] = (loss_at(plus) - loss_at(minus)) / (2 * h)
        grads[name] = g
    return grads


def check(op, inputs, out_shape, attrs=None, extra_inits=()):
    attrs = attrs or {}
    # The float32 model's inputs are float32: difference the same values.
    inputs = [(n, np.asarray(a, dtype=np.float32)) for n, a in inputs]
    got = device_gradients(op, inputs, out_shape, attrs, extra_inits)
    want = fd_gradients(op, inputs, out_shape, attrs, extra_inits)
    for name in want:
        scale = max(1.0, float(np.max(np.abs(want[name]))))
        np.testing.assert_allclose(got[name], want[name], atol=2e-4 * scale, rtol=2e-4, err_msg=f"{op} d/d{name}")


shapes = st.lists(st.integers(1, 3), min_size=1, max_size=3)


def broadcastable_pair(draw, shape):
    """A shape numpy broadcasts to `shape` (trailing dims kept or set to 1)."""
    k = draw(st.integers(0, len(shape)))
    tail = shape[len(shape) - k:]
    return [d if draw(st.booleans()) else 1 for d in tail]


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_binary_elementwise_with_broadcasting(data):
    op = data.draw(st.sampled_from(["Add", "Sub", "Mul", "Div"]))
    shape = data.draw(shapes)
    other = broadcastable_pair(data.draw, shape)
    rng = np.random.default_rng(data.draw(st.integers(0, 999)))
    a = rng.standard_normal(shape)
    b = rng.standard_normal(other)
    if op == "Div":
        b = np.sign(b + 1e-3) * (np.abs(b) + 0.5)  # away from zero
    order = data.draw(st.booleans())
    ins = [("A", a), ("B", b)] if order else [("B", b), ("A", a)]
    out = list(np.broadcast_shapes(a.shape, b.shape))
    check(op, ins, out)


@settings(max_examples=30, deadline=None)
@given(op=st.sampled_from(["Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Identity"]),
       shape=shapes, seed=st.integers(0, 999))
def test_unary(op, shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if op in ("Log", "Sqrt"):
        x = np.abs(x) + 0.5
    if op == "Relu":
        x = np.sign(x) * (np.abs(x) + 0.05)  # finite differences need distance from the kink
    check(op, [("X", x)], list(shape))


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 4), k=st.integers(1, 4), n=st.integers(1, 4), batch=st.sampled_from([[], [2], [2, 1], [1, 2]]),
       b_batch=st.sampled_from([[], [2], [1]]), seed=st.integers(0, 999))
def test_matmul_batched_and_broadcast(m, k, n, batch, b_batch, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(batch + [m, k])
    b = rng.standard_normal(b_batch + [k, n])
    out = list(np.broadcast_shapes(tuple(batch), tuple(b_batch))) + [m, n]
    check("MatMul", [("A", a), ("B", b)], out)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 4), k=st.integers(1, 4), n=st.integers(1, 4), ta=st.booleans(), tb=st.booleans(),
       alpha=st.sampled_from([1.0, 0.5, -2.0]), beta=st.sampled_from([1.0, 0.25]),
       c_shape=st.sampled_from(["full", "row", "col", "scalar"]), seed=st.integers(0, 999))
def test_gemm(m, k, n, ta, tb, alpha, beta, c_shape, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal([k, m] if ta else [m, k])
    b = rng.standard_normal([n, k] if tb else [k, n])
    c = rng.standard_normal({"full": [m, n], "row": [n], "col": [m, 1], "scalar": [1]}[c_shape])
    check("Gemm", [("A", a), ("B", b), ("C", c)], [m, n],
          dict(transA=int(ta), transB=int(tb), alpha=alpha, beta=beta))


@settings(max_examples=20, deadline=None)
@given(op=st.sampled_from(["Softmax", "LogSoftmax"]), shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
       data=st.data(), seed=st.integers(0, 999))
def test_softmax_family(op, shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = np.random.default_rng(seed).standard_normal(shape)
    check(op, [("X", x)], list(shape), dict(axis=axis))


@settings(max_examples=25, deadline=None)
@given(op=st.sampled_from(["ReduceSum", "ReduceMean"]), shape=st.lists(st.integers(1, 3), min_size=1, max_size=3),
       data=st.data(), keepdims=st.booleans(), seed=st.integers(0, 999))
def test_reductions(op, shape, data, keepdims, seed):
    axes = sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    x = np.random.default_rng(seed).standard_normal(shape)
    out = [1 if i in axes else d for i, d in enumerate(shape)] if keepdims else \
        [d for i, d in enumerate(shape) if i not in axes]
    if op == "ReduceSum":  # opset 13+: axes as an input
        check(op, [("X", x)], out, dict(keepdims=int(keepdims)),
              extra_inits=[("arg_axes", np.array(axes, np.int64))])
    else:
        check(op, [("X", x)], out, dict(keepdims=int(keepdims), axes=axes))


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 3), min_size=2, max_size=4), data=st.data(), seed=st.integers(0, 999))
def test_transpose_reshape_flatten(shape, data, seed):
    x = np.random.default_rng(seed).standard_normal(shape)
    perm = data.draw(st.permutations(range(len(shape))))
    check("Transpose", [("X", x)], [shape[p] for p in perm], dict(perm=list(perm)))
    axis = data.draw(st.integers(0, len(shape)))
    flat = [int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))]
    check("Flatten", [("X", x)], flat, dict(axis=axis))
    check("Reshape", [("X", x)], [int(np.prod(shape))], extra_inits=[("arg_shape", np.array([-1], np.int64))])


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 2), g=st.sampled_from([1, 2]), cg=st.integers(1, 2), cog=st.integers(1, 2),
       hw=st.integers(3, 6), k=st.sampled_from([1, 2, 3]), s=st.sampled_from([1, 2]), d=st.sampled_from([1, 2]),
       pads=st.lists(st.integers(0, 1), min_size=4, max_size=4), bias=st.booleans(), seed=st.integers(0, 999))
def test_conv_with_groups_strides_pads_and_dilations(n, g, cg, cog, hw, k, s, d, pads, bias, seed):
    eff = (k - 1) * d + 1
    if hw + pads[0] + pads[2] < eff or hw + pads[1] + pads[3] < eff:
        return
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, g * cg, hw, hw))
    w = rng.standard_normal((g * cog, cg, k, k))
    ho = (hw + pads[0] + pads[2] - eff) // s + 1
    wo = (hw + pads[1] + pads[3] - eff) // s + 1
    ins = [("X", x), ("W", w)] + ([("B", rng.standard_normal(g * cog))] if bias else [])
    check("Conv", ins, [n, g * cog, ho, wo],
          dict(group=g, strides=[s, s], dilations=[d, d], pads=pads, kernel_shape=[k, k]))


@settings(max_examples=20, deadline=None)
@given(op=st.sampled_from(["MaxPool", "AveragePool"]), k=st.sampled_from([1, 2, 3]), extra=st.integers(0, 2),
       seed=st.integers(0, 999))
def test_pools_whose_windows_tile_the_input(op, k, extra, seed):
    hw = 2 * k + extra  # rows past the last whole window get no gradient
    x = np.random.default_rng(seed).standard_normal((1, 2, hw, hw))
    check(op, [("X", x)], [1, 2, hw // k, hw // k], dict(kernel_shape=[k, k], strides=[k, k]))


@settings(max_examples=15, deadline=None)
@given(shape=st.lists(st.integers(1, 3), min_size=3, max_size=4), seed=st.integers(0, 999), data=st.data())
def test_global_average_pool_and_concat(shape, seed, data):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    check("GlobalAveragePool", [("X", x)], shape[:2] + [1] * (len(shape) - 2))
    axis = data.draw(st.integers(0, len(shape) - 1))
    other = list(shape)
    other[axis] = data.draw(st.integers(1, 3))
    y = rng.standard_normal(other)
    out = list(shape)
    out[axis] += other[axis]
    check("Concat", [("X", x), ("Y", y)], out, dict(axis=axis))


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=2, max_size=3), data=st.data(), seed=st.integers(0, 999))
def test_layer_normalization(shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    rng = np.random.default_rng(seed)
    a = axis % len(shape)
    if int(np.prod(shape[a:])) < 2:
        return
    norm = shape[a:]
    check("LayerNormalization", [("X", rng.standard_normal(shape)), ("S", 1 + rng.standard_normal(norm) * 0.3),
                                 ("B", rng.standard_normal(norm))], list(shape), dict(axis=axis, epsilon=1e-3))


@settings(max_examples=20, deadline=None)
@given(op=st.sampled_from(["Erf", "Gelu"]), shape=shapes, seed=st.integers(0, 999))
def test_erf_and_gelu(op, shape, seed):
    # onnx's reference Erf computes in float32: difference a float64 one instead.
    import math

    erf = np.vectorize(math.erf)
    f = {"Erf": erf, "Gelu": lambda v: v * 0.5 * (1 + erf(v / math.sqrt(2)))}[op]
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    got = device_gradients(op, [("X", x)], list(shape), {})["X"]
    r = numpy_helper.to_array(next(i for i in op_model(op, [("X", x)], list(shape), {}, TensorProto.DOUBLE)
                                   .graph.initializer if i.name == "R"))
    h = 1e-6
    xd = x.astype(np.float64)
    want = np.zeros_like(xd)
    for i in np.ndindex(xd.shape):
        p, m = xd.copy(), xd.copy()
        p[i] += h
        m[i] -= h
        want[i] = (np.sum(f(p) * r) - np.sum(f(m) * r)) / (2 * h)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * max(1.0, float(np.max(np.abs(want)))))


@settings(max_examples=15, deadline=None)
@given(shape=shapes, c=st.sampled_from([2.0, 3.0, 0.5, -1.0]), seed=st.integers(0, 999))
def test_pow_by_a_constant(shape, c, seed):
    x = np.abs(np.random.default_rng(seed).standard_normal(shape)) + 0.5
    check("Pow", [("X", x)], list(shape), extra_inits=[("arg_exp", np.array(c, np.float32))])


@settings(max_examples=15, deadline=None)
@given(shape=shapes, seed=st.integers(0, 999))
def test_where(shape, seed):
    rng = np.random.default_rng(seed)
    cond = rng.integers(0, 2, shape).astype(bool)
    check("Where", [("A", rng.standard_normal(shape)), ("B", rng.standard_normal([shape[-1]]))], list(shape),
          extra_inits=[("arg0_cond", cond)])


@settings(max_examples=15, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=2, max_size=3), data=st.data(), seed=st.integers(0, 999))
def test_gather_at_a_constant_position(shape, data, seed):
    axis = data.draw(st.integers(0, len(shape) - 1))
    i = data.draw(st.integers(-shape[axis], shape[axis] - 1))
    out = [d for k, d in enumerate(shape) if k != axis]
    check("Gather", [("X", np.random.default_rng(seed).standard_normal(shape))], out, dict(axis=axis),
          extra_inits=[("arg_idx", np.array(i, np.int64))])


@settings(max_examples=15, deadline=None)
@given(v=st.integers(2, 9), d=st.integers(1, 4), idx_shape=st.lists(st.integers(1, 4), min_size=1, max_size=2),
       seed=st.integers(0, 999))
def test_embedding_gather_adds_the_rows_that_read_each_entry(v, d, idx_shape, seed):
    # Indices streamed at run time (repeats and negative ones included).
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((v, d)).astype(np.float32)
    idx = rng.integers(-v, v, idx_shape).astype(np.int64)
    r = rng.standard_normal(idx_shape + [d]).astype(np.float32)
    nodes = [helper.make_node("Gather", ["T", "idx"], ["y"], name="op"), helper.make_node("Mul", ["y", "R"], ["yr"]),
             helper.make_node("ReduceSum", ["yr"], ["loss"], keepdims=0)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("idx", TensorProto.INT64, idx_shape)],
                          [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                          [numpy_helper.from_array(table, "T"), numpy_helper.from_array(r, "R")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with GraphCoreManager(precision="float32", ipu_model=TINY) as ipu:
        t = ipu.compile_model(model, {"idx": idx}, loss="loss", optimizer=optim.SGD(lr=0.0), gradient_outputs=["T"])
        _, grad = ipu.execute_model(t, {"idx": idx})
    want = np.zeros((v, d))
    np.add.at(want, idx.reshape(-1) % v, r.reshape(-1, d))
    np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-6)


def test_an_operator_without_a_gradient_is_named():
    x = np.random.default_rng(0).standard_normal((1, 1, 4, 4))
    with pytest.raises(UnsupportedOperatorError, match=r"MaxPool \(node 'op'\) has no gradient \(ceil_mode"):
        device_gradients("MaxPool", [("X", x)], [1, 1, 2, 2], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1))
    with pytest.raises(UnsupportedOperatorError, match=r"Sin \(node 'op'\) has no gradient"):
        device_gradients("Sin", [("X", x)], [1, 1, 4, 4], {})


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 3), c=st.integers(1, 3), hw=st.integers(1, 3), seed=st.integers(0, 999))
def test_batch_normalization_trains_with_batch_statistics(n, c, hw, seed):
    # Any BatchNormalization of a training graph normalises with the batch's
    # statistics: differenced against onnx's reference in training mode.
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    s = (1 + 0.3 * rng.standard_normal(c)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    stats = [("arg_mean", rng.standard_normal(c).astype(np.float32)),
             ("arg_var", (1 + np.abs(rng.standard_normal(c))).astype(np.float32))]
    got = device_gradients("BatchNormalization", [("X", x), ("S", s), ("B", b)], [n, c, hw, hw],
                           dict(epsilon=1e-3), extra_inits=stats)
    want = fd_gradients("BatchNormalization", [("X", x), ("S", s), ("B", b)], [n, c, hw, hw],
                        dict(epsilon=1e-3, training_mode=1), extra_inits=stats)
    for name in want:
        scale = max(1.0, float(np.max(np.abs(want[name]))))
        np.testing.assert_allclose(got[name], want[name], atol=5e-4 * scale, rtol=5e-4, err_msg=name)


@settings(max_examples=10, deadline=None)
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=3), seed=st.integers(0, 999))
def test_squeeze_unsqueeze(shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape)
    check("Unsqueeze", [("X", x)], [1] + list(shape), extra_inits=[("arg_axes", np.array([0], np.int64))])
    x1 = x.reshape([1] + list(shape))
    check("Squeeze", [("X", x1)], list(shape), extra_inits=[("arg_axes", np.array([0], np.int64))])


def test_pow_by_zero_and_a_1d_convolution():
    check("Pow", [("X", np.array([0.0, 1.5, -2.0]))], [3], extra_inits=[("arg_exp", np.array(0.0, np.float32))])
    x = np.random.default_rng(1).standard_normal((1, 1, 5))
    with pytest.raises(UnsupportedOperatorError, match="only 2-D convolutions"):
        device_gradients("Conv", [("X", x), ("W", np.ones((1, 1, 3)))], [1, 1, 3], dict(kernel_shape=[3]))


@settings(max_examples=30, deadline=None)
@given(op=st.sampled_from(["MaxPool", "AveragePool"]), k=st.sampled_from([2, 3]), s=st.sampled_from([1, 2]),
       pad=st.integers(0, 1), d=st.sampled_from([1, 2]), include=st.booleans(), hw=st.integers(4, 7),
       seed=st.integers(0, 999))
def test_pools_with_overlapping_padded_and_dilated_windows(op, k, s, pad, d, include, hw, seed):
    if op == "AveragePool" and d > 1:
        d = 1  # AveragePool has dilations from opset 19 only
    eff = (k - 1) * d + 1
    if pad >= k or hw + 2 * pad < eff:
        return
    out = (hw + 2 * pad - eff) // s + 1
    attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4)
    if d > 1:
        attrs["dilations"] = [d, d]
    if op == "AveragePool":
        attrs["count_include_pad"] = int(include)
    x = np.random.default_rng(seed).standard_normal((1, 2, hw, hw))
    check(op, [("X", x)], [1, 2, out, out], attrs)
