//! `compile` and `Executable`: a model compiled for the simulated IPUs, its
//! reports, and its execution (all of it in `neurenix_core::Executable`).

use std::sync::Mutex;

use neurenix_core::backend::{Backend, FloatingPointBehaviour};
use neurenix_core::compile::{compile as compile_model, CompileOptions};
use neurenix_core::executable::Executable;
use neurenix_core::lower::precision::{fp8_format_name, parse_fp8_format, Precision};
use neurenix_core::pipeline::Execution;
use neurenix_core::shard::Sharding;
use neurenix_sys::GraphBuilder;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};

use crate::errors::{guarded, lock, IntoPyResult};
use crate::model::{tensor_specs, PyModel};
use crate::records::{
    HostStream, OpPlan, PassStats, PipelineEstimate, Placement, RunStats, StepCost, SystemInfo,
    TensorSpec, TileMemory, Variable,
};

#[pyclass(module = "neurenix._native", name = "Executable", frozen)]
pub struct PyExecutable {
    pub(crate) exe: Mutex<Executable>,
    pub(crate) system: String,
}

/// How the nodes are spread over a replica's IPUs, as Python gives it:
/// "auto", a list of the node names at which stages begin, or a list of
/// (node name, IPU) pairs.
#[derive(FromPyObject)]
pub enum ShardingArg {
    Auto(String),
    Pairs(Vec<(String, u32)>),
    Starts(Vec<String>),
}

impl ShardingArg {
    fn to_core(self) -> neurenix_core::error::Result<Sharding> {
        match self {
            ShardingArg::Auto(s) if s == "auto" => Ok(Sharding::Auto),
            ShardingArg::Auto(s) => Err(neurenix_core::Error::InvalidArgument(format!(
                "sharding must be 'auto', a list of node names at which stages begin, or a mapping of node \
                 names to IPUs; got '{s}'"
            ))),
            ShardingArg::Pairs(p) => Ok(Sharding::NodeIpus(p)),
            ShardingArg::Starts(s) => Ok(Sharding::StageStarts(s)),
        }
    }
}

/// Compiles `model` for `inputs` (one micro-batch) on the system described
/// by `system` ("version=ipu2,num_ipus=16,..."). `progress`, if given, is
/// called with (stage, done, total) as the compile advances.
#[pyfunction]
#[pyo3(signature = (model, inputs, system, num_ipus, precision, memory_proportion, enable_half_partials,
                    replication_factor = 1, device_iterations = 1, sharding = None,
                    execution = None, progress = None, fp8_format = "e4m3"))]
#[allow(clippy::too_many_arguments)]
pub fn compile(
    py: Python<'_>,
    model: &PyModel,
    inputs: Vec<TensorSpec>,
    system: String,
    num_ipus: u32,
    precision: &str,
    memory_proportion: f64,
    enable_half_partials: bool,
    replication_factor: u32,
    device_iterations: u32,
    sharding: Option<ShardingArg>,
    execution: Option<String>,
    progress: Option<Py<PyAny>>,
    fp8_format: &str,
) -> PyResult<PyExecutable> {
    guarded(|| {
        let specs = tensor_specs(&inputs).py()?;
        let options = CompileOptions {
            precision: Precision::parse(precision).py()?,
            memory_proportion,
            enable_half_partials,
            num_ipus,
            replication_factor,
            device_iterations,
            sharding: sharding
                .map_or(Ok(Sharding::Auto), ShardingArg::to_core)
                .py()?,
            execution: execution
                .as_deref()
                .map(Execution::parse)
                .transpose()
                .py()?,
            fp8_format: parse_fp8_format(fp8_format).py()?,
        };
        let exe = py
            .detach(|| {
                let mut new_backend = || -> neurenix_core::error::Result<Box<dyn Backend>> {
                    Ok(Box::new(GraphBuilder::new(&system, 1)?))
                };
                let mut run = || compile_model(&model.model, &specs, &options, &mut new_backend);
                match progress {
                    None => run(),
                    Some(callback) => neurenix_core::progress::with_listener(
                        Box::new(move |stage, done, total| {
                            // A failing progress callback must not fail the compile.
                            Python::attach(|py| {
                                if let Err(e) = callback.call1(py, (stage, done, total)) {
                                    e.write_unraisable(py, None);
                                }
                            })
                        }),
                        run,
                    ),
                }
            })
            .py()?;
        Ok(PyExecutable {
            exe: Mutex::new(exe),
            system,
        })
    })
}

