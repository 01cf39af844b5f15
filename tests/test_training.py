"""Training on the simulated IPU against an independent numpy implementation
(forward, backward and PyTorch's update rules written out by hand), and the
training API's behaviour: weights resident on the device, checkpoints,
export, and clear errors."""

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from neurenix.hardware.graphcore import GraphCoreManager, IPUModel, TrainingModel, losses, optim
from neurenix.hardware.graphcore.errors import (
    InputMismatchError,
    InvalidOptionError,
    InvalidOptionTypeError,
    UnsupportedOperatorError,
)

TINY = IPUModel(num_ipus=1, tiles_per_ipu=4)
N, D, H, C = 8, 5, 7, 3


def mlp_model(params):
    nodes = [
        helper.make_node("Gemm", ["x", "W1", "b1"], ["h1"], name="fc1"),
        helper.make_node("Tanh", ["h1"], ["h"], name="act"),
        helper.make_node("Gemm", ["h", "W2", "b2"], ["logits"], name="fc2", transB=1),
    ]
    g = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, D])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [N, C])],
        [numpy_helper.from_array(v, k) for k, v in params.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def initial_params(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "W1": (rng.standard_normal((D, H)) * 0.5).astype(np.float32),
        "b1": (rng.standard_normal(H) * 0.1).astype(np.float32),
        "W2": (rng.standard_normal((C, H)) * 0.5).astype(np.float32),  # transB
        "b2": np.zeros(C, np.float32),
    }


def batch(step):
    rng = np.random.default_rng(100 + step)
    return rng.standard_normal((N, D)).astype(np.float32), rng.integers(0, C, N).astype(np.int64)


def reference_grads(p, x, y):
    """Loss and gradients of mean cross entropy, in float64."""
    h1 = x @ p["W1"] + p["b1"]
    h = np.tanh(h1)
    z = h @ p["W2"].T + p["b2"]
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    prob = e / e.sum(1, keepdims=True)
    loss = -np.mean(np.log(prob[np.arange(N), y]))
    dz = prob.copy()
    dz[np.arange(N), y] -= 1
    dz /= N
    g = {"W2": dz.T @ h, "b2": dz.sum(0)}
    dh1 = (dz @ p["W2"]) * (1 - h * h)
    g["W1"] = x.T @ dh1
    g["b1"] = dh1.sum(0)
    return loss, g


class Reference:
    """PyTorch's update rules, written out (float64)."""

    def __init__(self, opt, params):
        self.opt = opt
        self.p = {k: v.astype(np.float64) for k, v in params.items()}
        self.state = {}
        self.t = 0

    def step(self, x, y, grads=None):
        """One step; `grads(params, x, y)` gives (loss, gradients): the MLP's by default."""
        loss, g = (grads or reference_grads)(self.p, x.astype(np.float64), y)
        self.t += 1
        o = self.opt
        if o.max_grad_norm is not None:
            norm = math.sqrt(sum(float(np.sum(v * v)) for v in g.values()))
            c = min(1.0, o.max_grad_norm / (norm + 1e-6))
            g = {k: v * c for k, v in g.items()}
        for k in self.p:
            w, d = self.p[k], g[k]
            if isinstance(o, optim.SGD):
                d = d + o.weight_decay * w
                if o.momentum:
                    buf = d.copy() if self.t == 1 else o.momentum * self.state[k] + (1 - o.dampening) * d
                    self.state[k] = buf
                    d = d + o.momentum * buf if o.nesterov else buf
                self.p[k] = w - o.lr * d
            elif isinstance(o, (optim.Adam, optim.AdamW, optim.LAMB)):
                b1, b2 = o.betas
                if isinstance(o, optim.Adam):
                    d = d + o.weight_decay * w
                if isinstance(o, optim.AdamW):
                    w = w * (1 - o.lr * o.weight_decay)
                m, v = self.state.get(k, (np.zeros_like(w), np.zeros_like(w)))
                m = b1 * m + (1 - b1) * d
                v = b2 * v + (1 - b2) * d * d
                self.state[k] = (m, v)
                if isinstance(o, optim.LAMB):
                    mh, vh = m / (1 - b1 ** self.t), v / (1 - b2 ** self.t)
                    r = mh / (np.sqrt(vh) + o.eps) + o.weight_decay * w
                    wn, rn = np.linalg.norm(w), np.linalg.norm(r)
                    trust = wn / rn if wn > 0 and rn > 0 else 1.0
                    self.p[k] = w - o.lr * trust * r
                else:
                    denom = np.sqrt(v) / math.sqrt(1 - b2 ** self.t) + o.eps
                    self.p[k] = w - o.lr / (1 - b1 ** self.t) * m / denom
        return loss


OPTIMIZERS = [
    optim.SGD(lr=0.1),
    optim.SGD(lr=0.05, momentum=0.9),
    optim.SGD(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01),
    optim.SGD(lr=0.05, momentum=0.8, nesterov=True),
    optim.Adam(lr=0.01, weight_decay=0.001),
    optim.AdamW(lr=0.01),
    optim.LAMB(lr=0.01, weight_decay=0.01),
    optim.SGD(lr=0.1, momentum=0.9, max_grad_norm=0.5),
    optim.AdamW(lr=0.01, loss_scaling=128.0),
]


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=repr)
def test_mlp_training_matches_an_independent_implementation(opt):
    params = initial_params()
    ref = Reference(opt, params)
    with GraphCoreManager(precision="float32", ipu_model=TINY) as ipu:
        x0, y0 = batch(0)
        t = ipu.compile_model(mlp_model(params), {"x": x0, "labels": y0},
                              loss=losses.CrossEntropy("logits"), optimizer=opt)
        assert isinstance(t, TrainingModel)
        for step in range(20):
            x, y = batch(step)
            (loss,) = ipu.execute_model(t, {"x": x, "labels": y})
            want = ref.step(x, y)
            assert abs(float(loss) - want) <= 1e-5 * max(1.0, abs(want)), (step, float(loss), want)
        got = t.get_weights()
    for k, w in ref.p.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-5, err_msg=k)
    assert t.step == 20


