"""A training step compiled for the (simulated) IPU: what
``GraphCoreManager.compile_model(..., loss=..., optimizer=...)`` returns.

Each :meth:`GraphCoreManager.execute_model` call runs one step (forward,
backward, optimizer update) and returns the loss. The weights and the
optimizer's state stay in tile memory between calls; only the batch goes
in and the loss comes out. :meth:`TrainingModel.get_weights` reads the
weights back on demand. See docs/training.md.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .compiled import CompiledModel, TensorSpec
from .report_execution import ExecutionReport
from .errors import InputMismatchError, InvalidOptionError, InvalidOptionTypeError
from .optim import Optimizer

__all__ = ["TrainingModel"]


class TrainingModel(CompiledModel):
    """A compiled training step. ``inputs`` are the model's inputs (and a
    built-in loss's labels); ``outputs`` the loss (and the gradients asked
    for with ``gradient_outputs``). ``weights``: the trained initializers'
    names; ``optimizer``: the current optimizer; ``step``: optimizer steps
    taken so far."""

    def __init__(self, executable: Any, info: Any, name: str, proto: Any, optimizer: Optimizer,
                 gradient_accumulation: int = 1, device_iterations: int = 1, output_mode: str = "all"):
        super().__init__(executable, name)
        #: Micro-batches per optimizer step, optimizer steps per call.
        self.gradient_accumulation = gradient_accumulation
        self.device_iterations = device_iterations
        self.output_mode = output_mode
        #: Replicas, one IPU each, with identical weights; their gradients
        #: are all-reduced before every update.
        self.replicas = executable.replication_factor
        self.micro_batches = gradient_accumulation * device_iterations * self.replicas
        self._info = info
        self._proto = proto
        self.optimizer = optimizer
        self.weights: List[str] = list(info.weights)
        #: State updated by every step but not trained: BatchNormalization's
        #: running statistics.
        self.buffers: List[str] = list(info.buffers)
        self.loss_name: str = info.loss
        self.step = 0
        self._state = {s.name: s for s in info.state}
        self._hyper = list(info.hyperparameters)
        # The host does not pass hyperparameters: they come from the optimizer.
        self._all_inputs = [s.name for s in self.micro_batch_inputs]
        self.micro_batch_inputs = [s for s in self.micro_batch_inputs if s.name not in self._hyper]
        if self.micro_batches > 1:
            for s in self.micro_batch_inputs:
                if not s.shape:
                    raise InvalidOptionError(
                        f"input '{s.name}' has no batch axis to split into gradient_accumulation x "
                        "device_iterations micro-batches", "gradient_accumulation")
        self.inputs = [self._host(s) for s in self.micro_batch_inputs]
        # One loss per optimizer step ("all"), or one for the call.
        loss = self.micro_batch_outputs[0]
        if device_iterations > 1 and output_mode == "all":
            loss = TensorSpec(loss.name, loss.dtype, (device_iterations,))
        self.outputs = [loss] + list(self.micro_batch_outputs[1:])
        #: State kept on the host while the program is unloaded (name -> bytes).
        self._host_state: Dict[str, bytes] = {}

    # -- the step ---------------------------------------------------------------

    def describe_shape_mismatch(self, spec: TensorSpec, got: Tuple[int, ...]) -> str:
        micro = next(m for m in self.micro_batch_inputs if m.name == spec.name)
        if self.micro_batches == 1:
            return super().describe_shape_mismatch(spec, got)
        mb = micro.shape[0]
        return (f"input '{spec.name}' must have shape {list(spec.shape)}, got {list(got)}: a call takes the "
                f"micro-batch ({mb}, from the example inputs) x gradient_accumulation ({self.gradient_accumulation})"
                f" x device_iterations ({self.device_iterations}) = {mb * self.micro_batches} samples")

    def run(self, inputs: Sequence[bytes]) -> List[bytes]:
        """``device_iterations`` optimizer steps, each over
        ``gradient_accumulation`` micro-batches, on the raw bytes of
        :attr:`inputs` (in order, micro-batches along the first axis).
        Returns the losses as ``output_mode`` says (each step's loss is the
        mean of its micro-batches') and the last run's other outputs."""
        k = self.micro_batches
        names = [s.name for s in self.inputs]
        self._check_labels(dict(zip(names, inputs)))
        parts = {n: [b[i * len(b) // k:(i + 1) * len(b) // k] for i in range(k)] for n, b in zip(names, inputs)}
        g = self.gradient_accumulation
        loss_dtype = np.dtype(self.micro_batch_outputs[0].dtype).newbyteorder("<")
        step_losses: List[float] = []
        runs: List[ExecutionReport] = []
        try:
            outs = self._micro_batches(parts, loss_dtype, step_losses, runs)
        except Exception:
            # A failed run leaves a partial step: clear its accumulated
            # gradients so that the next step starts clean.
            if (g > 1 or self.replicas > 1) and self.loaded:
                for n, spec in self._state.items():
                    if n.endswith("/accumulator"):
                        self._executable.write_state(n, bytes(4 * int(np.prod(spec.shape))))
            raise
        if len(runs) > 1:
            self.last_execution = ExecutionReport.combined(runs)
        if self.device_iterations > 1 and self.output_mode == "all":
            loss = np.asarray(step_losses, loss_dtype)
        elif self.output_mode == "sum":
            loss = np.asarray(sum(step_losses), loss_dtype)
        else:
            loss = np.asarray(step_losses[-1], loss_dtype)
        return [loss.tobytes()] + list(outs[1:])

    def _check_labels(self, given: Dict[str, bytes]) -> None:
        """A built-in cross entropy's labels must name classes."""
        name, classes = self._info.label_input, self._info.label_classes
        if name is None or classes is None or name not in given:
            return
        spec = next(s for s in self.inputs if s.name == name)
        labels = np.frombuffer(given[name], np.dtype(spec.dtype).newbyteorder("<"))
        bad = (labels < 0) | (labels >= classes)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputMismatchError(
                f"labels '{name}' must be class indices in [0, {classes}); element {i} is {int(labels[i])}", name)

    def _micro_batches(self, parts: Dict[str, List[bytes]], loss_dtype: Any, step_losses: List[float],
                       runs: List[ExecutionReport]) -> List[bytes]:
        """Runs every micro-batch of a call in turn; appends each step's mean
        loss and each run's report; returns the last run's outputs."""
        g = self.gradient_accumulation
        if self.replicas > 1:
            return self._replicated(parts, loss_dtype, step_losses, runs)
        acc = 0.0
        outs: List[bytes] = []
        for i in range(self.micro_batches):
            values = self.optimizer.hyperparameters(self.step + 1)
            if g > 1:
                values["optimizer/apply"] = 1.0 if i % g == g - 1 else 0.0
                values["optimizer/accumulation_scale"] = 1.0 / g
            raw = [parts[n][i] if n in parts else np.float32(values[n]).tobytes() for n in self._all_inputs]
            outs = CompiledModel.run(self, raw)
            if self.last_execution is not None:
                self.last_execution.batch_size = self.report.micro_batch_size  # one micro-batch a run
                runs.append(self.last_execution)
            acc += float(np.frombuffer(outs[0], loss_dtype)[0])
            if i % g == g - 1:
                step_losses.append(acc / g)
                acc = 0.0
                self.step += 1
        return outs

    def _replicated(self, parts: Dict[str, List[bytes]], loss_dtype: Any, step_losses: List[float],
                    runs: List[ExecutionReport]) -> List[bytes]:
        """The micro-batches of a call over the replicas: micro-batch
        ``(step * G + a) * R + r`` runs on replica r as the a-th of its step;
        the step's last ones all-reduce the gradients and update."""
        g, r_count = self.gradient_accumulation, self.replicas
        accumulators = [n for n in self._state if n.endswith("/accumulator")]
        outs: List[bytes] = []
        m = 0
        for _ in range(self.device_iterations):
            acc = 0.0
            for a in range(g):
                values = self.optimizer.hyperparameters(self.step + 1)
                values["optimizer/accumulation_scale"] = 1.0 / (g * r_count)
                inputs = []
                for _r in range(r_count):
                    inputs.append([parts[n][m] if n in parts else np.float32(values[n]).tobytes()
                                   for n in self._all_inputs])
                    m += 1
                per_replica, stats = self._executable.run_replicated(inputs, a == g - 1, accumulators)
                report = ExecutionReport.from_run_stats(stats, self.report.clock_hz,
                                                        self.report.micro_batch_size * r_count)
                self.last_execution = report
                runs.append(report)
                acc += sum(float(np.frombuffer(o[0], loss_dtype)[0]) for o in per_replica) / r_count
                outs = [bytes(b) for b in per_replica[-1]]
            step_losses.append(acc / g)
            self.step += 1
        return outs

    def load(self, threads: int = 0, stochastic_rounding: bool = False, seed: int = 0,
             fp_exceptions: bool = False) -> None:
        # Loading again starts from fresh device memory: keep the state.
        if self.loaded:
            self._host_state = {n: bytes(self._executable.read_state(n)) for n in self._state}
        super().load(threads, stochastic_rounding, seed, fp_exceptions)
        for name, data in self._host_state.items():
            self._executable.write_state(name, data)
        self._host_state = {}

    def unload(self) -> None:
        """Frees the device memory; the weights and optimizer state are kept
        on the host and restored by the next load."""
        if self.loaded:
            self._host_state = {n: bytes(self._executable.read_state(n)) for n in self._state}
        super().unload()

    # -- weights ----------------------------------------------------------------

    def _initial(self, name: str) -> np.ndarray:
        from onnx import numpy_helper

        for init in self._proto.graph.initializer:
            if init.name == name:
                return numpy_helper.to_array(init).astype(np.float32)
        raise KeyError(name)

    def _read(self, name: str) -> np.ndarray:
        spec = self._state[name]
        dtype = np.float16 if spec.device_type == "float16" else np.float32
        if self.loaded:
            data = bytes(self._executable.read_state(name))
        elif name in self._host_state:
            data = self._host_state[name]
        elif name in self.weights or name in self.buffers:
            return self._initial(name).reshape(spec.shape)
        else:
            return np.zeros(spec.shape, dtype)
        return np.frombuffer(data, dtype).reshape(spec.shape).copy()

    def get_weights(self) -> Dict[str, np.ndarray]:
        """The trained weights (float32 master copies), read from the device
        when loaded: ``{initializer name: array}``."""
        return {n: self._read(n) for n in self.weights}

    def get_buffers(self) -> Dict[str, np.ndarray]:
        """BatchNormalization's running statistics as the steps left them."""
        return {n: self._read(n) for n in self.buffers}

    def get_optimizer_state(self) -> Dict[str, np.ndarray]:
        """The optimizer's state tensors (momenta, moments) by name."""
        return {n: self._read(n).astype(np.float32) for n in self._info.optimizer_state}

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Uploads weights (a subset of :attr:`weights` by name), e.g. to
        restore a checkpoint. A wrong name or shape raises
        :class:`InputMismatchError`; nothing is written then."""
        if not isinstance(weights, Mapping):
            raise InvalidOptionTypeError(
                f"weights must be a mapping of initializer name to array, got {type(weights).__name__}", "weights")
        staged = {}
        for name, value in weights.items():
            if name not in self.weights:
                raise InputMismatchError(
                    f"'{name}' is not a trained weight of this model; its weights are {', '.join(self.weights)}", name)
            a = np.asarray(value)
            shape = tuple(self._state[name].shape)
            if a.shape != shape:
                raise InputMismatchError(f"weight '{name}' must have shape {list(shape)}, got {list(a.shape)}", name)
            if a.dtype.kind != "f":
                raise InputMismatchError(f"weight '{name}' must be floating point, got {a.dtype.name}", name)
            staged[name] = np.ascontiguousarray(a, dtype="<f4").tobytes()
        for name, data in staged.items():
            if self.loaded:
                self._executable.write_state(name, data)
            else:
                self._host_state[name] = data

    def set_optimizer(self, optimizer: Optimizer) -> None:
        """Replaces the optimizer's hyperparameters (learning rate, ...)
        without recompiling. The new optimizer must have the same update
        rule and structure (type, momentum or not, loss scaling, clipping,
        state type); otherwise compile the model again."""
        if not isinstance(optimizer, Optimizer):
            raise InvalidOptionTypeError(
                f"optimizer must be an optimizer from neurenix.hardware.graphcore.optim, got "
                f"{type(optimizer).__name__}", "optimizer")
        if optimizer.structure() != self.optimizer.structure():
            raise InvalidOptionError(
                f"{optimizer!r} needs another program than {self.optimizer!r} (a different update rule, "
                "loss scaling, clipping or state type); compile the model again with it", "optimizer")
        self.optimizer = optimizer

    def memory_by_role(self) -> Dict[str, int]:
        """Bytes of the step's tensors in tile memory by role, over the whole
        IPU: ``weights`` (the trained float32 master copies), ``optimizer
        state`` (momenta, moments), ``gradients`` (everything the backward
        pass computes), ``optimizer update`` (the update's intermediate
        values), ``activations`` (the forward pass's values, kept until the
        backward pass reads them), ``inputs`` (the batch and the
        hyperparameters), ``other constants`` (frozen weights) and
        ``temporaries`` (operations' scratch: exchange buffers, partials).
        Each tensor counts once, at its full size, though not all are live at
        the same time (``report.max_tile_memory`` is the peak of one tile)."""
        sizes = {"float32": 4, "int32": 4, "float16": 2, "bool": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1}
        weights = set(self.weights)
        opt_state = set(self._info.optimizer_state)
        roles = {k: 0 for k in ("weights", "optimizer state", "gradients", "optimizer update", "activations",
                                "inputs", "other constants", "temporaries")}
        for v in self.report.variables:
            n = int(np.prod(v.shape)) * sizes.get(v.device_type, 4)
            if v.name in weights:
                role = "weights"
            elif v.name in opt_state:
                role = "optimizer state"
            elif v.kind == "input":
                role = "inputs"
            elif v.kind == "constant":
                role = "other constants"
            elif v.kind == "temporary":
                role = "temporaries"
            elif v.node.startswith("grad/") or v.node.startswith("loss/"):
                role = "gradients"
            elif v.node.startswith("optimizer/") or v.name.endswith("/assign"):
                role = "optimizer update"
            else:
                role = "activations"
            roles[role] += n
        return roles

    def to_onnx(self) -> Any:
        """The model as an inference ONNX model carrying the trained weights
        and the running statistics (in each initializer's original type)."""
        import onnx
        from onnx import numpy_helper

        out = onnx.ModelProto()
        out.CopyFrom(self._proto)
        current = self.get_weights()
        current.update(self.get_buffers())
        for i, init in enumerate(out.graph.initializer):
            if init.name in current:
                dtype = numpy_helper.to_array(init).dtype
                new = numpy_helper.from_array(current[init.name].astype(dtype), init.name)
                out.graph.initializer[i].CopyFrom(new)
        return out

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self.inputs)
        return (f"<TrainingModel {self.name!r} ({ins}) -> {self.loss_name}; {len(self.weights)} weight(s), "
                f"{self.optimizer!r}, step {self.step}>")


_STATE_SUFFIXES = ("/momentum", "/exp_avg", "/exp_avg_sq", "/accumulator")


def role_of(name: str, trained: Sequence[str]) -> str:
    """The training role of a tensor named ``name`` in tile memory (as
    :meth:`TrainingModel.memory_by_role` names them), from names alone."""
    if name in trained:
        return "weights"
    if name.endswith(_STATE_SUFFIXES) and name.rsplit("/", 1)[0] in trained:
        return "optimizer state"
    if name.startswith("grad/") or name.startswith("loss/"):
        return "gradients"
    if name.startswith("optimizer/"):
        return "optimizer update"
    if name.startswith("("):
        return "code"
    return "activations"


def out_of_memory_advice(e: Any, trained: Sequence[str], optimizer: Optimizer, gradient_accumulation: int) -> str:
    """What fills the overflowing tiles of a training step, by role, and what
    would help."""
    roles: Dict[str, int] = {}
    for t in e.tiles:
        for name, n in t.largest:
            r = role_of(name, trained)
            roles[r] = roles.get(r, 0) + int(n)
    if not roles:
        return ""
    parts = ", ".join(f"{r} {n:,} B" for r, n in sorted(roles.items(), key=lambda kv: -kv[1]))
    advice = [f"Training: on the overflowing tiles, the largest tensors are {parts}."]
    if roles.get("activations", 0) or roles.get("gradients", 0):
        advice.append(f"A smaller micro-batch with gradient_accumulation (now {gradient_accumulation}) keeps fewer "
                      "activations and gradients live for the same batch.")
    if roles.get("optimizer state", 0) and optimizer.accum_type == "float32":
        advice.append("accum_type='float16' halves the optimizer state.")
    advice.append("frozen=[...] takes weights out of training; precision='float16' or 'mixed' halves activations; "
                  "more IPUs per model are not supported for training yet.")
    return " ".join(advice)


def training_specs(manager: Any, native_model: Any, example_inputs: Any, label_input: Optional[str]) -> List[Any]:
    """The input specs of a training compile: the model's (from the example
    inputs) and a built-in loss's labels."""
    if label_input is None:
        return manager._example_specs(native_model, example_inputs)
    if not isinstance(example_inputs, Mapping) or label_input not in example_inputs:
        raise InputMismatchError(
            f"the loss adds the input '{label_input}': give example_inputs as a dict that includes it", label_input)
    model_inputs = {k: v for k, v in example_inputs.items() if k != label_input}
    specs = manager._example_specs(native_model, model_inputs)
    labels = np.asarray(example_inputs[label_input])
    from neurenix import _native

    return specs + [_native.TensorSpec(label_input, labels.dtype.name, list(labels.shape))]
