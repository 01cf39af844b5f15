//! Graph passes: binding concrete input shapes, shape inference with
//! constant folding, dead-node removal, and graph-level fusion.

use std::collections::HashMap;

use crate::dtype::ElemType;
use crate::error::{group_digits, Error, Result, TensorOverflow};
use crate::ir::{Dim, Model};
use crate::ops::{lookup, OpCx};
use crate::tensor::checked_numel;

pub mod fuse;

/// The sizes one compile handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes one tensor may occupy on the device: one IPU's tile memory, as
    /// a tensor lives on one IPU. Larger tensors are refused as out of memory
    /// before anything is built for them.
    pub tensor_bytes: u64,
    /// Bytes a float element takes on the device (2 where the precision
    /// policy computes in half), for the check above.
    pub float_bytes: u64,
    /// Elements the host evaluates for one node at compile time (constant
    /// folding, shape subgraphs): larger results are computed on the device.
    pub host_eval_elements: usize,
}

/// Host evaluation budget per node: 64 Mi elements (512 MiB as the host's
/// f64/i64 values).
pub const HOST_EVAL_ELEMENTS: usize = 1 << 26;

impl Default for Limits {
    /// No device: only the host budget and counts that overflow limit.
    fn default() -> Limits {
        Limits {
            tensor_bytes: u64::MAX,
            float_bytes: 4,
            host_eval_elements: HOST_EVAL_ELEMENTS,
        }
    }
}

impl Limits {
    /// Checks that tensor `name` of `dtype` and `shape` can exist on one IPU;
    /// `what` describes it in the error.
    pub fn check_tensor(
        &self,
        name: &str,
        what: &str,
        dtype: ElemType,
        shape: &[usize],
    ) -> Result<()> {
        let elem = if dtype.is_float() {
            self.float_bytes
        } else {
            dtype.device_default().size() as u64
        };
        // Host arrays (ndarray's, numpy's) need the product of the non-zero
        // dimensions, in bytes of the widest element numpy has (16), to fit
        // an isize, even when the tensor holds no element.
        let addressable = shape
            .iter()
            .filter(|&&d| d != 0)
            .try_fold(16usize, |n, &d| n.checked_mul(d))
            .is_some_and(|n| isize::try_from(n).is_ok());
        let numel = checked_numel(shape)
            .filter(|_| addressable)
            .ok_or_else(|| {
                Error::model(format!(
                "{what} would have shape {shape:?}: more elements than a host array can address"
            ))
            })?;
        let bytes = (numel as u128) * (elem as u128);
        if bytes > self.tensor_bytes as u128 {
            return Err(Error::OutOfMemory {
                tiles: Vec::new(),
                tensor: Some(TensorOverflow {
                    name: name.to_string(),
                    bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
                    capacity: self.tensor_bytes,
                }),
                message: format!(
                    "{what} would be {dtype}{shape:?}: {} bytes on the device, but one IPU has {} bytes of tile \
                     memory, and a tensor lives on one IPU; no number of IPUs can hold it. Use smaller inputs \
                     or a smaller model.",
                    group_digits_u128(bytes),
                    group_digits(self.tensor_bytes)
                ),
            });
        }
        Ok(())
    }
}

fn group_digits_u128(n: u128) -> String {
    match u64::try_from(n) {
        Ok(n) => group_digits(n),
        Err(_) => n.to_string(),
    }
}

/// A tensor's name, element type and concrete shape: an input the model is
/// compiled for.
#[derive(Debug, Clone)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: ElemType,
    pub shape: Vec<usize>,
}

