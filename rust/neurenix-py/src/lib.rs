//! The `neurenix._native` module: thin wrappers over neurenix-core and
//! neurenix-sys. The Python API lives in `python/neurenix/`; this module's
//! type stub is `python/neurenix/_native.pyi`.

use pyo3::prelude::*;

mod device;
mod errors;
mod executable;
mod model;
mod records;
mod training;

/// Validates an IPU model description and returns its figures.
#[pyfunction]
fn describe_system(spec: &str) -> PyResult<records::SystemInfo> {
    use errors::IntoPyResult;
    errors::guarded(|| Ok(neurenix_sys::describe_system(spec).py()?.into()))
}

/// Names of the supported operators, sorted.
#[pyfunction]
fn supported_ops() -> Vec<String> {
    neurenix_core::ops::supported_ops()
}

/// The default-domain operator sets the operators implement: (first, last).
#[pyfunction]
fn supported_opsets() -> (i64, i64) {
    let r = neurenix_core::model_parts::SUPPORTED_OPSETS;
    (*r.start(), *r.end())
}

/// numpy's name for the element type of ONNX code `code` (None: a type
/// models may not declare).
#[pyfunction]
fn elem_type_name(code: i32) -> Option<&'static str> {
    neurenix_core::dtype::ElemType::from_onnx(code).map(|t| t.name())
}

/// Panics inside the native module: what any bug would do. It must surface
/// as `IPUInternalError` carrying `message` (tests of the panic guard).
#[pyfunction]
fn _panic(message: String) -> PyResult<()> {
    errors::guarded(|| std::panic::panic_any(message))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<model::PyModel>()?;
    m.add_class::<executable::PyExecutable>()?;
    m.add_class::<device::PyDeviceManager>()?;
    m.add_class::<device::PyDevice>()?;
    m.add_class::<records::SystemInfo>()?;
    m.add_class::<records::TileMemory>()?;
    m.add_class::<records::TileTensor>()?;
    m.add_class::<records::OpPlan>()?;
    m.add_class::<records::StepCost>()?;
    m.add_class::<records::CostTerm>()?;
    m.add_class::<records::Variable>()?;
    m.add_class::<records::RunStats>()?;
    m.add_class::<records::CarriedTensor>()?;
    m.add_class::<records::StageEstimate>()?;
    m.add_class::<records::PipelineEstimate>()?;
    m.add_class::<records::PassStats>()?;
    m.add_class::<records::Placement>()?;
    m.add_class::<records::TensorSpec>()?;
    m.add_class::<records::HostStream>()?;
    m.add_class::<records::DeviceInfo>()?;
    m.add_class::<records::ValueParts>()?;
    m.add_class::<records::TensorParts>()?;
    m.add_class::<records::AttrParts>()?;
    m.add_class::<records::NodeParts>()?;
    m.add_class::<records::ModelParts>()?;
    m.add_function(wrap_pyfunction!(executable::compile, m)?)?;
    m.add_function(wrap_pyfunction!(training::compile_training, m)?)?;
    m.add_class::<records::StateSpec>()?;
    m.add_class::<records::TrainingInfo>()?;
    m.add_function(wrap_pyfunction!(describe_system, m)?)?;
    m.add_function(wrap_pyfunction!(supported_ops, m)?)?;
    m.add_function(wrap_pyfunction!(supported_opsets, m)?)?;
    m.add_function(wrap_pyfunction!(elem_type_name, m)?)?;
    m.add_function(wrap_pyfunction!(_panic, m)?)?;
    Ok(())
}