def test_the_model_can_bring_its_own_loss_and_gradients_can_come_out():
    # A model computing its own (scalar) loss: mean((x @ W - target)^2).
    rng = np.random.default_rng(4)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Sub", ["y", "t"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["mse"], keepdims=0)]
    g = helper.make_graph(nodes, "reg", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
                                         helper.make_tensor_value_info("t", TensorProto.FLOAT, [4, 2])],
                          [helper.make_tensor_value_info("mse", TensorProto.FLOAT, []),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2])],
                          [numpy_helper.from_array(w, "W")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((4, 3)).astype(np.float32)
    tgt = rng.standard_normal((4, 2)).astype(np.float32)
    with GraphCoreManager(precision="float32", ipu_model=TINY) as ipu:
        t = ipu.compile_model(model, {"x": x, "t": tgt}, loss="mse", optimizer=optim.SGD(lr=0.1),
                              gradient_outputs=["W"])
        assert [o.name for o in t.outputs] == ["mse", "W.grad"]
        loss, grad = ipu.execute_model(t, {"x": x, "t": tgt})
    d = x.astype(np.float64) @ w - tgt
    np.testing.assert_allclose(loss, np.mean(d * d), rtol=1e-6)
    np.testing.assert_allclose(grad, 2 * x.T @ d / d.size, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t.get_weights()["W"], w - 0.1 * (2 * x.T @ d / d.size), rtol=1e-5, atol=1e-6)


def test_weights_stay_on_the_device_and_only_the_batch_crosses_the_link():
    params = initial_params()
    x, y = batch(0)
    with GraphCoreManager(precision="float32", ipu_model=TINY) as ipu:
        t = ipu.compile_model(mlp_model(params), {"x": x, "labels": y}, loss=losses.CrossEntropy("logits"),
                              optimizer=optim.SGD(lr=0.1, momentum=0.9))
        ipu.execute_model(t, {"x": x, "labels": y})
        report = ipu.last_execution_report
        assert report.ipus == list(ipu._device.ipus) and report.ipus, "the run's IPUs"
    # x (float32) + labels (int32 on the device) + 5 float32 hyperparameters in, the loss out.
    assert report.host_bytes == N * D * 4 + N * 4 + 5 * 4 + 4
    weight_bytes = sum(v.nbytes for v in params.values())
    assert report.host_bytes < weight_bytes


def test_checkpoints_unloading_and_export():
    params = initial_params()
    x, y = batch(0)
    with GraphCoreManager(precision="float32", ipu_model=TINY) as ipu:
        t = ipu.compile_model(mlp_model(params), {"x": x, "labels": y}, loss=losses.CrossEntropy("logits"),
                              optimizer=optim.Adam(lr=0.01))
        for s in range(3):
            ipu.execute_model(t, dict(zip(["x", "labels"], batch(s))))
        trained = t.get_weights()
        moments = t.get_optimizer_state()
        assert set(moments) == {f"{k}/{m}" for k in params for m in ("exp_avg", "exp_avg_sq")}
        # Unloading keeps everything (on the host), and the next step goes on from it.
        t.unload()
        assert not t.loaded
        for k, v in t.get_weights().items():
            np.testing.assert_array_equal(v, trained[k])
        (l1,) = ipu.execute_model(t, dict(zip(["x", "labels"], batch(3))))
        # Restoring the checkpoint and its step replays the same step exactly... for the weights.
        t.set_weights(trained)
        for k, v in t.get_weights().items():
            np.testing.assert_array_equal(v, trained[k])
        # Export: an inference model with the trained weights, as onnxruntime runs it.
        exported = t.to_onnx()
        sess = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"])
        (logits,) = sess.run(None, {"x": x})
        p = {k: v.astype(np.float64) for k, v in trained.items()}
        want = np.tanh(x @ p["W1"] + p["b1"]) @ p["W2"].T + p["b2"]
        np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5)
        # Changing the learning rate needs no recompiling; another rule does.
        t.set_optimizer(optim.Adam(lr=0.001))
        with pytest.raises(InvalidOptionError, match="compile the model again"):
            t.set_optimizer(optim.SGD(lr=0.1))
        with pytest.raises(InvalidOptionTypeError):
            t.set_optimizer("adam")