/// Checks `specs` against the declared graph inputs and fixes every input
/// shape. Named dimensions must bind consistently across inputs.
pub fn bind_inputs(model: &mut Model, specs: &[TensorSpec], limits: &Limits) -> Result<()> {
    let g = &mut model.graph;
    let declared: Vec<usize> = g.inputs.clone();
    let mut bound: HashMap<String, (usize, String)> = HashMap::new();
    for spec in specs {
        if !declared.iter().any(|&v| g.value(v).name == spec.name) {
            let names: Vec<&str> = declared.iter().map(|&v| g.value(v).name.as_str()).collect();
            return Err(Error::InputMismatch {
                input: spec.name.clone(),
                message: format!(
                    "the model has no input named '{}'; its inputs are: {}",
                    spec.name,
                    names.join(", ")
                ),
            });
        }
    }
    for &v in &declared {
        let name = g.value(v).name.clone();
        let spec = specs
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| Error::InputMismatch {
                input: name.clone(),
                message: format!("no value given for model input '{name}'"),
            })?;
        if let Some(dt) = g.value(v).dtype {
            if dt != spec.dtype {
                return Err(Error::InputMismatch {
                    input: name.clone(),
                    message: format!("input '{name}' expects {dt} but was given {}", spec.dtype),
                });
            }
        }
        if let Some(dims) = g.value(v).shape.clone() {
            let shape_str = |d: &[Dim]| -> String {
                let parts: Vec<String> = d
                    .iter()
                    .map(|x| match x {
                        Dim::Fixed(n) => n.to_string(),
                        Dim::Symbolic(s) if s.is_empty() => "?".to_string(),
                        Dim::Symbolic(s) => s.clone(),
                    })
                    .collect();
                format!("[{}]", parts.join(", "))
            };
            let mismatch = |why: String| Error::InputMismatch {
                input: name.clone(),
                message: format!(
                    "input '{name}' expects shape {} but was given {:?}: {why}",
                    shape_str(&dims),
                    spec.shape
                ),
            };
            if dims.len() != spec.shape.len() {
                return Err(mismatch(format!(
                    "rank {} instead of {}",
                    spec.shape.len(),
                    dims.len()
                )));
            }
            for (i, (d, &n)) in dims.iter().zip(&spec.shape).enumerate() {
                match d {
                    Dim::Fixed(f) if *f != n => {
                        return Err(mismatch(format!("dimension {i} is {n}, not {f}")))
                    }
                    Dim::Symbolic(s) if !s.is_empty() => {
                        if let Some((prev, who)) = bound.get(s) {
                            if *prev != n {
                                return Err(mismatch(format!(
                                    "dimension '{s}' is {n} here but {prev} in input '{who}'"
                                )));
                            }
                        } else {
                            bound.insert(s.clone(), (n, name.clone()));
                        }
                    }
                    _ => {}
                }
            }
        }
        limits.check_tensor(&name, &format!("input '{name}'"), spec.dtype, &spec.shape)?;
        let val = g.value_mut(v);
        val.dtype = Some(spec.dtype);
        val.shape = Some(spec.shape.iter().map(|&d| Dim::Fixed(d)).collect());
    }
    Ok(())
}

