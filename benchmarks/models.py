"""Models the benchmarks run: name -> builder returning (onnx model, feeds)."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def _mlp(widths, batch, seed=0):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev = "x"
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        inits += [numpy_helper.from_array((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), f"W{i}"),
                  numpy_helper.from_array(rng.standard_normal(b).astype(np.float32) * 0.1, f"b{i}")]
        nodes.append(helper.make_node("Gemm", [prev, f"W{i}", f"b{i}"], [f"z{i}"]))
        if i < len(widths) - 2:
            nodes.append(helper.make_node("Relu", [f"z{i}"], [f"a{i}"]))
            prev = f"a{i}"
    nodes.append(helper.make_node("Softmax", [f"z{len(widths) - 2}"], ["y"], axis=-1))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, widths[0]])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, widths[-1]])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model, {"x": rng.standard_normal((batch, widths[0])).astype(np.float32)}


# ---------------------------------------------------------------------------
# BERT-style encoder
# ---------------------------------------------------------------------------


class _Graph:
    """A small node/initializer accumulator so the encoder below reads like the
    graph an exporter writes. Every value gets a unique name from a prefix."""

    def __init__(self):
        self.nodes, self.inits, self._n = [], [], 0

    def name(self, prefix):
        self._n += 1
        return f"{prefix}_{self._n}"

    def const(self, value, prefix="c"):
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type, inputs, prefix=None, **attrs):
        out = self.name(prefix or op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=f"n_{out}", **attrs))
        return out


def bert_encoder(batch, seq, vocab=8000, hidden=256, heads=4, layers=4, ffn=1024, layernorm="fused", seed=0,
                 gelu="erf", token_types=2, positions="gather", max_positions=None, pooler=True,
                 mask_value=-10000.0, init_std=0.02, eps=1e-12):
    """A BERT-style encoder as ``torch.onnx.export`` of a HuggingFace BertModel
    would write it; returns (model, feeds).

    Inputs (int64, dims named ``batch_size`` / ``sequence_length`` as in
    exported models, so the shape arithmetic below is only constant once the
    compiler binds the example shapes): ``input_ids``, ``attention_mask`` and,
    if ``token_types`` > 0, ``token_type_ids``. Outputs: ``last_hidden_state``
    [batch, seq, hidden] and, with ``pooler``, ``pooler_output`` [batch, hidden].

    - ``layernorm``: ``"fused"`` = the opset-17 LayerNormalization op;
      ``"decomposed"`` = ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, as
      exporters wrote it before opset 17.
    - ``gelu``: ``"erf"`` = x * (1 + Erf(x / sqrt 2)) * 0.5 from Div/Erf/Add/Mul
      nodes; ``"op"`` = the opset-20 Gelu op (the model is then opset 20).
    - ``positions``: ``"gather"`` = Gather of the position table with position
      ids sliced from a [1, max_positions] buffer (BertEmbeddings' registered
      ``position_ids``); ``"slice"`` = the first ``seq`` rows of the table
      sliced out and added.
    - the additive attention mask is (1 - mask) * ``mask_value`` broadcast as
      [batch, 1, 1, seq] (get_extended_attention_mask).
    - weights ~ N(0, ``init_std``) as BERT's initialiser (0.02). Unlike BERT's
      initialiser, biases and LayerNorm shifts are drawn at the same std and
      LayerNorm scales at 1 + N(0, init_std): a zero bias or unit scale would let
      a broadcasting bug through unnoticed. Activations stay O(1): every block
      ends in a LayerNorm.

    ``feeds``: random token ids, token types 0 then 1 (a sentence pair), and an
    attention mask of ones followed by padding zeros (at least half of each
    sequence, and always the first token, is kept).
    """
    if layernorm not in ("fused", "decomposed"):
        raise ValueError(f"layernorm must be 'fused' or 'decomposed', got {layernorm!r}")
    if gelu not in ("erf", "op"):
        raise ValueError(f"gelu must be 'erf' or 'op', got {gelu!r}")
    if positions not in ("gather", "slice"):
        raise ValueError(f"positions must be 'gather' or 'slice', got {positions!r}")
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    if layers < 2:
        # Two layers at least: the layers alternate the two forms of the 1/sqrt(d) scaling.
        raise ValueError(f"layers must be >= 2, got {layers}")
    opset = 17
    if gelu == "op":
        import onnx.defs

        if onnx.defs.onnx_opset_version() < 20:
            raise RuntimeError(f"the Gelu op needs opset 20; this onnx supports {onnx.defs.onnx_opset_version()}")
        opset = 20
    max_positions = max_positions or max(seq, 512)
    if seq > max_positions:
        raise ValueError(f"seq ({seq}) exceeds max_positions ({max_positions})")
    head_dim = hidden // heads
    rng = np.random.default_rng(seed)
    g = _Graph()
    f32 = np.float32

    def normal(*shape):
        return (rng.standard_normal(shape) * init_std).astype(f32)

    def i64(*v):
        return np.array(v, dtype=np.int64)

    def dense(x, n_in, n_out, prefix):
        w = g.const(normal(n_in, n_out), f"{prefix}.weight")
        b = g.const(normal(n_out), f"{prefix}.bias")
        return g.op("Add", [g.op("MatMul", [x, w], f"{prefix}.matmul"), b], f"{prefix}.out")

    def reduce_mean_last(x):
        # ReduceMean took `axes` as an attribute up to opset 17, as an input since 18.
        if opset >= 18:
            return g.op("ReduceMean", [x, g.const(i64(-1), "axes")], keepdims=1)
        return g.op("ReduceMean", [x], axes=[-1], keepdims=1)

    def layer_norm(x, prefix):
        gamma = g.const((1 + rng.standard_normal(hidden) * init_std).astype(f32), f"{prefix}.weight")
        beta = g.const(normal(hidden), f"{prefix}.bias")
        if layernorm == "fused":
            return g.op("LayerNormalization", [x, gamma, beta], prefix, axis=-1, epsilon=eps)
        d = g.op("Sub", [x, reduce_mean_last(x)])
        var = reduce_mean_last(g.op("Pow", [d, g.const(f32(2.0))]))
        std = g.op("Sqrt", [g.op("Add", [var, g.const(f32(eps))])])
        return g.op("Add", [g.op("Mul", [g.op("Div", [d, std]), gamma]), beta], prefix)

    def gelu_act(x):
        if gelu == "op":
            return g.op("Gelu", [x])
        e = g.op("Erf", [g.op("Div", [x, g.const(f32(np.sqrt(2.0)))])])
        return g.op("Mul", [g.op("Mul", [x, g.op("Add", [e, g.const(f32(1.0))])]), g.const(f32(0.5))])

    def dim(shape, i):
        # Shape -> Gather(scalar) -> Unsqueeze: a 1-D int64 dimension, as torch
        # exports `x.size(i)` when it is used to build a new shape.
        return g.op("Unsqueeze", [g.op("Gather", [shape, g.const(i64(i).reshape(()), "idx")], axis=0),
                                  g.const(i64(0), "axes")])

    # --- embeddings -------------------------------------------------------
    ids_shape = g.op("Shape", ["input_ids"], "ids_shape")
    seq_len = dim(ids_shape, 1)
    x = g.op("Gather", [g.const(normal(vocab, hidden), "word_embeddings"), "input_ids"], "word_emb")
    pos_table = g.const(normal(max_positions, hidden), "position_embeddings")
    if positions == "gather":
        pos_buffer = g.const(np.arange(max_positions, dtype=np.int64)[None, :], "position_ids")
        pos_ids = g.op("Slice", [pos_buffer, g.const(i64(0), "starts"), seq_len, g.const(i64(1), "axes")])
        pos = g.op("Gather", [pos_table, pos_ids], "pos_emb")  # [1, seq, hidden]
    else:
        pos = g.op("Slice", [pos_table, g.const(i64(0), "starts"), seq_len, g.const(i64(0), "axes")], "pos_emb")
    if token_types:
        tt = g.op("Gather", [g.const(normal(token_types, hidden), "token_type_embeddings"), "token_type_ids"])
        x = g.op("Add", [x, tt])
    x = layer_norm(g.op("Add", [x, pos]), "embeddings.LayerNorm")

    # --- extended attention mask: [batch, 1, 1, seq], 0 where kept ----------
    m = g.op("Unsqueeze", ["attention_mask", g.const(i64(1, 2), "axes")])
    m = g.op("Cast", [m], to=TensorProto.FLOAT)
    m = g.op("Sub", [g.const(f32(1.0)), m])
    mask = g.op("Mul", [m, g.const(f32(mask_value))], "ext_mask")

    # --- encoder layers ---------------------------------------------------
    for li in range(layers):
        p = f"layer{li}"
        # Head split/merge targets computed from the runtime shape as exporters
        # do; the compiler must fold all of it into constants.
        shp = g.op("Shape", [x], f"{p}.shape")
        b_dim, s_dim = dim(shp, 0), dim(shp, 1)
        split = g.op("Concat", [b_dim, s_dim, g.const(i64(heads), "heads"), g.const(i64(head_dim), "head_dim")],
                     f"{p}.split_shape", axis=0)
        merge = g.op("Concat", [b_dim, s_dim, g.const(i64(hidden), "hidden")], f"{p}.merge_shape", axis=0)

        def heads_of(name, perm):
            return g.op("Transpose", [g.op("Reshape", [dense(x, hidden, hidden, f"{p}.{name}"), split])],
                        f"{p}.{name}_heads", perm=perm)

        q = heads_of("query", [0, 2, 1, 3])  # [b, H, s, d]
        k = heads_of("key", [0, 2, 3, 1])    # [b, H, d, s]: K already transposed for Q.K^T
        v = heads_of("value", [0, 2, 1, 3])
        scores = g.op("MatMul", [q, k], f"{p}.scores")
        # Both ways exporters write the 1/sqrt(d) scaling: alternate by layer.
        if li % 2 == 0:
            scores = g.op("Div", [scores, g.const(f32(np.sqrt(head_dim)))])
        else:
            scores = g.op("Mul", [scores, g.const(f32(1.0 / np.sqrt(head_dim)))])
        probs = g.op("Softmax", [g.op("Add", [scores, mask])], f"{p}.probs", axis=-1)
        ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])  # [b, s, H, d]
        ctx = g.op("Reshape", [ctx, merge], f"{p}.context")
        attn = dense(ctx, hidden, hidden, f"{p}.attention.output")
        x = layer_norm(g.op("Add", [attn, x]), f"{p}.attention.LayerNorm")
        h = gelu_act(dense(x, hidden, ffn, f"{p}.intermediate"))
        h = dense(h, ffn, hidden, f"{p}.output")
        x = layer_norm(g.op("Add", [h, x]), f"{p}.output.LayerNorm")

    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="last_hidden_state"))
    dims = ["batch_size", "sequence_length"]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, dims + [hidden])]
    if pooler:
        first = g.op("Gather", [x, g.const(i64(0).reshape(()), "idx")], "first_token", axis=1)  # [b, hidden]
        pooled = g.op("Tanh", [dense(first, hidden, hidden, "pooler.dense")])
        g.nodes.append(helper.make_node("Identity", [pooled], ["pooler_output"], name="pooler_output"))
        outputs.append(helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, ["batch_size", hidden]))

    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, dims),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, dims)]
    if token_types:
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, dims))
    graph = helper.make_graph(g.nodes, "bert_encoder", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9  # opset 20 needs IR 9; keep it for 17 too so older runtimes load it

    feeds = {"input_ids": rng.integers(0, vocab, (batch, seq), dtype=np.int64)}
    lengths = rng.integers((seq + 1) // 2, seq + 1, batch)
    feeds["attention_mask"] = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    if token_types:
        split_at = rng.integers(1, seq + 1, batch) if seq > 1 else np.ones(batch, np.int64)
        feeds["token_type_ids"] = (np.arange(seq)[None, :] >= split_at[:, None]).astype(np.int64) % token_types
    return model, feeds


# The BERT entries: BERT-base's structure (embeddings, post-LN encoder layers
# with a 4x FFN, pooler, heads of 64) at a third of its width and depth, with a
# trimmed vocabulary: hidden 256, 4 heads of 64, 4 layers, FFN 1024, vocab 8000,
# seq 128 (a common fine-tuning length); 5.4 M parameters, 0.87 GFLOP per
# sequence. BERT-base (110 M parameters, ~25x the flops) would fit one ipu2 too,
# but a benchmark pass (compile, warm-up, five runs) on two host cores would
# take minutes; at this size every
# matmul still spans well over a thousand tiles, so the plans, exchanges and
# attention shapes are those a real BERT exercises.
BERT_BENCH = dict(vocab=8000, hidden=256, heads=4, layers=4, ffn=1024)

# ---------------------------------------------------------------------------
# Light models from the onnx package, with seeded random weights
# ---------------------------------------------------------------------------


def light_model(name, batch=1):
    """A `light` model of the onnx package's test data with the random weights
    and calibrated batch-norm statistics of the conformance run (cut before
    its final softmax), at batch size `batch`: the input's first dimension and
    the batch dimension of fixed Reshape targets are changed."""
    import importlib.util
    import os

    from onnx import numpy_helper as nh

    spec = importlib.util.spec_from_file_location("conformance", os.path.join(os.path.dirname(__file__), "conformance.py"))
    conformance = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conformance)
    model, feeds, _ = conformance.prepare_light_model(name)
    if batch != 1:
        g = model.graph
        data = {k for k in feeds}
        for vi in list(g.input) + list(g.output):
            if vi.name in data or vi in g.output:
                vi.type.tensor_type.shape.dim[0].dim_value = batch
        reshape_targets = {n.input[1] for n in g.node if n.op_type == "Reshape"}
        for t in g.initializer:
            if t.name in reshape_targets:
                v = nh.to_array(t).copy()
                if v.size and v[0] == 1:
                    v[0] = batch
                    t.CopyFrom(nh.from_array(v, t.name))
        rng = np.random.default_rng(batch)
        feeds = {k: rng.standard_normal((batch,) + v.shape[1:]).astype(v.dtype) for k, v in feeds.items()}
    return model, feeds


MODELS = {
    "mlp-784-1024-1024-10 b1": lambda: _mlp([784, 1024, 1024, 10], 1),
    "mlp-784-1024-1024-10 b64": lambda: _mlp([784, 1024, 1024, 10], 64),
    "bert-base-like b1": lambda: bert_encoder(1, 128, **BERT_BENCH),
    "bert-base-like b8": lambda: bert_encoder(8, 128, **BERT_BENCH),
    "resnet50-light b1": lambda: light_model("light_resnet50", 1),
    "resnet50-light b8": lambda: light_model("light_resnet50", 8),
    "squeezenet-light b1": lambda: light_model("light_squeezenet", 1),
    "inception-v1-light b1": lambda: light_model("light_inception_v1", 1),
    "densenet121-light b1": lambda: light_model("light_densenet121", 1),
}