def test_bad_training_input_gets_clear_errors_and_the_manager_stays_usable():
    params = initial_params()
    x, y = batch(0)
    model = mlp_model(params)
    ce = losses.CrossEntropy("logits")
    with GraphCoreManager(precision="float32", ipu_model=TINY) as ipu:
        with pytest.raises(InvalidOptionError, match="not an output"):
            ipu.compile_model(model, {"x": x}, loss="nope", optimizer=optim.SGD(lr=0.1))
        with pytest.raises(InvalidOptionError, match="must be a scalar"):
            ipu.compile_model(model, {"x": x}, loss="logits", optimizer=optim.SGD(lr=0.1))
        with pytest.raises(InvalidOptionTypeError, match="optimizer"):
            ipu.compile_model(model, {"x": x, "labels": y}, loss=ce, optimizer="sgd")
        with pytest.raises(InvalidOptionError, match="needs an optimizer"):
            ipu.compile_model(model, {"x": x, "labels": y}, loss=ce)
        with pytest.raises(InvalidOptionError, match="labels"):
            ipu.compile_model(model, {"x": x, "labels": y.astype(np.float32)}, loss=ce, optimizer=optim.SGD(lr=0.1))
        with pytest.raises(InputMismatchError, match="labels"):
            ipu.compile_model(model, {"x": x}, loss=ce, optimizer=optim.SGD(lr=0.1))
        t = ipu.compile_model(model, {"x": x, "labels": y}, loss=ce, optimizer=optim.SGD(lr=0.1))
        with pytest.raises(InputMismatchError, match=r"class indices in \[0, 3\); element 2 is 7"):
            ipu.execute_model(t, {"x": x, "labels": np.array([0, 1, 7, 0, 0, 0, 0, 0])})
        assert t.step == 0
        with pytest.raises(InvalidOptionError, match="not an initializer"):
            ipu.compile_model(model, {"x": x, "labels": y}, loss=ce, optimizer=optim.SGD(lr=0.1), frozen=["W9"])
        with pytest.raises(InvalidOptionError, match="lr"):
            optim.SGD(lr=-1.0)
        with pytest.raises(InvalidOptionError, match="nesterov"):
            optim.SGD(lr=0.1, nesterov=True)
        t = ipu.compile_model(model, {"x": x, "labels": y}, loss=ce, optimizer=optim.SGD(lr=0.1),
                              frozen=["W1", "b1"])
        assert t.weights == ["W2", "b2"]
        with pytest.raises(InputMismatchError, match="not a trained weight"):
            t.set_weights({"W1": params["W1"]})
        with pytest.raises(InputMismatchError, match="shape"):
            t.set_weights({"W2": np.zeros((2, 2), np.float32)})
        ipu.execute_model(t, {"x": x, "labels": y})
        # Frozen weights do not move.
        exported = {i.name: numpy_helper.to_array(i) for i in t.to_onnx().graph.initializer}
        np.testing.assert_array_equal(exported["W1"], params["W1"])
        assert not np.array_equal(exported["W2"], params["W2"])
    # An operator with no gradient on the path, by name.
    pool = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["c"], name="conv"),
         helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[2, 2], ceil_mode=1),
         helper.make_node("ReduceSum", ["p"], ["s"], keepdims=0)],
        "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "W")])
    m = helper.make_model(pool, opset_imports=[helper.make_opsetid("", 17)])
    with GraphCoreManager(precision="float32", ipu_model=TINY) as ipu:
        with pytest.raises(UnsupportedOperatorError, match="has no gradient"):
            ipu.compile_model(m, {"x": np.ones((1, 1, 4, 4), np.float32)}, loss="s", optimizer=optim.SGD(lr=0.1))
    with GraphCoreManager(num_ipus=2, precision="float32", ipu_model=IPUModel(num_ipus=2, tiles_per_ipu=4)) as ipu:
        with pytest.raises(InvalidOptionError, match="one IPU"):
            ipu.compile_model(model, {"x": x, "labels": y}, loss=ce, optimizer=optim.SGD(lr=0.1))


