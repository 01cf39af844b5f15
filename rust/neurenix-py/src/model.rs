//! `Model`: the core IR seen from Python. Front ends (the ONNX importer in
//! `neurenix.hardware.graphcore.onnx_import`) build it from plain Python
//! data; `to_parts` gives the same kind of data back for export.

use std::collections::BTreeMap;

use neurenix_core::dtype::ElemType;
use neurenix_core::ir::{Attr, Dim, Graph, Model, Node, Value};
use neurenix_core::passes::InputSpec;
use neurenix_core::tensor::HostTensor;
use neurenix_core::Error;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::errors::IntoPyResult;

fn elem_type(code: i32, what: &str) -> Result<ElemType, Error> {
    ElemType::from_onnx(code)
        .ok_or_else(|| Error::model(format!("{what}: unsupported element type code {code}")))
}

fn dims(spec: Option<Vec<Bound<'_, PyAny>>>) -> PyResult<Option<Vec<Dim>>> {
    let Some(spec) = spec else { return Ok(None) };
    let mut out = Vec::new();
    for d in spec {
        if let Ok(n) = d.extract::<i64>() {
            if n < 0 {
                out.push(Dim::Symbolic(String::new()));
            } else {
                out.push(Dim::Fixed(n as usize));
            }
        } else if let Ok(s) = d.extract::<String>() {
            out.push(Dim::Symbolic(s));
        } else {
            out.push(Dim::Symbolic(String::new()));
        }
    }
    Ok(Some(out))
}

fn tensor(dt: i32, shape: Vec<usize>, data: &[u8], what: &str) -> Result<HostTensor, Error> {
    let dt = elem_type(dt, what)?;
    HostTensor::from_bytes(dt, &shape, data).map_err(|e| Error::model(format!("{what}: {e}")))
}

fn attr(node: &str, name: &str, kind: &str, value: &Bound<'_, PyAny>) -> PyResult<Attr> {
    let what = format!("node '{node}' attribute '{name}'");
    Ok(match kind {
        "i" => Attr::Int(value.extract()?),
        "f" => Attr::Float(value.extract()?),
        "s" => Attr::String(value.extract()?),
        "ints" => Attr::Ints(value.extract()?),
        "floats" => Attr::Floats(value.extract()?),
        "strings" => Attr::Strings(value.extract()?),
        "t" => {
            let (dt, shape, data): (i32, Vec<usize>, Vec<u8>) = value.extract()?;
            Attr::Tensor(tensor(dt, shape, &data, &what).py()?)
        }
        other => {
            return Err(crate::errors::to_py(Error::model(format!(
            "{what}: attributes of kind '{other}' (sparse tensors, type protos) are not supported"
        ))))
        }
    })
}

#[pyclass(module = "neurenix._native", name = "Model", frozen)]
pub struct PyModel {
    pub model: Model,
}

