"""Type stub of the native module (Rust core + C++ simulator, built by maturin).

The public API is :mod:`neurenix.hardware.graphcore`; this module is its engine
room. Errors raised here are the classes of
:mod:`neurenix.hardware.graphcore.errors`; a failure inside the native code
that is a bug (a Rust panic included) is an ``IPUInternalError``, never a crash.

Records are frozen classes with a keyword constructor, equality and a repr.
"""

from typing import Callable, List, Optional, Sequence, Tuple, Union, final

__all__ = [
    "Model", "Executable", "DeviceManager", "Device", "SystemInfo", "TileMemory", "TileTensor", "OpPlan", "StepCost", "CostTerm",
    "Variable", "CarriedTensor", "StageEstimate", "PipelineEstimate", "RunStats", "PassStats", "Placement", "TensorSpec", "HostStream", "DeviceInfo", "ValueParts", "TensorParts",
    "AttrParts", "NodeParts", "ModelParts", "StateSpec", "TrainingInfo", "compile", "compile_training", "describe_system", "supported_ops", "supported_opsets", "elem_type_name", "_panic",
]

# -- systems and devices ---------------------------------------------------------

@final
class SystemInfo:
    """A simulated system and the target constants of its chip (sources: docs/cost-model.md)."""

    version: str  # "ipu1", "ipu2", "bow", "ipu21"
    chip: str
    num_ipus: int
    tiles_per_ipu: int
    bytes_per_tile: int
    clock_hz: float
    fp16_flops_per_cycle: int  # per tile, AMP with half inputs
    fp32_flops_per_cycle: int  # per tile, AMP with float inputs
    fp8_flops_per_cycle: int  # per tile, AMP with float8 inputs (0: none; ipu21 only)
    worker_threads: int
    exchange_bytes_per_cycle: int  # per tile, each direction
    exchange_descriptor_cycles: int
    local_read_bytes_per_cycle: int
    local_write_bytes_per_cycle: int
    sync_cycles: int
    cross_ipu_sync_cycles: int
    ipu_link_bytes_per_sec: float  # one link, each direction
    ipu_links: int
    host_link: str  # e.g. "PCIe Gen4 x16"
    host_link_bytes_per_sec: float  # each direction
    host_transfer_latency_cycles: int
    vertex_overhead_cycles: int
    estimated_constants: List[str]  # the constants that are estimates, not published figures
    def __new__(
        cls,
        version: str,
        chip: str,
        num_ipus: int,
        tiles_per_ipu: int,
        bytes_per_tile: int,
        clock_hz: float,
        fp16_flops_per_cycle: int,
        fp32_flops_per_cycle: int,
        fp8_flops_per_cycle: int,
        worker_threads: int,
        exchange_bytes_per_cycle: int,
        exchange_descriptor_cycles: int,
        local_read_bytes_per_cycle: int,
        local_write_bytes_per_cycle: int,
        sync_cycles: int,
        cross_ipu_sync_cycles: int,
        ipu_link_bytes_per_sec: float,
        ipu_links: int,
        host_link: str,
        host_link_bytes_per_sec: float,
        host_transfer_latency_cycles: int,
        vertex_overhead_cycles: int,
        estimated_constants: List[str],
    ) -> "SystemInfo": ...

def describe_system(spec: str) -> SystemInfo:
    """Validates an IPU model description ("version=ipu2,num_ipus=16,tiles_per_ipu=8,bytes_per_tile=65536";
    keys: version, num_ipus, tiles_per_ipu, bytes_per_tile) and returns its figures."""

@final
class DeviceInfo:
    """An attachable group of IPUs (numbered like ``gc-info``: single IPUs first, then pairs, fours, ...)."""

    id: int
    ipus: List[int]
    def __new__(cls, id: int, ipus: List[int]) -> "DeviceInfo": ...

@final
class Device:
    """Attached IPUs."""

    @property
    def id(self) -> int: ...
    @property
    def ipus(self) -> List[int]: ...
    @property
    def attached(self) -> bool: ...
    def detach(self) -> None:
        """Releases the IPUs; safe to call twice."""

