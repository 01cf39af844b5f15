"""GraphCoreManager: attach IPUs, compile models for them, run them."""

from __future__ import annotations

import os
import secrets
import threading
import warnings
import weakref
from typing import Any, Dict, List, Optional

import numpy as np

from . import onnx_import
from .compiled import CompiledModel, LatestRun, arrange_inputs, conform_input, conversion_hint
from .errors import (
    DeviceNotAttachedError,
    IncompatibleExecutableError,
    InvalidOptionError,
    InputMismatchError,
    InvalidOptionTypeError,
    IPUPlanWarning,
)
from .options import (
    IPUModel,
    check_bool,
    check_device_id,
    check_device_iterations,
    check_execution,
    check_memory_proportion,
    check_num_ipus,
    check_positive,
    check_fp8_format,
    check_gradient_accumulation,
    check_output_mode,
    check_precision,
    check_precision_on,
    check_replication_factor,
    check_sharding,
    check_seed,
    check_threads,
    options_from_env,
)
from .progress import CompileProgress
from .report_execution import ExecutionReport


def _model_label(model: Any) -> str:
    """A short name of a model for the progress bar."""
    if isinstance(model, (str, os.PathLike)):
        return os.path.basename(os.fspath(model))
    name = getattr(getattr(model, "graph", None), "name", "")
    return name or "model"


def _native():
    from neurenix import _native

    return _native


_NEW, _ATTACHED, _CLOSED = "new", "attached", "closed"