@pytest.mark.parametrize("opt", [optim.SGD(lr=0.1, momentum=0.9), optim.AdamW(lr=0.01)], ids=repr)
def test_gradient_accumulation_gives_the_weights_of_the_whole_batch(opt):
    # Four micro-batches of 2 accumulated = one batch of 8 (mean losses, mean gradients).
    params = initial_params()
    results = {}
    for g in (1, 4):
        with GraphCoreManager(precision="float32", ipu_model=TINY, gradient_accumulation=g) as ipu:
            x0, y0 = batch(0)
            mb = N // g
            t = ipu.compile_model(mlp_model_batch(params, mb), {"x": x0[:mb], "labels": y0[:mb]},
                                  loss=losses.CrossEntropy("logits"), optimizer=opt)
            assert t.inputs[0].shape == (N, D)
            step_losses = []
            for s in range(6):
                x, y = batch(s)
                (loss,) = ipu.execute_model(t, {"x": x, "labels": y})
                step_losses.append(float(loss))
            assert t.step == 6
            results[g] = (step_losses, t.get_weights())
    np.testing.assert_allclose(results[4][0], results[1][0], rtol=1e-5)
    for k in params:
        np.testing.assert_allclose(results[4][1][k], results[1][1][k], rtol=1e-4, atol=1e-6, err_msg=k)
    # And both are the reference's (the whole batch per step).
    ref = Reference(opt, params)
    for s in range(6):
        ref.step(*batch(s))
    for k in params:
        np.testing.assert_allclose(results[4][1][k], ref.p[k], rtol=1e-4, atol=1e-5, err_msg=k)


def mlp_model_batch(params, n):
    m = mlp_model(params)
    for v in list(m.graph.input) + list(m.graph.output):
        v.type.tensor_type.shape.dim[0].dim_value = n
    return m


def test_device_iterations_run_several_steps_per_call_and_output_mode_picks_the_losses():
    params = initial_params()
    xs = [batch(s) for s in range(3)]
    x = np.concatenate([b[0] for b in xs])
    y = np.concatenate([b[1] for b in xs])
    ref = Reference(optim.SGD(lr=0.1), params)
    want = [ref.step(*b) for b in xs]
    for mode, expect in (("all", want), ("final", want[-1]), ("sum", sum(want))):
        with GraphCoreManager(precision="float32", ipu_model=TINY, device_iterations=3, output_mode=mode) as ipu:
            t = ipu.compile_model(mlp_model(params), {"x": xs[0][0], "labels": xs[0][1]},
                                  loss=losses.CrossEntropy("logits"), optimizer=optim.SGD(lr=0.1))
            (loss,) = ipu.execute_model(t, {"x": x, "labels": y})
            np.testing.assert_allclose(loss, expect, rtol=1e-5)
            assert t.step == 3
            report = ipu.last_execution_report
            assert report.batch_size == 3 * N
            for k in params:
                np.testing.assert_allclose(t.get_weights()[k], ref.p[k], rtol=1e-4, atol=1e-5)
            with pytest.raises(InputMismatchError, match=r"device_iterations \(3\)"):
                ipu.execute_model(t, {"x": xs[0][0], "labels": xs[0][1]})
    with pytest.raises(InvalidOptionError, match="output_mode"):
        GraphCoreManager(output_mode="each")
    with pytest.raises(InvalidOptionError, match="gradient_accumulation"):
        GraphCoreManager(gradient_accumulation=0)