#[pymethods]
impl PyModel {
    /// Builds a model from plain data:
    /// inputs/outputs: [(name, elem_type, dims or None)] (dims: int, -1 or a name),
    /// initializers: [(name, elem_type, shape, raw little-endian bytes)],
    /// nodes: [(name, op_type, domain, [input names, "" = omitted], [output names],
    ///          [(attr name, kind, value)])].
    #[staticmethod]
    #[pyo3(signature = (name, opset, inputs, outputs, initializers, nodes))]
    fn from_parts(
        name: String,
        opset: i64,
        inputs: Vec<(String, i32, Option<Vec<Bound<'_, PyAny>>>)>,
        outputs: Vec<(String, i32, Option<Vec<Bound<'_, PyAny>>>)>,
        initializers: Vec<(String, i32, Vec<usize>, Vec<u8>)>,
        nodes: Vec<(
            String,
            String,
            String,
            Vec<String>,
            Vec<String>,
            Vec<(String, String, Bound<'_, PyAny>)>,
        )>,
    ) -> PyResult<PyModel> {
        let mut g = Graph::default();
        for (n, dt, _shape, data) in &initializers {
            let t = tensor(*dt, _shape.clone(), data, &format!("initializer '{n}'")).py()?;
            let v = g.value_named(n);
            g.set_constant(v, t);
        }
        for (n, dt, shape) in inputs {
            let v = g.value_named(&n);
            if g.value(v).constant.is_some() {
                // ONNX allows initializers to be listed as inputs too (defaults):
                // they stay constants here.
                continue;
            }
            let d = if dt == 0 {
                None
            } else {
                Some(elem_type(dt, &format!("input '{n}'")).py()?)
            };
            let val = g.value_mut(v);
            val.dtype = d;
            val.shape = dims(shape)?;
            g.inputs.push(v);
        }
        for (i, (n, op_type, domain, ins, outs, attrs)) in nodes.into_iter().enumerate() {
            let node_name = if n.is_empty() {
                format!("{op_type}_{i}")
            } else {
                n
            };
            let inputs: Vec<Option<usize>> = ins
                .iter()
                .map(|s| {
                    if s.is_empty() {
                        None
                    } else {
                        Some(g.value_named(s))
                    }
                })
                .collect();
            let mut outputs = Vec::new();
            for s in &outs {
                if s.is_empty() {
                    // An omitted optional output: give it a private name.
                    outputs.push(g.fresh_value(&format!("{node_name}/unused")));
                } else {
                    outputs.push(g.value_named(s));
                }
            }
            let mut amap = BTreeMap::new();
            for (an, kind, value) in attrs {
                // Subgraph attributes belong to control-flow operators, which
                // are reported as unsupported by name; nothing reads them.
                if kind == "g" {
                    continue;
                }
                let a = attr(&node_name, &an, &kind, &value)?;
                amap.insert(an, a);
            }
            g.nodes.push(Node {
                name: node_name,
                op_type,
                domain,
                inputs,
                outputs,
                attrs: amap,
            });
        }
        for (n, dt, shape) in outputs {
            let v = g.find(&n).ok_or_else(|| {
                crate::errors::to_py(Error::model(format!(
                    "graph output '{n}' is not produced by any node, input or initializer"
                )))
            })?;
            let val = g.value_mut(v);
            if dt != 0 && val.constant.is_none() {
                val.dtype = Some(elem_type(dt, &format!("output '{n}'")).py()?);
            }
            if val.constant.is_none() {
                val.shape = dims(shape)?;
            }
            g.outputs.push(v);
        }
        Ok(PyModel {
            model: Model {
                graph: g,
                opset,
                name,
            },
        })
    }

    /// Declared inputs: [(name, dtype name or None, dims or None)].
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        describe(py, &self.model.graph, &self.model.graph.inputs)
    }

    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        describe(py, &self.model.graph, &self.model.graph.outputs)
    }

    #[getter]
    fn opset(&self) -> i64 {
        self.model.opset
    }

    #[getter]
    fn num_nodes(&self) -> usize {
        self.model.graph.nodes.len()
    }

    /// Graph-level optimisation for concrete inputs [(name, dtype, shape)]:
    /// returns (optimised model, stats dict).
    fn optimize<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<(String, String, Vec<usize>)>,
    ) -> PyResult<(PyModel, Bound<'py, PyDict>)> {
        let specs = input_specs(inputs)?;
        let (m, st) = py
            .detach(|| neurenix_core::compile::optimize(&self.model, &specs))
            .py()?;
        let d = PyDict::new(py);
        d.set_item("nodes_in", st.nodes_in)?;
        d.set_item("folded", st.folded)?;
        d.set_item("dead", st.dead)?;
        d.set_item("fused", st.fused)?;
        d.set_item("nodes_out", st.nodes_out)?;
        Ok((PyModel { model: m }, d))
    }