@final
class DeviceManager:
    """Inventory and exclusive attach (OS file locks in ``lock_dir``) of a simulated system's IPUs."""

    def __new__(cls, system: str, lock_dir: str = ...) -> "DeviceManager": ...
    def devices(self) -> List[DeviceInfo]: ...
    def holder_pid(self, ipu: int) -> int:
        """Pid of the process holding ``ipu``; 0 if free, -1 if held by an unknown process."""
    @property
    def lock_dir(self) -> str: ...
    def attach(self, num_ipus: int, device_id: Optional[int] = None, timeout: float = 0.0) -> Device:
        """Attaches group ``device_id`` (any free group of ``num_ipus`` if None), waiting up to
        ``timeout`` seconds; raises ``DeviceUnavailableError`` naming the busy IPUs and their holders."""

# -- models ----------------------------------------------------------------------

_Dim = Union[int, str, None]  # fixed, named, unknown

@final
class ValueParts:
    """A graph input or output as declared: ONNX element type code (0: not given), dims (None: no shape)."""

    name: str
    elem_type: int
    dims: Optional[List[_Dim]]
    def __new__(cls, name: str, elem_type: int, dims: Optional[Sequence[_Dim]]) -> "ValueParts": ...

@final
class TensorParts:
    """A tensor: ONNX element type code, dims and little-endian bytes."""

    name: str
    elem_type: int
    dims: List[int]
    data: bytes
    def __new__(cls, name: str, elem_type: int, dims: Sequence[int], data: bytes) -> "TensorParts": ...

_AttrValue = Union[int, float, str, List[int], List[float], List[str], TensorParts, None]

@final
class AttrParts:
    """A node attribute. ``kind``: "i", "f", "s", "ints", "floats", "strings", "t" (value: a TensorParts),
    "g" (a subgraph; value None) or the name of another kind (value None; refused by the core)."""

    name: str
    kind: str
    value: _AttrValue
    def __new__(cls, name: str, kind: str, value: _AttrValue) -> "AttrParts": ...

@final
class NodeParts:
    """A node. An empty ``name`` is named by the core (``{op_type}_{index}``, made unique); an empty input
    or output name is an omitted optional one."""

    name: str
    op_type: str
    domain: str
    inputs: List[str]
    outputs: List[str]
    attrs: List[AttrParts]
    def __new__(cls, name: str, op_type: str, domain: str, inputs: Sequence[str], outputs: Sequence[str],
        attrs: Sequence[AttrParts],
    ) -> "NodeParts": ...

@final
class ModelParts:
    """A whole model as plain data. ``opsets``: every imported (domain, version)."""

    name: str
    opsets: List[Tuple[str, int]]
    inputs: List[ValueParts]
    outputs: List[ValueParts]
    initializers: List[TensorParts]
    nodes: List[NodeParts]
    def __new__(cls, name: str, opsets: Sequence[Tuple[str, int]], inputs: Sequence[ValueParts],
        outputs: Sequence[ValueParts], initializers: Sequence[TensorParts], nodes: Sequence[NodeParts],
    ) -> "ModelParts": ...

@final
class TensorSpec:
    """A tensor's name, element type (numpy's name) and concrete shape."""

    name: str
    dtype: str
    shape: List[int]
    def __new__(cls, name: str, dtype: str, shape: Sequence[int]) -> "TensorSpec": ...

@final
class PassStats:
    """What the graph passes did: nodes in, folded at compile time, removed as dead, fused, left."""

    nodes_in: int
    folded: int
    dead: int
    fused: int
    nodes_out: int
    def __new__(cls, nodes_in: int, folded: int, dead: int, fused: int, nodes_out: int) -> "PassStats": ...

@final
class StateSpec:
    """A state tensor of a training program."""

    name: str
    shape: List[int]
    device_type: str
    def __new__(cls, name: str, shape: List[int], device_type: str) -> "StateSpec": ...

@final
class TrainingInfo:
    """What compiling a training step added: the trained weights, the optimizer's state, the
    hyperparameter inputs, the loss output, a built-in loss's label input, every state tensor."""

    weights: List[str]
    optimizer_state: List[str]
    hyperparameters: List[str]
    loss: str
    label_input: Optional[str]
    label_classes: Optional[int]  # a built-in cross entropy's classes: labels lie in [0, label_classes)
    buffers: List[str]  # running statistics of BatchNormalization, updated by every step
    state: List[StateSpec]
    def __new__(
        cls,
        weights: List[str],
        optimizer_state: List[str],
        hyperparameters: List[str],
        loss: str,
        label_input: Optional[str],
        label_classes: Optional[int],
        buffers: List[str],
        state: List[StateSpec],
    ) -> "TrainingInfo": ...