/// Shape inference and constant folding in one sweep (a node's shape can
/// depend on folded values upstream, e.g. Shape -> Gather -> Reshape).
/// Folded nodes are removed. Returns how many were folded.
pub fn infer_and_fold(model: &mut Model, limits: &Limits) -> Result<usize> {
    let opset = model.opset;
    // Name every unsupported operator at once.
    let mut unknown: Vec<usize> = Vec::new();
    for (i, n) in model.graph.nodes.iter().enumerate() {
        if lookup(n, opset).is_err() {
            unknown.push(i);
        }
    }
    if let Some(&first) = unknown.first() {
        let n = &model.graph.nodes[first];
        let mut others: Vec<String> = unknown[1..]
            .iter()
            .map(|&i| model.graph.nodes[i].op_type.clone())
            .filter(|t| *t != n.op_type)
            .collect();
        others.sort();
        others.dedup();
        let err = match lookup(n, opset) {
            Err(e) => e,
            Ok(_) => unreachable!("node was found unsupported above"),
        };
        if others.is_empty() {
            return Err(err);
        }
        return Err(match err {
            Error::Unsupported {
                op_type,
                node,
                domain,
                opset,
                supported,
                message,
            } => {
                let message = match message.split_once(". Supported operators:") {
                    Some((head, tail)) => {
                        format!(
                            "{head}; the model also uses {}. Supported operators:{tail}",
                            others.join(", ")
                        )
                    }
                    None => message,
                };
                Error::Unsupported {
                    op_type,
                    node,
                    domain,
                    opset,
                    supported,
                    message,
                }
            }
            other => other,
        });
    }

    let mut folded = vec![false; model.graph.nodes.len()];
    for i in 0..model.graph.nodes.len() {
        let (outs, values) = {
            let g = &model.graph;
            let node = &g.nodes[i];
            let op = lookup(node, opset)?;
            let cx = OpCx {
                graph: g,
                node,
                opset,
            };
            let outs = op.infer(&cx)?;
            if outs.len() < node.outputs.len() {
                return Err(cx.err(format!(
                    "produces {} outputs, the node names {}",
                    outs.len(),
                    node.outputs.len()
                )));
            }
            // Nothing is built, on the host or the device, for a tensor that
            // cannot exist.
            let mut elements = 0usize;
            for (k, ts) in outs.iter().enumerate().take(node.outputs.len()) {
                let name = &g.value(node.outputs[k]).name;
                let what = format!(
                    "tensor '{name}' (output {k} of node '{}', {})",
                    node.name, node.op_type
                );
                limits.check_tensor(name, &what, ts.dtype, &ts.shape)?;
                elements = elements.saturating_add(checked_numel(&ts.shape).unwrap_or(usize::MAX));
            }
            let all_const = node
                .inputs
                .iter()
                .flatten()
                .all(|&v| g.constant(v).is_some());
            let within_budget = elements <= limits.host_eval_elements;
            let values = if within_budget && (all_const || op.folds_without_values()) {
                let ins: Vec<_> = node
                    .inputs
                    .iter()
                    .map(|v| v.and_then(|v| g.constant(v)))
                    .collect();
                match op.eval(&cx, &ins) {
                    Some(r) => Some(r?),
                    None => None,
                }
            } else {
                None
            };
            (outs, values)
        };
        let node_outputs = model.graph.nodes[i].outputs.clone();
        let node_name = model.graph.nodes[i].name.clone();
        for (k, &o) in node_outputs.iter().enumerate() {
            let ts = &outs[k];
            let val = model.graph.value_mut(o);
            if let (Some(decl), true) = (val.dtype, val.constant.is_none()) {
                if decl != ts.dtype {
                    return Err(Error::model(format!(
                        "value '{}' is declared {decl} but node '{node_name}' produces {}",
                        val.name, ts.dtype
                    )));
                }
            }
            val.dtype = Some(ts.dtype);
            val.shape = Some(ts.shape.iter().map(|&d| Dim::Fixed(d)).collect());
        }
        if let Some(vals) = values {
            for (k, &o) in node_outputs.iter().enumerate() {
                let t = vals[k].clone();
                if t.shape() != outs[k].shape.as_slice() || t.dtype != outs[k].dtype {
                    return Err(Error::Internal(format!(
                        "folding node '{}' gave {} {:?}, inference said {} {:?}",
                        model.graph.nodes[i].name,
                        t.dtype,
                        t.shape(),
                        outs[k].dtype,
                        outs[k].shape
                    )));
                }
                model.graph.set_constant(o, t);
            }
            folded[i] = true;
        }
    }
    let n = folded.iter().filter(|&&f| f).count();
    let mut i = 0;
    model.graph.nodes.retain(|_| {
        let keep = !folded[i];
        i += 1;
        keep
    });
    Ok(n)
}

/// Summary of what `prepare` did.
#[derive(Debug, Clone, Default)]
pub struct PassStats {
    pub nodes_in: usize,
    pub folded: usize,
    pub dead: usize,
    pub fused: usize,
    pub nodes_out: usize,
}

/// Everything before lowering: order, bind inputs, infer and fold, fuse,
/// drop dead nodes.
pub fn prepare(model: &mut Model, specs: &[TensorSpec], limits: &Limits) -> Result<PassStats> {
    let mut st = PassStats {
        nodes_in: model.graph.nodes.len(),
        ..Default::default()
    };
    model.graph.toposort()?;
    bind_inputs(model, specs, limits)?;
    st.folded = infer_and_fold(model, limits)?;
    st.dead = model.graph.remove_dead_nodes();
    st.fused = fuse::fuse(model)?;
    st.dead += model.graph.remove_dead_nodes();
    for &o in &model.graph.outputs {
        let v = model.graph.value(o);
        if v.concrete_shape().is_none() || v.dtype.is_none() {
            return Err(Error::model(format!(
                "graph output '{}' is not produced by any node or input",
                v.name
            )));
        }
    }
    st.nodes_out = model.graph.nodes.len();
    Ok(st)
}