    /// The model as plain data, the inverse of `from_parts` (constants that
    /// nodes or outputs read become initializers).
    fn to_parts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let g = &self.model.graph;
        let d = PyDict::new(py);
        d.set_item("name", &self.model.name)?;
        d.set_item("opset", self.model.opset)?;
        d.set_item("inputs", describe_codes(py, g, &g.inputs)?)?;
        d.set_item("outputs", describe_codes(py, g, &g.outputs)?)?;
        let mut used = vec![false; g.values.len()];
        for n in &g.nodes {
            for &v in n.inputs.iter().flatten() {
                used[v] = true;
            }
        }
        for &o in &g.outputs {
            used[o] = true;
        }
        let inits = PyList::empty(py);
        for (v, val) in g.values.iter().enumerate() {
            if let (true, Some(c)) = (used[v], &val.constant) {
                let shape: Vec<usize> = c.shape().to_vec();
                inits.append((
                    val.name.clone(),
                    c.dtype.onnx_code(),
                    shape,
                    PyBytes::new(py, &c.to_bytes()),
                ))?;
            }
        }
        d.set_item("initializers", inits)?;
        let nodes = PyList::empty(py);
        for n in &g.nodes {
            let ins: Vec<String> = n
                .inputs
                .iter()
                .map(|v| v.map(|v| g.value(v).name.clone()).unwrap_or_default())
                .collect();
            let outs: Vec<String> = n.outputs.iter().map(|&v| g.value(v).name.clone()).collect();
            let attrs = PyList::empty(py);
            for (k, a) in &n.attrs {
                let (kind, value): (&str, Bound<'py, PyAny>) = match a {
                    Attr::Int(i) => ("i", i.into_pyobject(py)?.into_any()),
                    Attr::Float(f) => ("f", f.into_pyobject(py)?.into_any()),
                    Attr::String(s) => ("s", s.into_pyobject(py)?.into_any()),
                    Attr::Ints(v) => ("ints", v.clone().into_pyobject(py)?.into_any()),
                    Attr::Floats(v) => ("floats", v.clone().into_pyobject(py)?.into_any()),
                    Attr::Strings(v) => ("strings", v.clone().into_pyobject(py)?.into_any()),
                    Attr::Tensor(t) => (
                        "t",
                        PyTuple::new(
                            py,
                            [
                                t.dtype.onnx_code().into_pyobject(py)?.into_any(),
                                t.shape().to_vec().into_pyobject(py)?.into_any(),
                                PyBytes::new(py, &t.to_bytes()).into_any(),
                            ],
                        )?
                        .into_any(),
                    ),
                };
                attrs.append((k.clone(), kind, value))?;
            }
            nodes.append((
                n.name.clone(),
                n.op_type.clone(),
                n.domain.clone(),
                ins,
                outs,
                attrs,
            ))?;
        }
        d.set_item("nodes", nodes)?;
        Ok(d)
    }
}

fn dims_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    match &v.shape {
        None => Ok(py.None().into_bound(py)),
        Some(d) => {
            let l = PyList::empty(py);
            for x in d {
                match x {
                    Dim::Fixed(n) => l.append(*n)?,
                    Dim::Symbolic(s) if s.is_empty() => l.append(py.None())?,
                    Dim::Symbolic(s) => l.append(s)?,
                }
            }
            Ok(l.into_any())
        }
    }
}

fn describe<'py>(py: Python<'py>, g: &Graph, ids: &[usize]) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for &v in ids {
        let val = g.value(v);
        out.append((
            val.name.clone(),
            val.dtype.map(|d| d.name()),
            dims_py(py, val)?,
        ))?;
    }
    Ok(out)
}

fn describe_codes<'py>(py: Python<'py>, g: &Graph, ids: &[usize]) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for &v in ids {
        let val = g.value(v);
        out.append((
            val.name.clone(),
            val.dtype.map(|d| d.onnx_code()).unwrap_or(0),
            dims_py(py, val)?,
        ))?;
    }
    Ok(out)
}

pub fn input_specs(inputs: Vec<(String, String, Vec<usize>)>) -> PyResult<Vec<InputSpec>> {
    inputs
        .into_iter()
        .map(|(name, dt, shape)| {
            let dtype = ElemType::from_name(&dt).map_err(|_| {
                crate::errors::to_py(Error::InputMismatch {
                    input: name.clone(),
                    message: format!(
                        "input '{name}' has element type {dt}, which the IPU cannot take"
                    ),
                })
            })?;
            Ok(InputSpec { name, dtype, shape })
        })
        .collect()
}