class GraphCoreManager:
    """Manages a group of IPUs: attach, compile, execute, report.

    >>> with GraphCoreManager(num_ipus=1, precision="float32",
    ...                       ipu_model=IPUModel(num_ipus=1, tiles_per_ipu=4)) as ipu:
    ...     compiled = ipu.compile_model(model, example_inputs)   # doctest: +SKIP
    ...     outputs = ipu.execute_model(compiled, inputs)          # doctest: +SKIP

    Arguments:
        num_ipus: IPUs to attach and compile for (a power of two): the
            ``replication_factor`` replicas' IPUs together. The model is split
            over each replica's IPUs as pipeline stages (see ``sharding``).
        precision: ``"float32"``, ``"float16"`` (weights and activations in
            half), ``"mixed"`` (half for matmuls, convolutions and
            activations; float32 for softmax, normalisations, reductions and
            outputs) or ``"float8"`` (ipu21 only: matmuls and convolutions
            multiply float8 operands, each with a power-of-two scale, into
            half partials; everything else as ``"float16"``).
        gradient_accumulation: training only: micro-batches whose gradients
            one optimizer step averages (an ``execute_model`` call takes
            micro-batch x gradient_accumulation x device_iterations samples
            and takes device_iterations optimizer steps).
        output_mode: training only: the losses a call returns: ``"all"``
            (one per optimizer step), ``"final"`` (the last) or ``"sum"``.
        fp8_format: the float8 format of those operands under ``"float8"``:
            ``"e4m3"`` (Graphcore's 1.4.3, ONNX FLOAT8E4M3FNUZ) or ``"e5m2"``
            (1.5.2, FLOAT8E5M2FNUZ).
        memory_proportion: fraction of each tile's memory the matmul and
            convolution planners may use for temporaries, in (0, 1].
        enable_half_partials: accumulate matmul and convolution partial sums
            in half (only where their inputs are half).
        compile_only: compile against the system without attaching; execution
            then raises :class:`DeviceNotAttachedError`. ``num_ipus`` may then
            exceed the system's IPUs (up to 1024): the plan is made for a
            system of the same chips (version, tiles, bytes per tile) with
            ``num_ipus`` IPUs, and ``ipu_model`` is that system.
        device_id: attach this device (numbered like ``gc-info``: single IPUs
            first, then pairs, fours, ...); default: the first free group.
        ipu_model: the simulated system (:class:`IPUModel`); default
            ``$NEURENIX_IPU_MODEL`` or 16 x ipu2.
        wait_for_device: wait for busy IPUs instead of failing at once.
        attach_timeout: seconds to wait when ``wait_for_device``.
        simulator_threads: host threads the simulator uses (default: all cores).
        replication_factor: replicas of the model, each on ``num_ipus /
            replication_factor`` IPUs with the same weights; the host batch is
            split between them and the outputs concatenated in order.
        device_iterations: micro-batches one :meth:`execute_model` call runs on
            the device. The example inputs of :meth:`compile_model` are one
            micro-batch; ``execute_model`` takes micro-batch x
            device_iterations x replication_factor samples.
        sharding: ``"auto"`` (stages chosen so that each fits its IPU and the
            slowest is as fast as possible), a list of the node names at which
            stages 1, 2, ... begin, or a dict node name -> IPU (nodes not named
            take the IPU of the node before them).
        execution: ``"pipelined"`` (every IPU of a replica works on a
            different micro-batch at once; needs device_iterations >= stages)
            or ``"sharded"`` (one micro-batch passes the IPUs in turn). Default:
            pipelined when a replica has several IPUs and device_iterations
            can fill the pipeline, otherwise sharded with a warning.
        stochastic_rounding: round every float32 result stored as float16
            (op results, half partials, casts) stochastically, from per-tile
            generators seeded from ``seed``, the IPU and the tile when a
            compiled model is loaded (their state carries from run to run);
            see docs/precision.md.
        seed: the generators' seed (None: one drawn when the manager is made,
            kept in ``effective_seed``). The same seed gives the same bits for
            the same sequence of runs.
        fp_exceptions: stop a run with :class:`IPUFloatingPointError` at the
            first overflow, division by zero or invalid operation (an
            infinity or NaN made from finite operands), naming the op, the
            model node, the IPU and the tile; also for float32 inputs that
            overflow float16 on their way in. Off: IEEE infinities and NaNs
            propagate.
    """

    def __init__(
        self,
        num_ipus: int = 1,
        precision: str = "float16",
        memory_proportion: float = 0.6,
        enable_half_partials: bool = True,
        compile_only: bool = False,
        device_id: Optional[int] = None,
        ipu_model: Optional[IPUModel] = None,
        wait_for_device: bool = False,
        attach_timeout: float = 60.0,
        simulator_threads: Optional[int] = None,
        replication_factor: int = 1,
        device_iterations: int = 1,
        sharding: Any = "auto",
        execution: Optional[str] = None,
        stochastic_rounding: bool = False,
        seed: Optional[int] = None,
        fp_exceptions: bool = False,
        fp8_format: str = "e4m3",
        gradient_accumulation: int = 1,
        output_mode: str = "all",
    ):
        if ipu_model is None:
            ipu_model = IPUModel.from_env() or IPUModel()
        elif not isinstance(ipu_model, IPUModel):
            raise InvalidOptionTypeError(
                f"ipu_model must be an IPUModel, got {type(ipu_model).__name__}", "ipu_model"
            )
        if (
            compile_only is True
            and isinstance(num_ipus, int)
            and not isinstance(num_ipus, bool)
            and ipu_model.num_ipus < num_ipus
            and not num_ipus & (num_ipus - 1)
        ):
            # Planning attaches nothing, so it is not bounded by the system's
            # size: plan for the same chips (version, tiles, bytes per tile)
            # with as many IPUs as asked.
            import dataclasses

            ipu_model = dataclasses.replace(ipu_model, num_ipus=num_ipus)
        self.ipu_model = ipu_model
        self._system = ipu_model.spec()
        self._describe = ipu_model.describe()
        self.num_ipus = check_num_ipus(num_ipus, ipu_model.num_ipus)
        self.precision = check_precision(precision)
        check_precision_on(self.precision, ipu_model.version)
        self.fp8_format = check_fp8_format(fp8_format)
        self.gradient_accumulation = check_gradient_accumulation(gradient_accumulation)
        self.output_mode = check_output_mode(output_mode)
        self.memory_proportion = check_memory_proportion(memory_proportion)
        self.enable_half_partials = check_bool("enable_half_partials", enable_half_partials)
        self.compile_only = check_bool("compile_only", compile_only)
        self.device_id = check_device_id(device_id)
        self.wait_for_device = check_bool("wait_for_device", wait_for_device)
        self.attach_timeout = check_positive("attach_timeout", attach_timeout)
        self.simulator_threads = check_threads(simulator_threads)
        self.replication_factor = check_replication_factor(replication_factor, self.num_ipus)
        self.device_iterations = check_device_iterations(device_iterations)
        self.sharding = sharding
        self._sharding = check_sharding(sharding, self.num_ipus // self.replication_factor)
        self.execution = check_execution(execution)
        self.stochastic_rounding = check_bool("stochastic_rounding", stochastic_rounding)
        self.seed = check_seed(seed)
        #: The seed the device's generators start from when a compiled model is
        #: loaded: ``seed``, or one drawn when the manager is made if None.
        self.effective_seed: int = self.seed if self.seed is not None else secrets.randbits(64)
        self.fp_exceptions = check_bool("fp_exceptions", fp_exceptions)
        self._lock = threading.RLock()
        self._state = _NEW
        self._device = None
        self._devices = None  # native DeviceManager, created on first use
        self._loaded: "weakref.WeakSet[CompiledModel]" = weakref.WeakSet()
        self._latest_run: Optional[LatestRun] = None  # of the latest execute_model
        if self.device_id is not None:
            self._check_device_id(self.device_id)

    # -- lifecycle ------------------------------------------------------------

    def _device_manager(self):
        if self._devices is None:
            self._devices = _native().DeviceManager(self._system)
        return self._devices

    def _check_device_id(self, device_id: int) -> None:
        from .errors import InvalidOptionError

        devices = self._device_manager().devices()
        if device_id >= len(devices):
            raise InvalidOptionError(
                f"device_id {device_id} does not exist; this system has devices 0..{len(devices) - 1}", "device_id"
            )
        size = len(devices[device_id].ipus)
        if size != self.num_ipus:
            raise InvalidOptionError(
                f"device_id {device_id} is a group of {size} IPU(s) but num_ipus={self.num_ipus}", "device_id"
            )

    def initialize(self) -> "GraphCoreManager":
        """Attaches the IPUs (unless ``compile_only``). Calling it again is a no-op."""
        with self._lock:
            if self._state == _ATTACHED:
                return self
            if not self.compile_only:
                timeout = self.attach_timeout if self.wait_for_device else 0.0
                self._device = self._device_manager().attach(self.num_ipus, self.device_id, timeout)
            self._state = _ATTACHED
            return self

    def finalize(self) -> None:
        """Detaches the IPUs and frees the simulated tile memory of every model
        loaded on them. Calling it again is a no-op."""
        with self._lock:
            if self._state != _ATTACHED:
                if self._state == _NEW:
                    self._state = _CLOSED
                return
            for cm in list(self._loaded):
                cm.unload()
            self._loaded = weakref.WeakSet()
            if self._device is not None:
                self._device.detach()
                self._device = None
            self._state = _CLOSED

    @property
    def is_initialized(self) -> bool:
        return self._state == _ATTACHED

    @property
    def device(self) -> Optional[Dict[str, Any]]:
        """The attached device: its id and IPUs (None if not attached)."""
        d = self._device
        return None if d is None else {"id": d.id, "ipus": list(d.ipus)}

    def __enter__(self) -> "GraphCoreManager":
        return self.initialize()

    def __exit__(self, *exc: Any) -> None:
        self.finalize()

    def __del__(self) -> None:
        try:
            if getattr(self, "_device", None) is not None:
                self._device.detach()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (
            f"GraphCoreManager(num_ipus={self.num_ipus}, precision={self.precision!r}, "
            f"memory_proportion={self.memory_proportion:g}, enable_half_partials={self.enable_half_partials}, "
            f"compile_only={self.compile_only}, ipu_model={self._system!r}, state={self._state!r})"
        )

    # -- inventory -------------------------------------------------------------

    def get_ipu_count(self) -> int:
        """IPUs in the system (attached or not)."""
        return self.ipu_model.num_ipus

    def get_ipu_info(self) -> List[Dict[str, Any]]:
        """One entry per IPU of the system: id, version, chip, tiles, bytes per
        tile, clock, target kind, and status (``attached`` by this manager,
        ``busy`` with the holder's pid, or ``free``)."""
        d = self._describe
        mine = set(self._device.ipus) if self._device is not None else set()
        dm = self._device_manager()
        out = []
        for ipu in range(self.ipu_model.num_ipus):
            if ipu in mine:
                status, pid = "attached", None
            else:
                pid = dm.holder_pid(ipu)
                status = "free" if pid == 0 else "busy"
                pid = None if pid <= 0 else pid
            out.append(
                {
                    "id": ipu,
                    "version": d.version,
                    "chip": d.chip,
                    "tiles": d.tiles_per_ipu,
                    "bytes_per_tile": d.bytes_per_tile,
                    "memory_bytes": d.tiles_per_ipu * d.bytes_per_tile,
                    "clock_hz": d.clock_hz,
                    "target": "simulator",
                    "status": status,
                    "holder_pid": pid,
                }
            )
        return out

    # -- compile ---------------------------------------------------------------

    def _example_specs(self, native_model: Any, example_inputs: Any) -> List[tuple]:
        TensorSpec = _native().TensorSpec
        declared = native_model.inputs()
        names = [v.name for v in declared]
        dtypes = [onnx_import.dtype_name(v.elem_type) for v in declared]
        if example_inputs is None:
            specs = []
            for v, d in zip(declared, dtypes):
                if v.dims is None or any(not isinstance(x, int) for x in v.dims):
                    dims = None if v.dims is None else ["?" if x is None else x for x in v.dims]
                    raise InputMismatchError(
                        f"input '{v.name}' has a dynamic shape {dims}; pass example_inputs to fix it", v.name
                    )
                specs.append(TensorSpec(v.name, d or "float32", list(v.dims)))
            return specs
        arrays = arrange_inputs(names, dtypes, example_inputs, "example_inputs")
        arrays = [conform_input(n, d, a) for n, d, a in zip(names, dtypes, arrays)]
        return [TensorSpec(n, a.dtype.name, list(a.shape)) for n, a in zip(names, arrays)]

    def compile_model(self, model: Any, example_inputs: Any = None, *, loss: Any = None, optimizer: Any = None,
                      trainable: Optional[List[str]] = None, frozen: Optional[List[str]] = None,
                      gradient_outputs: Optional[List[str]] = None) -> CompiledModel:
        """Compiles an ONNX model (``onnx.ModelProto``, serialized bytes or a
        path) for the shapes and types of ``example_inputs`` (one array, a
        sequence in input order, or a mapping by name; may be omitted when
        every input shape is fixed). Raises :class:`UnsupportedOperatorError`,
        :class:`ModelFormatError`, :class:`InputMismatchError` or
        :class:`IPUOutOfMemoryError`; the manager stays usable after any.

        With ``loss`` and ``optimizer`` it compiles a training step instead
        and returns a :class:`TrainingModel` (docs/training.md): ``loss`` is
        the name of a scalar output of the model or a built-in loss from
        :mod:`losses` (whose label input then belongs in ``example_inputs``);
        ``optimizer`` one from :mod:`optim`; ``trainable``/``frozen`` select
        the initializers to train (default: every floating-point one);
        ``gradient_outputs`` names initializers whose gradients each step
        also returns (as ``<name>.grad``)."""
        if loss is not None or optimizer is not None:
            return self._compile_training(model, example_inputs, loss, optimizer, trainable, frozen,
                                          gradient_outputs)
        with CompileProgress(_model_label(model)) as progress:
            progress("import", 0, 1)
            proto = onnx_import.load(model)
            native_model = onnx_import.to_native(proto)
            progress("import", 1, 1)
            specs = self._example_specs(native_model, example_inputs)
            exe = _native().compile(
                native_model,
                specs,
                self._system,
                self.num_ipus,
                self.precision,
                self.memory_proportion,
                self.enable_half_partials,
                self.replication_factor,
                self.device_iterations,
                self._sharding,
                self.execution,
                progress,
                fp8_format=self.fp8_format,
            )
        compiled = CompiledModel(exe, proto.graph.name or "model")
        for w in compiled.report.warnings:
            warnings.warn(w, IPUPlanWarning, stacklevel=2)
        return compiled

    def _compile_training(self, model: Any, example_inputs: Any, loss: Any, optimizer: Any,
                          trainable: Optional[List[str]], frozen: Optional[List[str]],
                          gradient_outputs: Optional[List[str]]) -> CompiledModel:
        from . import losses, optim
        from .errors import IPUOutOfMemoryError
        from .training import TrainingModel, out_of_memory_advice, training_specs

        if loss is None:
            raise InvalidOptionError("training needs a loss: the name of a scalar output or a built-in loss", "loss")
        if optimizer is None:
            raise InvalidOptionError("training needs an optimizer, e.g. optim.SGD(lr=0.01)", "optimizer")
        if not isinstance(optimizer, optim.Optimizer):
            raise InvalidOptionTypeError(
                f"optimizer must be an optimizer from neurenix.hardware.graphcore.optim, got "
                f"{type(optimizer).__name__}", "optimizer")
        if isinstance(loss, str):
            native_loss, label = ("output", loss, ""), None
        elif isinstance(loss, losses.Loss):
            native_loss, label = loss.native(), loss.label_input
        else:
            raise InvalidOptionTypeError(
                f"loss must be an output name or a loss from neurenix.hardware.graphcore.losses, got "
                f"{type(loss).__name__}", "loss")
        for what, names in (("trainable", trainable), ("frozen", frozen), ("gradient_outputs", gradient_outputs)):
            if names is not None and (isinstance(names, str) or not all(isinstance(n, str) for n in names)):
                raise InvalidOptionTypeError(f"{what} must be a list of initializer names, got {names!r}", what)
        if self.num_ipus != self.replication_factor:
            raise InvalidOptionError(
                "training runs each replica on one IPU for now (no pipelining yet): num_ipus must equal "
                f"replication_factor, got num_ipus={self.num_ipus}, replication_factor={self.replication_factor}",
                "num_ipus")
        with CompileProgress(_model_label(model)) as progress:
            progress("import", 0, 1)
            proto = onnx_import.load(model)
            native_model = onnx_import.to_native(proto)
            progress("import", 1, 1)
            specs = training_specs(self, native_model, example_inputs, label)
            try:
                exe, info = _native().compile_training(
                    native_model,
                    specs,
                    self._system,
                    self.precision,
                    self.memory_proportion,
                    self.enable_half_partials,
                    native_loss,
                    optimizer.kind,
                    trainable=None if trainable is None else list(trainable),
                    frozen=list(frozen or []),
                    loss_scaling=optimizer.loss_scaling,
                    clip_norm=optimizer.max_grad_norm is not None,
                    state_dtype=optimizer.accum_type,
                    gradient_outputs=list(gradient_outputs or []),
                    fp8_format=self.fp8_format,
                    accumulate=self.gradient_accumulation > 1,
                    replicas=self.replication_factor,
                )
            except IPUOutOfMemoryError as e:
                trained = list(trainable) if trainable is not None else [
                    i.name for i in proto.graph.initializer if i.name not in set(frozen or [])]
                advice = out_of_memory_advice(e, trained, optimizer, self.gradient_accumulation)
                if advice:
                    raise type(e)(f"{e}\n{advice}", tiles=[t._asdict() for t in e.tiles],
                                  tensor=tuple(e.tensor) if e.tensor else None) from None
                raise
        compiled = TrainingModel(exe, info, proto.graph.name or "model", proto, optimizer,
                                 gradient_accumulation=self.gradient_accumulation,
                                 device_iterations=self.device_iterations, output_mode=self.output_mode)
        for w in compiled.report.warnings:
            warnings.warn(w, IPUPlanWarning, stacklevel=3)
        return compiled

    def optimize_model(self, model: Any, example_inputs: Any = None) -> "onnx.ModelProto":
        """Graph-level optimisation only (constant folding, dead-node removal,
        fusion), for the shapes of ``example_inputs``. Returns an equivalent
        ONNX model, specialised to those shapes."""
        proto = onnx_import.load(model)
        native_model = onnx_import.to_native(proto)
        specs = self._example_specs(native_model, example_inputs)
        optimized, _stats = native_model.optimize(specs)
        return onnx_import.from_native(optimized, proto)

    # -- execute ---------------------------------------------------------------

    def execute_model(self, compiled: CompiledModel, inputs: Any) -> List[np.ndarray]:
        """Runs a compiled model. ``inputs``: one array, a sequence in input
        order, or a mapping by name, with exactly the compiled shapes and the
        model's element types. Returns the outputs, in graph-output order and
        the model's declared types. Attaches the IPUs first if needed."""
        if not isinstance(compiled, CompiledModel):
            raise InvalidOptionTypeError(
                f"compiled must be a CompiledModel from compile_model, got {type(compiled).__name__}", "compiled"
            )
        if compiled.system != self._system or compiled.num_ipus != self.num_ipus or (
            compiled.replication_factor != self.replication_factor
        ):
            raise IncompatibleExecutableError(
                f"this model was compiled for {compiled.num_ipus} IPU(s) of '{compiled.system}' in "
                f"{compiled.replication_factor} replica(s), but this manager has {self.num_ipus} IPU(s) of "
                f"'{self._system}' in {self.replication_factor}; compile it with this manager"
            )
        if self.compile_only:
            raise DeviceNotAttachedError(
                "this manager was created with compile_only=True and has no device to run on; "
                "create one with compile_only=False to execute"
            )
        names = [s.name for s in compiled.inputs]
        arrays = arrange_inputs(names, [s.dtype for s in compiled.inputs], inputs, "inputs")
        raw = []
        for spec, wire, a in zip(compiled.inputs, compiled._wire_inputs, arrays):
            # (An array already of the declared type and shape, the usual
            # case, skips the casts and the checks that explain a mismatch.)
            if a.dtype != wire or a.shape != spec.shape:
                a = conform_input(spec.name, spec.dtype, a)
                if a.dtype.name != spec.dtype:
                    raise InputMismatchError(
                        f"input '{spec.name}' must be {spec.dtype}, got {a.dtype.name}; convert it with "
                        f"{conversion_hint(spec.dtype)}",
                        spec.name,
                    )
                if tuple(a.shape) != spec.shape:
                    raise InputMismatchError(compiled.describe_shape_mismatch(spec, tuple(a.shape)), spec.name)
            raw.append(np.ascontiguousarray(a, dtype=wire).tobytes())
        with self._lock:
            if self._state == _CLOSED:
                raise DeviceNotAttachedError(
                    "this manager has been finalized; call initialize() to attach its IPUs again"
                )
            if self._state == _NEW:
                self.initialize()
            if not compiled.loaded:
                compiled.load(
                    self.simulator_threads,
                    stochastic_rounding=self.stochastic_rounding,
                    seed=self.effective_seed,
                    fp_exceptions=self.fp_exceptions,
                )
            self._loaded.add(compiled)
            outs = compiled.run(raw)
            run = compiled.latest_run
            if run is not None and self._device is not None:
                run.ipus = list(self._device.ipus)
            self._latest_run = run
        # (The outputs' fresh, writable bytes read in place; a copy only of
        # read-only bytes or where the host's byte order differs.)
        result = []
        for b, wire, s in zip(outs, compiled._wire_outputs, compiled.outputs):
            a = np.frombuffer(b, dtype=wire)
            result.append(a.astype(s.dtype, copy=not a.flags.writeable).reshape(s.shape))
        return result

    @property
    def last_execution_report(self) -> Optional[ExecutionReport]:
        """The :class:`ExecutionReport` of the latest :meth:`execute_model`
        (its model's ``last_execution``); None before one."""
        return self._latest_run.report if self._latest_run is not None else None

    @last_execution_report.setter
    def last_execution_report(self, report: Optional[ExecutionReport]) -> None:
        self._latest_run = LatestRun.of_report(report) if report is not None else None


_default_manager: Optional[GraphCoreManager] = None
_default_lock = threading.Lock()


def get_graphcore_manager() -> GraphCoreManager:
    """The process-wide manager, created on first use (thread-safely) from the
    ``NEURENIX_*`` environment variables (see :func:`options.options_from_env`)."""
    global _default_manager
    if _default_manager is None:
        with _default_lock:
            if _default_manager is None:
                _default_manager = GraphCoreManager(**options_from_env())
    return _default_manager