def test_batch_normalization_updates_its_running_statistics_and_exports_them():
    rng = np.random.default_rng(9)
    c = 3
    x = rng.standard_normal((4, c, 2, 2)).astype(np.float32) * 2 + 1
    mean0 = rng.standard_normal(c).astype(np.float32)
    var0 = (1 + np.abs(rng.standard_normal(c))).astype(np.float32)
    inits = {"bn.scale": np.ones(c, np.float32), "bn.bias": np.zeros(c, np.float32), "bn.mean": mean0,
             "bn.var": var0, "fc.w": rng.standard_normal((c * 4, 2)).astype(np.float32)}
    nodes = [helper.make_node("BatchNormalization", ["x", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["n"],
                              name="bn", momentum=0.8),
             helper.make_node("Flatten", ["n"], ["f"]), helper.make_node("MatMul", ["f", "fc.w"], ["logits"])]
    g = helper.make_graph(nodes, "bnnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, c, 2, 2])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, 2])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    y = np.array([0, 1, 1, 0])
    with GraphCoreManager(precision="float32", ipu_model=TINY) as ipu:
        t = ipu.compile_model(model, {"x": x, "labels": y}, loss=losses.CrossEntropy("logits"),
                              optimizer=optim.SGD(lr=0.1))
        assert t.buffers == ["bn.mean", "bn.var"] and "bn.mean" not in t.weights
        ipu.execute_model(t, {"x": x, "labels": y})
        buffers = t.get_buffers()
        exported = {i.name: numpy_helper.to_array(i) for i in t.to_onnx().graph.initializer}
    xd = x.astype(np.float64)
    bm = xd.mean(axis=(0, 2, 3))
    bv = xd.var(axis=(0, 2, 3))  # population variance, as ONNX's training mode
    np.testing.assert_allclose(buffers["bn.mean"], 0.8 * mean0 + 0.2 * bm, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(buffers["bn.var"], 0.8 * var0 + 0.2 * bv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(exported["bn.var"], buffers["bn.var"])


def test_float16_optimizer_state_and_mixed_precision_still_follow_the_reference_closely():
    # Half-precision forward/backward and float16 momenta: the weights stay near
    # the float64 reference (within half-precision error), and the state is float16.
    params = initial_params()
    opt = optim.SGD(lr=0.05, momentum=0.9, accum_type="float16", loss_scaling=64.0)
    ref = Reference(optim.SGD(lr=0.05, momentum=0.9), params)
    with GraphCoreManager(precision="mixed", ipu_model=TINY) as ipu:
        x0, y0 = batch(0)
        t = ipu.compile_model(mlp_model(params), {"x": x0, "labels": y0}, loss=losses.CrossEntropy("logits"),
                              optimizer=opt)
        assert {s.device_type for s in t._info.state if s.name.endswith("/momentum")} == {"float16"}
        for s in range(10):
            x, y = batch(s)
            (loss,) = ipu.execute_model(t, {"x": x, "labels": y})
            want = ref.step(x, y)
            assert abs(float(loss) - want) < 2e-2 * max(1.0, abs(want)), (s, float(loss), want)
        got = t.get_weights()
    for k, w in ref.p.items():
        np.testing.assert_allclose(got[k], w, rtol=2e-2, atol=5e-3, err_msg=k)


def test_a_training_step_that_does_not_fit_names_the_roles_and_what_would_help():
    from neurenix.hardware.graphcore.errors import IPUOutOfMemoryError

    rng = np.random.default_rng(2)
    params = {"W1": rng.standard_normal((64, 256)).astype(np.float32), "b1": np.zeros(256, np.float32),
              "W2": rng.standard_normal((3, 256)).astype(np.float32), "b2": np.zeros(3, np.float32)}
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h1"]), helper.make_node("Tanh", ["h1"], ["h"]),
             helper.make_node("Gemm", ["h", "W2", "b2"], ["logits"], transB=1)]
    g = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [32, 3])],
                          [numpy_helper.from_array(v, k) for k, v in params.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((32, 64)).astype(np.float32)
    y = rng.integers(0, 3, 32)
    small = IPUModel(num_ipus=1, tiles_per_ipu=4, bytes_per_tile=48 * 1024)
    with GraphCoreManager(precision="float32", ipu_model=small) as ipu:
        with pytest.raises(IPUOutOfMemoryError) as err:
            ipu.compile_model(model, {"x": x, "labels": y}, loss=losses.CrossEntropy("logits"),
                              optimizer=optim.Adam(lr=0.01))
        msg = str(err.value)
        assert "Training: on the overflowing tiles" in msg and "gradient_accumulation" in msg, msg
        assert "weights" in msg and err.value.tiles
        # The manager stays usable.
        t = ipu.compile_model(mlp_model(initial_params()), {"x": batch(0)[0], "labels": batch(0)[1]},
                              loss=losses.CrossEntropy("logits"), optimizer=optim.SGD(lr=0.1))
        ipu.execute_model(t, {"x": batch(0)[0], "labels": batch(0)[1]})


def test_float16_weights_train_as_float32_masters_and_export_as_float16():
    params = {k: v.astype(np.float16) for k, v in initial_params().items()}
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h1"]), helper.make_node("Tanh", ["h1"], ["h"]),
             helper.make_node("Gemm", ["h", "W2", "b2"], ["logits"], transB=1)]
    g = helper.make_graph(nodes, "mlp16", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [N, D])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT16, [N, C])],
                          [numpy_helper.from_array(v, k) for k, v in params.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x, y = batch(0)
    with GraphCoreManager(precision="float16", ipu_model=TINY) as ipu:
        t = ipu.compile_model(model, {"x": x.astype(np.float16), "labels": y}, loss=losses.CrossEntropy("logits"),
                              optimizer=optim.SGD(lr=0.1))
        losses_seen = [float(ipu.execute_model(t, {"x": x.astype(np.float16), "labels": y})[0]) for _ in range(5)]
        assert t.get_weights()["W1"].dtype == np.float32
        exported = {i.name: numpy_helper.to_array(i) for i in t.to_onnx().graph.initializer}
    assert losses_seen[-1] < losses_seen[0]
    assert exported["W1"].dtype == np.float16


def test_loading_again_and_a_failed_call_lose_nothing():
    params = initial_params()
    x, y = batch(0)
    with GraphCoreManager(precision="float32", ipu_model=TINY) as ipu:
        t = ipu.compile_model(mlp_model(params), {"x": x, "labels": y}, loss=losses.CrossEntropy("logits"),
                              optimizer=optim.SGD(lr=0.1, momentum=0.9))
        ipu.execute_model(t, {"x": x, "labels": y})
        w, m = t.get_weights(), t.get_optimizer_state()
        t.load()  # a fresh load keeps the weights and the momenta
        for k in w:
            np.testing.assert_array_equal(t.get_weights()[k], w[k])
        for k in m:
            np.testing.assert_array_equal(t.get_optimizer_state()[k], m[k])
    # A call that fails half-way through an accumulated step leaves no partial gradients.
    with GraphCoreManager(precision="float16", ipu_model=TINY, gradient_accumulation=2, fp_exceptions=True) as ipu:
        x0, y0 = batch(0)
        t = ipu.compile_model(mlp_model_batch(params, N // 2), {"x": x0[:N // 2], "labels": y0[:N // 2]},
                              loss=losses.CrossEntropy("logits"), optimizer=optim.SGD(lr=0.1))
        bad = x0.copy()
        bad[-1, 0] = 1e6  # overflows half on its way in: the second micro-batch fails
        from neurenix.hardware.graphcore.errors import IPUFloatingPointError

        with pytest.raises(IPUFloatingPointError):
            ipu.execute_model(t, {"x": bad, "labels": y0})
        assert t.step == 0
        acc = {n: v for n, v in t.get_optimizer_state().items() if n.endswith("/accumulator")}
        assert acc and all(not np.any(v) for v in acc.values())


def test_a_frozen_convolution_with_batch_normalization_still_normalises_with_the_batch():
    rng = np.random.default_rng(3)
    inits = {"Wc": rng.standard_normal((2, 1, 1, 1)).astype(np.float32), "sc": np.ones(2, np.float32),
             "bi": np.zeros(2, np.float32), "mu": np.full(2, 5.0, np.float32), "va": np.full(2, 9.0, np.float32),
             "fc": rng.standard_normal((8, 2)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "Wc"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "sc", "bi", "mu", "va"], ["n"], name="bn"),
             helper.make_node("Flatten", ["n"], ["f"]), helper.make_node("MatMul", ["f", "fc"], ["logits"])]
    g = helper.make_graph(nodes, "cbn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1, 2, 2])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, 2])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    x = rng.standard_normal((4, 1, 2, 2)).astype(np.float32)
    y = np.array([0, 1, 0, 1])
    with GraphCoreManager(precision="float32", ipu_model=TINY) as ipu:
        t = ipu.compile_model(model, {"x": x, "labels": y}, loss=losses.CrossEntropy("logits"),
                              optimizer=optim.SGD(lr=0.1), frozen=["Wc", "sc", "bi"])
        assert t.buffers == ["mu", "va"]
        ipu.execute_model(t, {"x": x, "labels": y})
        c = np.einsum("nchw,oc->nohw", x.astype(np.float64), inits["Wc"][:, :, 0, 0])
        np.testing.assert_allclose(t.get_buffers()["mu"], 0.9 * 5.0 + 0.1 * c.mean(axis=(0, 2, 3)), rtol=1e-5)


# -- a small CNN against a numpy implementation --------------------------------

CN, CH, CW = 4, 6, 6  # batch, height, width


def cnn_params(seed=0):
    rng = np.random.default_rng(seed)
    return {"k1": (rng.standard_normal((3, 2, 3, 3)) * 0.4).astype(np.float32),
            "kb1": (rng.standard_normal(3) * 0.1).astype(np.float32),
            "fw": (rng.standard_normal((3 * 3 * 3, 4)) * 0.3).astype(np.float32),
            "fb": np.zeros(4, np.float32)}


def cnn_model(p):
    nodes = [helper.make_node("Conv", ["x", "k1", "kb1"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["m"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [CN, 2, CH, CW])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [CN, 4])],
                          [numpy_helper.from_array(v, k) for k, v in p.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def cnn_batch(step):
    rng = np.random.default_rng(500 + step)
    return rng.standard_normal((CN, 2, CH, CW)).astype(np.float32), rng.integers(0, 4, CN).astype(np.int64)


def cnn_reference_grads(p, x, y):
    """Forward and backward of the CNN above, written out in float64."""
    n, cin, h, w = x.shape
    k = p["k1"]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, :, i:i + h, j:j + w] for i in range(3) for j in range(3)], axis=2)  # n,cin,9,h,w
    c = np.einsum("nckhw,ock->nohw", cols, k.reshape(3, cin, 9)) + p["kb1"][None, :, None, None]
    r = np.maximum(c, 0)
    rb = r.reshape(n, 3, h // 2, 2, w // 2, 2)
    m = rb.max(axis=(3, 5))
    f = m.reshape(n, -1)
    z = f @ p["fw"] + p["fb"]
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    prob = e / e.sum(1, keepdims=True)
    loss = -np.mean(np.log(prob[np.arange(n), y]))
    dz = prob.copy()
    dz[np.arange(n), y] -= 1
    dz /= n
    g = {"fw": f.T @ dz, "fb": dz.sum(0)}
    dm = (dz @ p["fw"].T).reshape(m.shape)
    mask = rb == m[:, :, :, None, :, None]
    dr = (mask * dm[:, :, :, None, :, None]).reshape(r.shape)
    dc = dr * (c > 0)
    g["kb1"] = dc.sum(axis=(0, 2, 3))
    g["k1"] = np.einsum("nohw,nckhw->ock", dc, cols).reshape(k.shape)
    return loss, g


@pytest.mark.parametrize("opt", [optim.SGD(lr=0.05, momentum=0.9), optim.AdamW(lr=0.01)], ids=repr)
def test_a_small_cnn_trains_like_an_independent_implementation(opt):
    params = cnn_params()
    ref = Reference(opt, params)
    with GraphCoreManager(precision="float32", ipu_model=TINY) as ipu:
        x0, y0 = cnn_batch(0)
        t = ipu.compile_model(cnn_model(params), {"x": x0, "labels": y0}, loss=losses.CrossEntropy("logits"),
                              optimizer=opt)
        for s in range(20):
            x, y = cnn_batch(s)
            (loss,) = ipu.execute_model(t, {"x": x, "labels": y})
            want = ref.step(x, y, cnn_reference_grads)
            assert abs(float(loss) - want) <= 1e-5 * max(1.0, abs(want)), (s, float(loss), want)
        got = t.get_weights()
    for k, w in ref.p.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-5, err_msg=k)



def dropout_model(w, ratio, opset=17):
    ins = ["W", "ratio"] if opset >= 12 else ["W"]
    attrs = {} if opset >= 12 else {"ratio": ratio}
    nodes = [helper.make_node("Dropout", ins, ["d"], name="drop", **attrs),
             helper.make_node("ReduceSum", ["d"], ["loss"], keepdims=0)]
    inits = [numpy_helper.from_array(w, "W")]
    if opset >= 12:
        inits.append(numpy_helper.from_array(np.array(ratio, np.float32), "ratio"))
    g = helper.make_graph(nodes, "drop", [], [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", [11, 17])
def test_dropout_drops_in_training_with_the_same_mask_forward_and_backward(opset):
    w = np.random.default_rng(0).uniform(1.0, 2.0, 4096).astype(np.float32)
    ratio = 0.25
    with GraphCoreManager(precision="float32", ipu_model=TINY, seed=7) as ipu:
        t = ipu.compile_model(dropout_model(w, ratio, opset), {}, loss="loss", optimizer=optim.SGD(lr=0.0),
                              gradient_outputs=["W"], trainable=["W"])
        loss, grad = ipu.execute_model(t, {})
        loss2, grad2 = ipu.execute_model(t, {})
    kept = grad != 0
    # Kept values are scaled by 1 / (1 - ratio); the loss is exactly what the mask keeps.
    np.testing.assert_allclose(grad[kept], 1 / (1 - ratio), rtol=1e-6)
    np.testing.assert_allclose(loss, np.sum(w[kept] / (1 - ratio), dtype=np.float64), rtol=1e-5)
    # About 1 - ratio kept (4096 draws: 3 standard deviations is 2%), a fresh mask each step.
    assert abs(kept.mean() - (1 - ratio)) < 0.03, kept.mean()
    assert not np.array_equal(kept, grad2 != 0)
    # The same seed draws the same masks.
    with GraphCoreManager(precision="float32", ipu_model=TINY, seed=7) as ipu:
        t = ipu.compile_model(dropout_model(w, ratio, opset), {}, loss="loss", optimizer=optim.SGD(lr=0.0),
                              gradient_outputs=["W"], trainable=["W"])
        _, again = ipu.execute_model(t, {})
    np.testing.assert_array_equal(again, grad)
    with GraphCoreManager(precision="float32", ipu_model=TINY, seed=8) as ipu:
        t = ipu.compile_model(dropout_model(w, ratio, opset), {}, loss="loss", optimizer=optim.SGD(lr=0.0),
                              gradient_outputs=["W"], trainable=["W"])
        _, other = ipu.execute_model(t, {})
    assert not np.array_equal(other, grad)


def test_random_uniform_like_draws_uniformly_on_the_device():
    nodes = [helper.make_node("RandomUniformLike", ["x"], ["u"], low=-1.0, high=3.0)]
    g = helper.make_graph(nodes, "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
                          [helper.make_tensor_value_info("u", TensorProto.FLOAT, [64, 64])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.zeros((64, 64), np.float32)
    with GraphCoreManager(precision="float32", ipu_model=TINY, seed=3) as ipu:
        c = ipu.compile_model(model, {"x": x})
        (u,) = ipu.execute_model(c, {"x": x})
        (u2,) = ipu.execute_model(c, {"x": x})
    assert u.min() >= -1.0 and u.max() < 3.0
    # Uniform on [-1, 3): mean 1, variance 16/12, quartiles at 0, 1, 2 (4096 draws).
    assert abs(u.mean() - 1.0) < 0.06 and abs(u.var() - 16 / 12) < 0.1
    assert abs(np.mean(u < 0.0) - 0.25) < 0.03 and abs(np.mean(u < 2.0) - 0.75) < 0.03
    assert not np.array_equal(u, u2)  # the generators carry their state from run to run


@pytest.mark.parametrize("g", [1, 2])
def test_replicas_all_reduce_their_gradients_and_keep_identical_weights(g):
    # Two replicas (one IPU each) with micro-batches of 2, accumulating g: the weights of
    # one replica training on the whole batch of 2 * 2 * g.
    params = initial_params()
    opt = optim.SGD(lr=0.1, momentum=0.9)
    mb = 2
    two = IPUModel(num_ipus=2, tiles_per_ipu=4)
    with GraphCoreManager(num_ipus=2, replication_factor=2, gradient_accumulation=g, precision="float32",
                          ipu_model=two) as ipu:
        x0, y0 = batch(0)
        t = ipu.compile_model(mlp_model_batch(params, mb), {"x": x0[:mb], "labels": y0[:mb]},
                              loss=losses.CrossEntropy("logits"), optimizer=opt)
        assert t.replicas == 2 and t.inputs[0].shape == (mb * 2 * g, D)
        got_losses = []
        for s in range(4):
            x, y = batch(s)
            (loss,) = ipu.execute_model(t, {"x": x[:mb * 2 * g], "labels": y[:mb * 2 * g]})
            got_losses.append(float(loss))
        report = ipu.last_execution_report
        got = t.get_weights()
        # Both replicas hold the same weights.
        other = {n: np.frombuffer(bytes(t._executable.read_state(n)), np.float32) for n in t.weights}
    assert report.exchange_cycles > 0 and report.batch_size == mb * 2 * g
    ref = Reference(opt, params)
    for s in range(4):
        x, y = batch(s)
        n = mb * 2 * g
        # The reference's mean over the whole batch (the MLP's loss is a mean over N rows).
        want = ref_step_on(ref, x[:n], y[:n])
        assert abs(got_losses[s] - want) < 1e-5 * max(1.0, abs(want)), (s, got_losses[s], want)
    for k, w in ref.p.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-5, err_msg=k)
        np.testing.assert_array_equal(other[k], got[k].reshape(-1))


def ref_step_on(ref, x, y):
    """The Reference's step on a batch of any size."""
    def grads(p, xx, yy):
        n = len(yy)
        h1 = xx @ p["W1"] + p["b1"]
        h = np.tanh(h1)
        z = h @ p["W2"].T + p["b2"]
        z = z - z.max(1, keepdims=True)
        e = np.exp(z)
        prob = e / e.sum(1, keepdims=True)
        loss = -np.mean(np.log(prob[np.arange(n), yy]))
        dz = prob.copy()
        dz[np.arange(n), yy] -= 1
        dz /= n
        gr = {"W2": dz.T @ h, "b2": dz.sum(0)}
        dh1 = (dz @ p["W2"]) * (1 - h * h)
        gr["W1"] = xx.T @ dh1
        gr["b1"] = dh1.sum(0)
        return loss, gr
    return ref.step(x, y, grads)


def test_a_non_finite_loss_is_returned_or_stops_the_step_with_fp_exceptions():
    # loss = sum(log(W * x)): a negative product gives NaN.
    w = np.array([1.0, 2.0], np.float32)
    nodes = [helper.make_node("Mul", ["x", "W"], ["p"]), helper.make_node("Log", ["p"], ["l"]),
             helper.make_node("ReduceSum", ["l"], ["loss"], keepdims=0)]
    g = helper.make_graph(nodes, "nan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                          [numpy_helper.from_array(w, "W")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    good, bad = np.array([1.0, 1.0], np.float32), np.array([1.0, -1.0], np.float32)
    from neurenix.hardware.graphcore.errors import IPUFloatingPointError

    with GraphCoreManager(precision="float32", ipu_model=TINY) as ipu:
        t = ipu.compile_model(model, {"x": good}, loss="loss", optimizer=optim.SGD(lr=0.1))
        (loss,) = ipu.execute_model(t, {"x": bad})
        assert np.isnan(loss)
    with GraphCoreManager(precision="float32", ipu_model=TINY, fp_exceptions=True) as ipu:
        t = ipu.compile_model(model, {"x": good}, loss="loss", optimizer=optim.SGD(lr=0.1))
        with pytest.raises(IPUFloatingPointError, match="invalid"):
            ipu.execute_model(t, {"x": bad})
        (loss,) = ipu.execute_model(t, {"x": good})  # the manager and the model stay usable
        assert np.isfinite(loss)
