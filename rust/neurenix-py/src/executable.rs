//! `compile` and `Executable`: a model compiled for the simulated IPUs, its
//! reports, and its execution.

use std::sync::Mutex;
use std::time::Instant;

use neurenix_core::compile::{lower_model, CompileOptions, Lowered};
use neurenix_core::lower::precision::Precision;
use neurenix_core::lower::Binding;
use neurenix_core::tensor::{device_to_host, host_to_device};
use neurenix_core::Error;
use neurenix_sys::{SimBackend, SimEngine, SimExecutable};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::errors::IntoPyResult;
use crate::model::{input_specs, PyModel};

#[pyclass(module = "neurenix._native", name = "Executable")]
pub struct PyExecutable {
    exe: SimExecutable,
    lowered: Lowered,
    engine: Mutex<Option<SimEngine>>,
    compile_seconds: f64,
    options: CompileOptions,
    system: String,
}

/// Compiles `model` for `inputs` [(name, dtype, shape)] on the system
/// described by `system` ("version=ipu2,num_ipus=16,...").
#[pyfunction]
#[pyo3(signature = (model, inputs, system, num_ipus, precision, memory_proportion, half_partials))]
#[allow(clippy::too_many_arguments)]
pub fn compile(
    py: Python<'_>,
    model: &PyModel,
    inputs: Vec<(String, String, Vec<usize>)>,
    system: String,
    num_ipus: u32,
    precision: &str,
    memory_proportion: f64,
    half_partials: bool,
) -> PyResult<PyExecutable> {
    let specs = input_specs(inputs)?;
    let options = CompileOptions {
        precision: Precision::parse(precision).py()?,
        memory_proportion,
        enable_half_partials: half_partials,
        num_ipus,
    };
    let m = &model.model;
    let (exe, lowered, secs) = py
        .detach(|| -> Result<_, Error> {
            let t0 = Instant::now();
            let mut backend = SimBackend::new(&system, num_ipus)?;
            let lowered = lower_model(m, &specs, &options, &mut backend)?;
            let exe = backend.compile()?;
            Ok((exe, lowered, t0.elapsed().as_secs_f64()))
        })
        .py()?;
    Ok(PyExecutable {
        exe,
        lowered,
        engine: Mutex::new(None),
        compile_seconds: secs,
        options,
        system,
    })
}

fn bindings<'py>(py: Python<'py>, b: &[Binding]) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for x in b {
        out.append((
            x.name.clone(),
            x.dtype.name(),
            x.shape.clone(),
            x.device_dtype.name(),
        ))?;
    }
    Ok(out)
}

