//! `compile` and `Executable`: a model compiled for the simulated IPUs, its
//! reports, and its execution (all of it in `neurenix_core::Executable`).

use std::sync::Mutex;

use neurenix_core::compile::{compile as compile_model, CompileOptions};
use neurenix_core::executable::Executable;
use neurenix_core::lower::precision::Precision;
use neurenix_sys::GraphBuilder;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{guarded, lock, IntoPyResult};
use crate::model::{tensor_specs, PyModel};
use crate::records::{
    HostStream, OpPlan, PassStats, Placement, RunStats, StepCost, SystemInfo, TensorSpec,
    TileMemory,
};

#[pyclass(module = "neurenix._native", name = "Executable", frozen)]
pub struct PyExecutable {
    exe: Mutex<Executable>,
    system: String,
}

/// Compiles `model` for `inputs` on the system described by `system`
/// ("version=ipu2,num_ipus=16,...").
#[pyfunction]
#[pyo3(signature = (model, inputs, system, num_ipus, precision, memory_proportion, enable_half_partials))]
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
) -> PyResult<PyExecutable> {
    guarded(|| {
        let specs = tensor_specs(&inputs).py()?;
        let options = CompileOptions {
            precision: Precision::parse(precision).py()?,
            memory_proportion,
            enable_half_partials,
            num_ipus,
        };
        let exe = py
            .detach(|| {
                let backend = GraphBuilder::new(&system, num_ipus)?;
                compile_model(&model.model, &specs, &options, Box::new(backend))
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

    /// IPUs the program spans.
    #[getter]
    fn num_ipus(&self) -> u32 {
        lock(&self.exe).report().num_ipus
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

    #[getter]
    fn warnings(&self) -> Vec<String> {
        lock(&self.exe).report().warnings.clone()
    }

    #[getter]
    fn cycles_per_run(&self) -> u64 {
        lock(&self.exe).report().cycles_per_run
    }

    /// Loads the program into fresh tile memory (`run` does it when needed).
    #[pyo3(signature = (threads = 0))]
    fn load(&self, py: Python<'_>, threads: u32) -> PyResult<()> {
        guarded(|| py.detach(|| lock(&self.exe).load(threads)).py())
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
    /// type, in input order. Returns the outputs' bytes in their declared
    /// types.
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<Vec<u8>>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        guarded(|| {
            let outs = py
                .detach(|| {
                    let views: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
                    lock(&self.exe).run(&views)
                })
                .py()?;
            Ok(outs.iter().map(|o| PyBytes::new(py, o)).collect())
        })
    }

    /// Statistics of the last run (None before the first).
    fn last_run(&self) -> Option<RunStats> {
        lock(&self.exe).last_run().map(Into::into)
    }
}