#[pymethods]
impl PyExecutable {
    /// The inputs `run` takes, in order.
    #[getter]
    fn inputs(&self) -> Vec<HostStream> {
        lock(&self.exe).inputs().iter().map(Into::into).collect()
    }

    /// The outputs `run` returns, in order.
    #[getter]
    fn outputs(&self) -> Vec<HostStream> {
        lock(&self.exe).outputs().iter().map(Into::into).collect()
    }

    /// The system description compiled for.
    #[getter]
    fn system(&self) -> String {
        self.system.clone()
    }

    #[getter]
    fn system_info(&self) -> SystemInfo {
        lock(&self.exe).report().system.clone().into()
    }

    /// IPUs in all (every replica's).
    #[getter]
    fn num_ipus(&self) -> u32 {
        lock(&self.exe).options.num_ipus
    }

    /// IPUs of one replica that hold a pipeline stage.
    #[getter]
    fn num_stages(&self) -> u32 {
        lock(&self.exe).stages.len() as u32
    }

    #[getter]
    fn replication_factor(&self) -> u32 {
        lock(&self.exe).options.replication_factor
    }

    #[getter]
    fn device_iterations(&self) -> u32 {
        lock(&self.exe).options.device_iterations
    }

    /// The estimate of one call, stage by stage.
    #[getter]
    fn estimate(&self) -> PipelineEstimate {
        let exe = lock(&self.exe);
        PipelineEstimate::new_from(&exe.estimate, exe.shard.attempts)
    }

