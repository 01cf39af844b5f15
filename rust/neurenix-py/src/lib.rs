//! The `neurenix._native` module: thin wrappers over neurenix-core and
//! neurenix-sys. The Python API lives in `python/neurenix/`; its type stub
//! is `python/neurenix/_native.pyi`.

use pyo3::prelude::*;

mod device;
mod errors;
mod executable;
mod model;

/// Validates an IPU model description and returns its figures.
#[pyfunction]
fn describe_system<'py>(py: Python<'py>, spec: &str) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    use errors::IntoPyResult;
    let s = neurenix_sys::describe_system(spec).py()?;
    let d = pyo3::types::PyDict::new(py);
    d.set_item("version", s.version)?;
    d.set_item("chip", s.chip)?;
    d.set_item("num_ipus", s.num_ipus)?;
    d.set_item("tiles_per_ipu", s.tiles_per_ipu)?;
    d.set_item("bytes_per_tile", s.bytes_per_tile)?;
    d.set_item("clock_hz", s.clock_hz)?;
    d.set_item("fp16_flops_per_cycle", s.fp16_flops_per_cycle)?;
    d.set_item("fp32_flops_per_cycle", s.fp32_flops_per_cycle)?;
    d.set_item("fp8_flops_per_cycle", s.fp8_flops_per_cycle)?;
    Ok(d)
}

/// Names of the supported operators.
#[pyfunction]
fn supported_ops() -> Vec<String> {
    neurenix_core::ops::supported_ops()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<model::PyModel>()?;
    m.add_class::<executable::PyExecutable>()?;
    m.add_class::<device::PyDeviceManager>()?;
    m.add_class::<device::PyDevice>()?;
    m.add_function(wrap_pyfunction!(executable::compile, m)?)?;
    m.add_function(wrap_pyfunction!(describe_system, m)?)?;
    m.add_function(wrap_pyfunction!(supported_ops, m)?)?;
    Ok(())
}