@final
class Model:
    """A model in the native IR."""

    @staticmethod
    def from_parts(parts: ModelParts) -> "Model":
        """Builds and checks a model; raises ``ModelFormatError`` (malformed) or ``UnsupportedOperatorError``
        (an operator set outside ``supported_opsets()``, or an element type neurenix does not hold)."""
    def inputs(self) -> List[ValueParts]: ...
    def outputs(self) -> List[ValueParts]: ...
    @property
    def opset(self) -> int: ...
    @property
    def num_nodes(self) -> int: ...
    def optimize(self, inputs: Sequence[TensorSpec]) -> Tuple["Model", PassStats]:
        """Graph-level optimisation (folding, fusion, dead nodes) for concrete inputs."""
    def to_parts(self) -> ModelParts: ...

def supported_ops() -> List[str]:
    """Names of the supported ONNX operators, sorted."""

def _panic(message: str) -> None:
    """Panics inside the native module, as a bug would: raises ``IPUInternalError`` carrying ``message``
    (for the tests of that guarantee)."""

def supported_opsets() -> Tuple[int, int]:
    """The default-domain operator-set versions the operators implement: (first, last)."""

def elem_type_name(code: int) -> Optional[str]:
    """numpy's name for the element type with ONNX code ``code`` ("float32", "bfloat16", "float8_e4m3fn",
    ...), or None for a type models may not declare (an unsupported one raises ``UnsupportedOperatorError`` at
    import)."""

# -- executables -----------------------------------------------------------------

@final
class HostStream:
    """An input or output of an executable: as the host sees it (``dtype``, numpy's name) and as the device
    holds it (``device_type``: "float32", "float16", "int32" or "bool")."""

    name: str
    dtype: str
    shape: List[int]
    device_type: str
    def __new__(cls, name: str, dtype: str, shape: List[int], device_type: str) -> "HostStream": ...

@final
class TileTensor:
    """A variable on a tile, with the model node that owns it ("" for model inputs)."""

    name: str
    node: str
    bytes: int
    def __new__(cls, name: str, node: str, bytes: int) -> "TileTensor": ...

@final
class TileMemory:
    """Peak memory of one tile, by category (bytes); ``tile`` is the index within IPU ``ipu``.
    Always live: ``constants`` (of ``variables``), vertex state and all code; not always live:
    ``variables - constants`` (activations and temporaries at the peak)."""

    ipu: int
    tile: int
    variables: int
    constants: int
    vertex_state: int
    code: int
    exchange_code: int
    control_code: int
    total: int
    largest: List[TileTensor]  # live at the peak, largest first
    def __new__(
        cls,
        ipu: int,
        tile: int,
        variables: int,
        constants: int,
        vertex_state: int,
        code: int,
        exchange_code: int,
        control_code: int,
        total: int,
        largest: List[TileTensor],
    ) -> "TileMemory": ...

@final
class OpPlan:
    """What the op library decided for one operation (``name``: the model node it lowers)."""

    name: str
    kind: str  # "matmul", "conv", "map", "reduce", "rearrange", "ipu_copy", ...
    ipu: int
    plan: str
    tiles_used: int
    temp_bytes_per_tile: int
    estimated_cycles: int
    def __new__(
        cls,
        name: str,
        kind: str,
        ipu: int,
        plan: str,
        tiles_used: int,
        temp_bytes_per_tile: int,
        estimated_cycles: int,
    ) -> "OpPlan": ...

@final
class StepCost:
    """The estimated cost of one program step."""

    ipu: int  # the IPU of the replica whose program it belongs to (its pipeline stage)
    kind: str  # "compute", "exchange", "host_to_device", "device_to_host"
    name: str
    cycles: int
    bytes: int  # exchanged or streamed (0 for compute)
    items: int  # vertices of a compute step, copy descriptors of an exchange
    node: str  # the model node it belongs to ("" for host streams)
    tile: Optional[int]  # the tile (within the IPU) that set the cost
    live_bytes: int  # bytes of variables live on the IPU during the step
    terms: List[CostTerm]  # the cost formula's terms; they sum to cycles
    def __new__(
        cls,
        ipu: int,
        kind: str,
        name: str,
        cycles: int,
        bytes: int,
        items: int,
        node: str,
        tile: Optional[int],
        live_bytes: int,
        terms: List[CostTerm],
    ) -> "StepCost": ...