#[pymethods]
impl PyExecutable {
    /// [(name, dtype, shape, device dtype)] in the order `run` takes them.
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        bindings(py, &self.lowered.inputs)
    }

    /// [(name, dtype, shape, device dtype)] in the order `run` returns them.
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        bindings(py, &self.lowered.outputs)
    }

    #[getter]
    fn system(&self) -> String {
        self.system.clone()
    }

    #[getter]
    fn num_ipus(&self) -> u32 {
        self.exe.num_ipus_used()
    }

    /// Everything the compiler decided, as plain data.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let s = self.exe.system();
        let sys = PyDict::new(py);
        sys.set_item("version", &s.version)?;
        sys.set_item("chip", &s.chip)?;
        sys.set_item("num_ipus", s.num_ipus)?;
        sys.set_item("tiles_per_ipu", s.tiles_per_ipu)?;
        sys.set_item("bytes_per_tile", s.bytes_per_tile)?;
        sys.set_item("clock_hz", s.clock_hz)?;
        sys.set_item("fp16_flops_per_cycle", s.fp16_flops_per_cycle)?;
        sys.set_item("fp32_flops_per_cycle", s.fp32_flops_per_cycle)?;
        sys.set_item("fp8_flops_per_cycle", s.fp8_flops_per_cycle)?;
        sys.set_item("worker_threads", s.worker_threads)?;
        sys.set_item("exchange_bytes_per_cycle", s.exchange_bytes_per_cycle)?;
        sys.set_item("sync_cycles", s.sync_cycles)?;
        sys.set_item("ipu_link_bytes_per_sec", s.ipu_link_bytes_per_sec)?;
        sys.set_item("ipu_links", s.ipu_links)?;
        sys.set_item("host_link_bytes_per_sec", s.host_link_bytes_per_sec)?;
        d.set_item("system", sys)?;
        d.set_item("num_ipus", self.exe.num_ipus_used())?;
        d.set_item("precision", self.options.precision.name())?;
        d.set_item("memory_proportion", self.options.memory_proportion)?;
        d.set_item("half_partials", self.options.enable_half_partials)?;
        d.set_item("compile_seconds", self.compile_seconds)?;
        let st = &self.lowered.stats;
        let passes = PyDict::new(py);
        passes.set_item("nodes_in", st.nodes_in)?;
        passes.set_item("folded", st.folded)?;
        passes.set_item("dead", st.dead)?;
        passes.set_item("fused", st.fused)?;
        passes.set_item("nodes_out", st.nodes_out)?;
        d.set_item("passes", passes)?;
        d.set_item("placement", self.lowered.placement.clone())?;
        let ops = PyList::empty(py);
        for r in self.exe.op_records() {
            ops.append((
                r.name,
                r.kind,
                r.ipu,
                r.plan,
                r.tiles_used,
                r.temp_bytes,
                r.est_cycles,
            ))?;
        }
        d.set_item("ops", ops)?;
        d.set_item("warnings", self.exe.warnings())?;
        let tiles = PyList::empty(py);
        for t in self.exe.tile_memory() {
            tiles.append((
                t.tile,
                t.variables,
                t.vertex_state,
                t.code,
                t.exchange_code,
                t.control_code,
            ))?;
        }
        d.set_item("tiles", tiles)?;
        let steps = PyList::empty(py);
        for sc in self.exe.step_costs() {
            let kind = match sc.kind {
                0 => "compute",
                1 => "exchange",
                2 => "host_to_device",
                _ => "device_to_host",
            };
            steps.append((kind, sc.name, sc.cycles, sc.bytes, sc.items))?;
        }
        d.set_item("steps", steps)?;
        d.set_item("cycles_per_run", self.exe.cycles_per_run())?;
        Ok(d)
    }

    /// Loads the program into fresh tile memory (done by `run` when needed).
    #[pyo3(signature = (threads = 0))]
    fn load(&self, py: Python<'_>, threads: u32) -> PyResult<()> {
        let eng = py.detach(|| self.exe.load(threads)).py()?;
        *self.engine.lock().unwrap() = Some(eng);
        Ok(())
    }

    /// Frees the simulated tile memory.
    fn unload(&self) {
        *self.engine.lock().unwrap() = None;
    }

    #[getter]
    fn loaded(&self) -> bool {
        self.engine.lock().unwrap().is_some()
    }

    /// Runs once. `inputs`: raw little-endian bytes of each input in its
    /// declared type, in input order. Returns the outputs' raw bytes in
    /// their declared types.
    fn run<'py>(&self, py: Python<'py>, inputs: Vec<Vec<u8>>) -> PyResult<Bound<'py, PyList>> {
        if inputs.len() != self.lowered.inputs.len() {
            return Err(crate::errors::to_py(Error::InputMismatch {
                input: String::new(),
                message: format!(
                    "expected {} inputs, got {}",
                    self.lowered.inputs.len(),
                    inputs.len()
                ),
            }));
        }
        let outs = py
            .detach(|| -> Result<Vec<Vec<u8>>, Error> {
                let mut dev = Vec::with_capacity(inputs.len());
                for (b, data) in self.lowered.inputs.iter().zip(&inputs) {
                    let expect = b.shape.iter().product::<usize>() * b.dtype.size();
                    if data.len() != expect {
                        return Err(Error::InputMismatch {
                            input: b.name.clone(),
                            message: format!(
                                "input '{}' needs {expect} bytes, got {}",
                                b.name,
                                data.len()
                            ),
                        });
                    }
                    dev.push(host_to_device(b.dtype, data, b.device_dtype, &b.name)?);
                }
                let mut guard = self.engine.lock().unwrap();
                if guard.is_none() {
                    *guard = Some(self.exe.load(0)?);
                }
                let raw = guard.as_mut().unwrap().run(&dev)?;
                raw.iter()
                    .zip(&self.lowered.outputs)
                    .map(|(r, b)| device_to_host(b.device_dtype, r, b.dtype))
                    .collect()
            })
            .py()?;
        let list = PyList::empty(py);
        for o in outs {
            list.append(PyBytes::new(py, &o))?;
        }
        Ok(list)
    }

    /// Statistics of the last run (None before the first).
    fn last_run<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let guard = self.engine.lock().unwrap();
        let Some(eng) = guard.as_ref() else {
            return Ok(None);
        };
        let s = eng.last_run();
        if s.steps == 0 {
            return Ok(None);
        }
        let d = PyDict::new(py);
        d.set_item("cycles", s.cycles)?;
        d.set_item("compute_cycles", s.compute_cycles)?;
        d.set_item("exchange_cycles", s.exchange_cycles)?;
        d.set_item("host_cycles", s.host_cycles)?;
        d.set_item("steps", s.steps)?;
        d.set_item("exchanged_bytes", s.exchanged_bytes)?;
        d.set_item("host_bytes", s.host_bytes)?;
        d.set_item("wall_seconds", s.wall_seconds)?;
        d.set_item("compute_seconds", s.compute_seconds)?;
        d.set_item("exchange_seconds", s.exchange_seconds)?;
        d.set_item("host_io_seconds", s.host_io_seconds)?;
        d.set_item("arena_bytes", eng.arena_bytes())?;
        Ok(Some(d))
    }
}