    #[getter]
    fn precision(&self) -> &'static str {
        lock(&self.exe).options.precision.name()
    }

    #[getter]
    fn memory_proportion(&self) -> f64 {
        lock(&self.exe).options.memory_proportion
    }

    #[getter]
    fn enable_half_partials(&self) -> bool {
        lock(&self.exe).options.enable_half_partials
    }

    /// "e4m3" or "e5m2": the float8 format of matrix-product operands
    /// (meaningful under precision "float8").
    #[getter]
    fn fp8_format(&self) -> &'static str {
        fp8_format_name(lock(&self.exe).options.fp8_format)
    }

    #[getter]
    fn compile_seconds(&self) -> f64 {
        lock(&self.exe).compile_seconds
    }

    #[getter]
    fn passes(&self) -> PassStats {
        (&lock(&self.exe).lowered.passes).into()
    }

    /// Every node lowered, in program order, with its IPU.
    #[getter]
    fn placement(&self) -> Vec<Placement> {
        lock(&self.exe)
            .lowered
            .placement
            .iter()
            .map(Into::into)
            .collect()
    }

    /// Tiles that hold anything, with their peak memory.
    #[getter]
    fn tiles(&self) -> Vec<TileMemory> {
        lock(&self.exe)
            .report()
            .tiles
            .iter()
            .map(Into::into)
            .collect()
    }

    /// What the op library decided for each operation.
    #[getter]
    fn plans(&self) -> Vec<OpPlan> {
        lock(&self.exe)
            .report()
            .plans
            .iter()
            .map(Into::into)
            .collect()
    }

    /// The estimated cost of every step of the program.
    #[getter]
    fn steps(&self) -> Vec<StepCost> {
        lock(&self.exe)
            .report()
            .steps
            .iter()
            .map(Into::into)
            .collect()
    }

    /// Every variable of every stage's program, with its device type.
    #[getter]
    fn variables(&self) -> Vec<Variable> {
        lock(&self.exe)
            .report()
            .variables
            .iter()
            .map(Into::into)
            .collect()
    }

    #[getter]
    fn warnings(&self) -> Vec<String> {
        lock(&self.exe).report().warnings.clone()
    }

    #[getter]
    fn cycles_per_run(&self) -> u64 {
        lock(&self.exe).report().cycles_per_run
    }

    /// Loads the program into fresh tile memory (`run` does it when needed),
    /// with the floating-point behaviour of its runs.
    #[pyo3(signature = (threads = 0, stochastic_rounding = false, seed = 0, fp_exceptions = false))]
    fn load(
        &self,
        py: Python<'_>,
        threads: u32,
        stochastic_rounding: bool,
        seed: u64,
        fp_exceptions: bool,
    ) -> PyResult<()> {
        let fp = FloatingPointBehaviour {
            stochastic_rounding,
            seed,
            exceptions: fp_exceptions,
        };
        guarded(|| py.detach(|| lock(&self.exe).load(threads, fp)).py())
    }

    /// Frees the simulated tile memory.
    fn unload(&self) {
        lock(&self.exe).unload();
    }

    #[getter]
    fn loaded(&self) -> bool {
        lock(&self.exe).is_loaded()
    }

    /// Runs once. `inputs`: each input's little-endian bytes in its declared
    /// type, in input order (`bytes` objects, read in place). Returns the
    /// outputs' bytes in their declared types (fresh `bytearray`s).
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<Bound<'py, PyBytes>>,
    ) -> PyResult<Vec<Bound<'py, PyByteArray>>> {
        guarded(|| {
            // (bytes objects are immutable: their contents may be read
            // without the interpreter's lock.)
            let views: Vec<&[u8]> = inputs.iter().map(|b| b.as_bytes()).collect();
            let outs = py.detach(|| lock(&self.exe).run(&views)).py()?;
            // (Fresh and writable: numpy reads them in place.)
            Ok(outs.iter().map(|o| PyByteArray::new(py, o)).collect())
        })
    }

    /// Statistics of the last run (None before the first).
    fn last_run(&self) -> Option<RunStats> {
        lock(&self.exe).last_run().map(Into::into)
    }

    /// The bytes of state tensor `name` (training's weights and optimizer
    /// state) in its device type, as the last run left them.
    fn read_state<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyBytes>> {
        guarded(|| {
            let data = lock(&self.exe).read_state(name).py()?;
            Ok(PyBytes::new(py, &data))
        })
    }

    /// One training micro-batch on every replica: `inputs[r]` are replica r's
    /// inputs (host bytes in the declared types); when `apply`, the
    /// accumulators named are all-reduced and the update runs. Returns each
    /// replica's outputs and the step's statistics.
    fn run_replicated<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<Vec<Vec<u8>>>,
        apply: bool,
        accumulators: Vec<String>,
    ) -> PyResult<(Vec<Vec<Bound<'py, PyBytes>>>, RunStats)> {
        guarded(|| {
            let (outs, stats) = py
                .detach(|| {
                    let views: Vec<Vec<&[u8]>> = inputs
                        .iter()
                        .map(|r| r.iter().map(Vec::as_slice).collect())
                        .collect();
                    lock(&self.exe).run_replicated(&views, apply, &accumulators)
                })
                .py()?;
            let outs = outs
                .iter()
                .map(|r| r.iter().map(|o| PyBytes::new(py, o)).collect())
                .collect();
            Ok((outs, stats.into()))
        })
    }

    /// Overwrites state tensor `name` (bytes in its device type).
    fn write_state(&self, name: &str, data: Vec<u8>) -> PyResult<()> {
        guarded(|| lock(&self.exe).write_state(name, &data).py())
    }
}
