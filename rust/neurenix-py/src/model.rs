//! `Model`: the core IR seen from Python. Front ends (the ONNX importer in
//! `neurenix.hardware.graphcore.onnx_import`) build it from a `ModelParts`;
//! `to_parts` gives one back for export.

use neurenix_core::compile::optimize;
use neurenix_core::dtype::ElemType;
use neurenix_core::ir::Model;
use neurenix_core::passes::TensorSpec as CoreTensorSpec;
use neurenix_core::Error;
use pyo3::prelude::*;

use crate::errors::{guarded, IntoPyResult};
use crate::records::{ModelParts, PassStats, TensorSpec, ValueParts};

#[pyclass(module = "neurenix._native", name = "Model", frozen)]
pub struct PyModel {
    pub model: Model,
}

#[pymethods]
impl PyModel {
    /// Builds and checks a model from its plain-data form.
    #[staticmethod]
    fn from_parts(py: Python<'_>, parts: ModelParts) -> PyResult<PyModel> {
        guarded(|| {
            let parts = parts.into_core().map_err(Error::model).py()?;
            let model = py.detach(|| Model::from_parts(&parts)).py()?;
            Ok(PyModel { model })
        })
    }

    /// The declared graph inputs.
    fn inputs(&self) -> Vec<ValueParts> {
        let m = &self.model;
        m.graph
            .inputs
            .iter()
            .map(|&v| (&m.value_parts(v)).into())
            .collect()
    }

    /// The declared graph outputs.
    fn outputs(&self) -> Vec<ValueParts> {
        let m = &self.model;
        m.graph
            .outputs
            .iter()
            .map(|&v| (&m.value_parts(v)).into())
            .collect()
    }

    #[getter]
    fn opset(&self) -> i64 {
        self.model.opset
    }

    #[getter]
    fn num_nodes(&self) -> usize {
        self.model.graph.nodes.len()
    }

    /// Graph-level optimisation for concrete inputs: the optimised model and
    /// what the passes did.
    fn optimize(&self, py: Python<'_>, inputs: Vec<TensorSpec>) -> PyResult<(PyModel, PassStats)> {
        guarded(|| {
            let specs = tensor_specs(&inputs).py()?;
            let (model, stats) = py.detach(|| optimize(&self.model, &specs)).py()?;
            Ok((PyModel { model }, (&stats).into()))
        })
    }

    /// The model as plain data (the inverse of `from_parts`).
    fn to_parts(&self) -> PyResult<ModelParts> {
        guarded(|| Ok((&self.model.to_parts()).into()))
    }
}

/// The core's tensor specs; an element type the IPU cannot take is named.
pub fn tensor_specs(inputs: &[TensorSpec]) -> Result<Vec<CoreTensorSpec>, Error> {
    inputs
        .iter()
        .map(|s| {
            let dtype = ElemType::from_name(&s.dtype).map_err(|_| Error::InputMismatch {
                input: s.name.clone(),
                message: format!(
                    "input '{}' has element type {}, which the IPU cannot take",
                    s.name, s.dtype
                ),
            })?;
            Ok(CoreTensorSpec {
                name: s.name.clone(),
                dtype,
                shape: s.shape.clone(),
            })
        })
        .collect()
}