@final
class Variable:
    """A variable of a compiled program: a tensor in tile memory with its device element type
    (``device_type``: "float32", "float16", "int32", "bool"), the model node that made it ("" for
    model inputs), its kind ("input", "constant", "intermediate", "temporary"), shape, and the
    tiles it is spread over; ``ipu``: the replica's IPU whose program holds it."""

    ipu: int
    name: str
    node: str
    kind: str
    device_type: str
    shape: List[int]
    tiles: int
    def __new__(
        cls, ipu: int, name: str, node: str, kind: str, device_type: str, shape: List[int], tiles: int
    ) -> "Variable": ...

@final
class CostTerm:
    """One term of a step's cost formula (docs/cost-model.md). ``kind``: "vertex", "launch", "sync",
    "exchange", "descriptors", "ipu_link", "host_latency" or "host_link"."""

    kind: str
    name: str
    cycles: int
    def __new__(cls, kind: str, name: str, cycles: int) -> "CostTerm": ...

@final
class CarriedTensor:
    """A tensor one pipeline stage receives from an earlier one over the IPU-Links."""

    name: str
    bytes: int  # one micro-batch's, on the device
    from_ipu: int
    def __new__(cls, name: str, bytes: int, from_ipu: int) -> "CarriedTensor": ...

@final
class StageEstimate:
    """What one pipeline stage (one IPU of a replica) costs per micro-batch."""

    ipu: int
    nodes: int
    compute_cycles: int  # compute sets, exchanges and syncs of its program
    host_cycles: int  # model inputs and outputs it streams (shared host links included)
    copy_cycles: int  # receiving its carried tensors over the IPU-Links
    interval_cycles: int  # the sum of the three: one micro-batch on this stage
    carried_in: List[CarriedTensor]
    max_tile_bytes: int
    memory_bytes: int
    def __new__(
        cls,
        ipu: int,
        nodes: int,
        compute_cycles: int,
        host_cycles: int,
        copy_cycles: int,
        interval_cycles: int,
        carried_in: List[CarriedTensor],
        max_tile_bytes: int,
        memory_bytes: int,
    ) -> "StageEstimate": ...

@final
class PipelineEstimate:
    """The estimate of one call: its stages, pipeline fill and drain, the steady-state interval and the
    whole call's cycles; ``attempts``: plans the automatic sharder compiled (0 for one IPU or a manual
    plan)."""

    execution: str  # "pipelined" or "sharded"
    stages: List[StageEstimate]
    replicas: int
    device_iterations: int
    fill_cycles: int
    interval_cycles: int
    cycles_per_call: int
    attempts: int
    def __new__(
        cls,
        execution: str,
        stages: List[StageEstimate],
        replicas: int,
        device_iterations: int,
        fill_cycles: int,
        interval_cycles: int,
        cycles_per_call: int,
        attempts: int,
    ) -> "PipelineEstimate": ...

@final
class Placement:
    """Where the sharder put one node."""

    node: str
    op_type: str
    ipu: int
    def __new__(cls, node: str, op_type: str, ipu: int) -> "Placement": ...

@final
class RunStats:
    """Statistics of one run: estimated device cycles by kind, bytes moved, and the simulation's host time
    by kind of step."""

    cycles: int
    compute_cycles: int
    exchange_cycles: int
    host_cycles: int
    steps: int
    exchanged_bytes: int
    copied_bytes: int  # of exchanged_bytes, what the simulator copied (the rest: receive aliases)
    host_bytes: int
    wall_seconds: float
    compute_seconds: float
    exchange_seconds: float
    host_io_seconds: float
    host_memory_bytes: int  # host memory the loaded program's tile memory occupies
    checked: bool  # the program's memory bounds were verified at load (NEURENIX_SIM_CHECKED)
    # host seconds by step of Executable.steps, summed over the call's micro-batches and replicas (a fused
    # exchange's time is its compute step's)
    step_seconds: List[float]
    host_shadow_bytes: int  # of host_memory_bytes, the shadow regions of shadowed temporaries
    def __new__(
        cls,
        cycles: int,
        compute_cycles: int,
        exchange_cycles: int,
        host_cycles: int,
        steps: int,
        exchanged_bytes: int,
        copied_bytes: int,
        host_bytes: int,
        wall_seconds: float,
        compute_seconds: float,
        exchange_seconds: float,
        host_io_seconds: float,
        host_memory_bytes: int,
        checked: bool,
        step_seconds: List[float],
        host_shadow_bytes: int,
    ) -> "RunStats": ...

@final
class Executable:
    """A model compiled for simulated IPUs (one program per pipeline stage): its reports, and its
    programs, loaded on every replica on demand."""

    inputs: List[HostStream]  # one micro-batch
    outputs: List[HostStream]  # one micro-batch
    system: str
    system_info: SystemInfo
    num_ipus: int  # all replicas' IPUs
    num_stages: int
    replication_factor: int
    device_iterations: int
    estimate: PipelineEstimate
    precision: str
    memory_proportion: float
    enable_half_partials: bool
    fp8_format: str  # "e4m3" or "e5m2": matmul/conv operands under precision "float8"
    compile_seconds: float
    passes: PassStats
    placement: List[Placement]
    tiles: List[TileMemory]
    plans: List[OpPlan]
    steps: List[StepCost]
    variables: List[Variable]
    warnings: List[str]
    cycles_per_run: int  # one call: every micro-batch of every replica
    loaded: bool
    def load(
        self, threads: int = 0, stochastic_rounding: bool = False, seed: int = 0, fp_exceptions: bool = False
    ) -> None:
        """Loads the program into fresh tile memory (``threads``: simulator threads, 0 = default), with the
        floating-point behaviour of its runs: stochastic rounding from generators seeded from ``seed``, the
        IPU and the tile at load (their state carries from run to run); ``fp_exceptions`` raises ``IPUFloatingPointError`` at the first
        infinity or NaN an operation makes from finite operands."""
    def unload(self) -> None:
        """Frees the simulated tile memory."""
    def run(self, inputs: Sequence[bytes]) -> List[bytearray]:
        """Runs once (loading first if needed) on each input's little-endian bytes in its declared type,
        in input order, for micro-batch x device_iterations x replication_factor samples (micro-batch
        ``d * replicas + r`` to replica ``r`` in iteration ``d``); returns the outputs' bytes in their
        declared types, the micro-batches concatenated in order (fresh, writable)."""
    def last_run(self) -> Optional[RunStats]: ...
    def read_state(self, name: str) -> bytes:
        """A state tensor's bytes (training's weights and optimizer state) in its device type."""
    def run_replicated(
        self, inputs: List[List[bytes]], apply: bool, accumulators: List[str]
    ) -> Tuple[List[List[bytes]], RunStats]:
        """One training micro-batch on every replica; when ``apply``, the accumulators are all-reduced and the
        update runs."""
    def write_state(self, name: str, data: bytes) -> None:
        """Overwrites a state tensor (bytes in its device type) in every replica."""

def compile_training(
    model: Model,
    inputs: Sequence[TensorSpec],
    system: str,
    precision: str,
    memory_proportion: float,
    enable_half_partials: bool,
    loss: Tuple[str, str, str],
    optimizer: str,
    trainable: Optional[List[str]] = None,
    frozen: List[str] = ...,
    loss_scaling: float = 1.0,
    clip_norm: bool = False,
    state_dtype: str = "float32",
    gradient_outputs: List[str] = ...,
    fp8_format: str = "e4m3",
    accumulate: bool = False,
    replicas: int = 1,
) -> Tuple[Executable, TrainingInfo]:
    """Compiles one training step of ``model`` on one IPU of ``system`` (docs/training.md)."""

def compile(
    model: Model,
    inputs: Sequence[TensorSpec],
    system: str,
    num_ipus: int,
    precision: str,
    memory_proportion: float,
    enable_half_partials: bool,
    replication_factor: int = 1,
    device_iterations: int = 1,
    sharding: Union[None, str, List[str], List[Tuple[str, int]]] = None,
    execution: Optional[str] = None,
    progress: Optional[Callable[[str, int, int], object]] = None,
    fp8_format: str = "e4m3",
) -> Executable:
    """Compiles ``model`` for ``inputs`` (one micro-batch) on ``num_ipus`` IPUs of ``system``, in
    ``replication_factor`` replicas; ``sharding``: "auto" (or None), the node names at which stages begin, or
    (node name, IPU) pairs; ``execution``: "pipelined", "sharded" or None (pipelined when the device
    iterations fill the pipeline). ``progress`` is called with (stage, done, total) as the compile advances
    (stages "passes", "planning", "lowering", "allocation"); its exceptions are reported, not raised."""
