//! A model as plain data: what a front end (the ONNX importer) hands the
//! core, and what export reads back.
//!
//! [`Model::from_parts`] is the one place where imported models are checked
//! and completed: the operator set must be one the core implements, element
//! types and tensor bytes must agree, optional inputs and outputs are
//! resolved, and unnamed nodes get their names (`{op_type}_{index}`, made
//! unique).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::dtype::{refusal, ElemType, Refusal};
use crate::error::{Error, Result};
use crate::ir::{Attr, Dim, Graph, Model, Node, Value, ValueId};
use crate::tensor::HostTensor;

/// Default-domain operator-set versions the operators are implemented for.
pub const SUPPORTED_OPSETS: std::ops::RangeInclusive<i64> = 1..=28;

/// A dimension as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DimParts {
    Fixed(u64),
    Named(String),
    Unknown,
}

/// A graph input or output as declared. `elem_type` is ONNX's code (0:
/// not given); `dims` is None when no shape is declared.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueParts {
    pub name: String,
    pub elem_type: i32,
    pub dims: Option<Vec<DimParts>>,
}

/// A tensor: ONNX element type code, shape, little-endian bytes (shared:
/// weights are hundreds of megabytes, and parts are cloned on their way in).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorParts {
    pub name: String,
    pub elem_type: i32,
    pub dims: Vec<u64>,
    pub data: Arc<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AttrParts {
    Int(i64),
    Float(f32),
    String(String),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Strings(Vec<String>),
    Tensor(TensorParts),
    /// A subgraph (control flow): only the operators that take one read it,
    /// and none is implemented, so it is not carried.
    Graph,
    /// Any other kind (sparse tensors, type protos), by name.
    Other(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodeParts {
    /// May be empty: the node is then named by `Model::from_parts`.
    pub name: String,
    pub op_type: String,
    pub domain: String,
    /// Value names; an empty name is an omitted optional input.
    pub inputs: Vec<String>,
    /// Value names; an empty name is an omitted optional output.
    pub outputs: Vec<String>,
    pub attrs: Vec<(String, AttrParts)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelParts {
    pub name: String,
    /// (domain, version) of every imported operator set; "" and "ai.onnx"
    /// are the default domain.
    pub opsets: Vec<(String, i64)>,
    pub inputs: Vec<ValueParts>,
    pub outputs: Vec<ValueParts>,
    pub initializers: Vec<TensorParts>,
    pub nodes: Vec<NodeParts>,
}

/// Where an element type appears: the node it belongs to (an attribute,
/// a Cast's target) or the first node that reads the value.
#[derive(Clone, Copy)]
struct TypeSite<'a> {
    /// How the value relates to the node: "read by", "made by", "of".
    role: &'static str,
    node: &'a str,
    op_type: &'a str,
}

impl TypeSite<'_> {
    /// "(read by node 'n', Cast)".
    fn words(site: Option<TypeSite>) -> String {
        site.map_or(String::new(), |s| {
            format!(" ({} node '{}', {})", s.role, s.node, s.op_type)
        })
    }
}

/// The element type of `code`, or the error that says why it cannot be
/// used: `UnsupportedOperator` for a type ONNX defines and neurenix does not
/// hold (naming it, `what` and the node at `site`), `ModelFormat` for a
/// code ONNX does not define. `what` ends with a verb ("input 'x' has").
fn elem_type(code: i32, what: &str, site: Option<TypeSite>, opset: i64) -> Result<ElemType> {
    match refusal(code, what) {
        None => Ok(ElemType::from_onnx(code).expect("a held type")),
        Some(Refusal::Malformed(m)) => Err(Error::model(m)),
        Some(Refusal::Unsupported(message)) => {
            let (node, op_type) = site.map_or(("", ""), |s| (s.node, s.op_type));
            Err(Error::unsupported_type(op_type, node, opset, message))
        }
    }
}

fn tensor(t: &TensorParts, what: &str, site: Option<TypeSite>, opset: i64) -> Result<HostTensor> {
    let dtype = elem_type(t.elem_type, &format!("{what} has"), site, opset)?;
    let shape: Vec<usize> = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::model(format!("{what} has a dimension beyond this host's range")))?;
    HostTensor::from_bytes(dtype, &shape, &t.data).map_err(|e| Error::model(format!("{what}: {e}")))
}

fn dims(d: &Option<Vec<DimParts>>) -> Option<Vec<Dim>> {
    d.as_ref().map(|ds| {
        ds.iter()
            .map(|d| match d {
                DimParts::Fixed(n) => match usize::try_from(*n) {
                    Ok(n) => Dim::Fixed(n),
                    // Larger than the host can index: bound by example inputs,
                    // which can never match it.
                    Err(_) => Dim::Fixed(usize::MAX),
                },
                DimParts::Named(s) => Dim::Symbolic(s.clone()),
                DimParts::Unknown => Dim::Symbolic(String::new()),
            })
            .collect()
    })
}

fn default_opset(opsets: &[(String, i64)]) -> Result<i64> {
    let v = opsets
        .iter()
        .find(|(d, _)| d.is_empty() || d == "ai.onnx")
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            Error::model("the model imports no version of the default operator set (ai.onnx)")
        })?;
    if !SUPPORTED_OPSETS.contains(&v) {
        let (lo, hi) = (SUPPORTED_OPSETS.start(), SUPPORTED_OPSETS.end());
        return Err(Error::Unsupported {
            op_type: String::new(),
            node: String::new(),
            domain: "ai.onnx".into(),
            opset: v,
            supported: Vec::new(),
            message: format!(
                "the model imports operator set {v} of the default domain (ai.onnx); neurenix implements \
                 operator sets {lo} to {hi}: export the model with an operator set in that range"
            ),
        });
    }
    Ok(v)
}

impl Model {
    /// Builds and checks a model from its plain-data form.
    pub fn from_parts(parts: &ModelParts) -> Result<Model> {
        let opset = default_opset(&parts.opsets)?;
        let names = node_names(&parts.nodes);
        // The first node reading each value, to name where a type is used.
        let mut readers: HashMap<&str, TypeSite> = HashMap::new();
        for (np, name) in parts.nodes.iter().zip(&names) {
            for i in np.inputs.iter().filter(|s| !s.is_empty()) {
                readers.entry(i.as_str()).or_insert(TypeSite {
                    role: "read by",
                    node: name,
                    op_type: &np.op_type,
                });
            }
        }
        let reader = |v: &str| readers.get(v).copied();
        let mut g = Graph::default();
        for t in &parts.initializers {
            let site = reader(&t.name);
            let what = format!("initializer '{}'{}", t.name, TypeSite::words(site));
            let c = tensor(t, &what, site, opset)?;
            let v = g.value_named(&t.name);
            g.set_constant(v, c);
        }
        for vi in &parts.inputs {
            let v = g.value_named(&vi.name);
            if g.value(v).constant.is_some() {
                // ONNX lets initializers be listed as inputs too (overridable
                // defaults): they stay constants.
                continue;
            }
            if g.inputs.contains(&v) {
                return Err(Error::model(format!(
                    "graph input '{}' is declared twice",
                    vi.name
                )));
            }
            let dtype = match vi.elem_type {
                0 => None,
                c => {
                    let site = reader(&vi.name);
                    let what = format!("input '{}'{} has", vi.name, TypeSite::words(site));
                    Some(elem_type(c, &what, site, opset)?)
                }
            };
            let val = g.value_mut(v);
            val.dtype = dtype;
            val.shape = dims(&vi.dims);
            g.inputs.push(v);
        }
        let mut produced: HashSet<&str> = HashSet::new();
        for (np, name) in parts.nodes.iter().zip(names.iter().cloned()) {
            let inputs = np
                .inputs
                .iter()
                .map(|s| (!s.is_empty()).then(|| g.value_named(s)))
                .collect();
            let mut outputs = Vec::with_capacity(np.outputs.len());
            for s in &np.outputs {
                if s.is_empty() {
                    // An omitted optional output: give it a private name.
                    outputs.push(g.fresh_value(&format!("{name}/unused")));
                    continue;
                }
                if !produced.insert(s) {
                    return Err(Error::model(format!(
                        "value '{s}' is produced twice (again by node '{name}', {})",
                        np.op_type
                    )));
                }
                let v = g.value_named(s);
                if g.value(v).constant.is_some() || g.inputs.contains(&v) {
                    return Err(Error::model(format!(
                        "node '{name}' ({}) writes '{s}', which is a graph input or an initializer",
                        np.op_type
                    )));
                }
                outputs.push(v);
            }
            let mut attrs = BTreeMap::new();
            for (an, a) in &np.attrs {
                let what = format!("attribute '{an}' of node '{name}' ({})", np.op_type);
                let attr = match a {
                    AttrParts::Int(i) => Attr::Int(*i),
                    AttrParts::Float(f) => Attr::Float(*f),
                    AttrParts::String(s) => Attr::String(s.clone()),
                    AttrParts::Ints(v) => Attr::Ints(v.clone()),
                    AttrParts::Floats(v) => Attr::Floats(v.clone()),
                    AttrParts::Strings(v) => Attr::Strings(v.clone()),
                    AttrParts::Tensor(t) => {
                        let site = TypeSite {
                            role: "of",
                            node: &name,
                            op_type: &np.op_type,
                        };
                        Attr::Tensor(tensor(t, &what, Some(site), opset)?)
                    }
                    AttrParts::Graph => continue,
                    AttrParts::Other(kind) => {
                        return Err(Error::model(format!(
                            "{what} is of kind '{kind}' (sparse tensors, type protos), which is not supported"
                        )))
                    }
                };
                attrs.insert(an.clone(), attr);
            }
            g.nodes.push(Node {
                name,
                op_type: np.op_type.clone(),
                domain: np.domain.clone(),
                inputs,
                outputs,
                attrs,
            });
        }
        for vi in &parts.outputs {
            let v = g.find(&vi.name).ok_or_else(|| {
                Error::model(format!(
                    "graph output '{}' is not produced by any node, input or initializer",
                    vi.name
                ))
            })?;
            let val = g.value_mut(v);
            if val.constant.is_none() {
                if vi.elem_type != 0 {
                    let producer = parts
                        .nodes
                        .iter()
                        .zip(&names)
                        .find(|(n, _)| n.outputs.contains(&vi.name))
                        .map(|(n, name)| TypeSite {
                            role: "made by",
                            node: name,
                            op_type: &n.op_type,
                        });
                    let what = format!("output '{}'{} has", vi.name, TypeSite::words(producer));
                    val.dtype = Some(elem_type(vi.elem_type, &what, producer, opset)?);
                }
                val.shape = dims(&vi.dims);
            }
            g.outputs.push(v);
        }
        Ok(Model {
            graph: g,
            opset,
            name: parts.name.clone(),
        })
    }

    /// How value `v` is declared (its element type and shape as known).
    pub fn value_parts(&self, v: ValueId) -> ValueParts {
        let val: &Value = self.graph.value(v);
        ValueParts {
            name: val.name.clone(),
            elem_type: val.dtype.map(|d| d.onnx_code()).unwrap_or(0),
            dims: val.shape.as_ref().map(|ds| {
                ds.iter()
                    .map(|d| match d {
                        Dim::Fixed(n) => DimParts::Fixed(*n as u64),
                        Dim::Symbolic(s) if s.is_empty() => DimParts::Unknown,
                        Dim::Symbolic(s) => DimParts::Named(s.clone()),
                    })
                    .collect()
            }),
        }
    }

    /// The model as plain data: the inverse of [`Model::from_parts`]
    /// (constants that nodes or outputs read become initializers).
    pub fn to_parts(&self) -> ModelParts {
        let g = &self.graph;
        let value_parts = |v: ValueId| self.value_parts(v);
        let tensor_parts = |name: &str, t: &HostTensor| TensorParts {
            name: name.to_string(),
            elem_type: t.dtype.onnx_code(),
            dims: t.shape().iter().map(|&d| d as u64).collect(),
            data: Arc::new(t.to_bytes()),
        };
        let mut used = vec![false; g.values.len()];
        for n in &g.nodes {
            for &v in n.inputs.iter().flatten() {
                used[v] = true;
            }
        }
        for &o in &g.outputs {
            used[o] = true;
        }
        let initializers = g
            .values
            .iter()
            .enumerate()
            .filter(|(v, _)| used[*v])
            .filter_map(|(_, val)| val.constant.as_ref().map(|c| tensor_parts(&val.name, c)))
            .collect();
        let nodes = g
            .nodes
            .iter()
            .map(|n| NodeParts {
                name: n.name.clone(),
                op_type: n.op_type.clone(),
                domain: n.domain.clone(),
                inputs: n
                    .inputs
                    .iter()
                    .map(|v| v.map(|v| g.value(v).name.clone()).unwrap_or_default())
                    .collect(),
                outputs: n.outputs.iter().map(|&v| g.value(v).name.clone()).collect(),
                attrs: n
                    .attrs
                    .iter()
                    .map(|(k, a)| {
                        let p = match a {
                            Attr::Int(i) => AttrParts::Int(*i),
                            Attr::Float(f) => AttrParts::Float(*f),
                            Attr::String(s) => AttrParts::String(s.clone()),
                            Attr::Ints(v) => AttrParts::Ints(v.clone()),
                            Attr::Floats(v) => AttrParts::Floats(v.clone()),
                            Attr::Strings(v) => AttrParts::Strings(v.clone()),
                            Attr::Tensor(t) => AttrParts::Tensor(tensor_parts("", t)),
                        };
                        (k.clone(), p)
                    })
                    .collect(),
            })
            .collect();
        ModelParts {
            name: self.name.clone(),
            opsets: vec![(String::new(), self.opset)],
            inputs: g.inputs.iter().map(|&v| value_parts(v)).collect(),
            outputs: g.outputs.iter().map(|&v| value_parts(v)).collect(),
            initializers,
            nodes,
        }
    }
}

/// Every node's name: its own, or `{op_type}_{index}` for an unnamed node,
/// with a numeric suffix where that would repeat another node's name.
fn node_names(nodes: &[NodeParts]) -> Vec<String> {
    let mut taken: HashSet<String> = nodes
        .iter()
        .filter(|n| !n.name.is_empty())
        .map(|n| n.name.clone())
        .collect();
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if !n.name.is_empty() {
                return n.name.clone();
            }
            let base = format!("{}_{i}", n.op_type);
            let mut name = base.clone();
            let mut k = 1;
            while taken.contains(&name) {
                name = format!("{base}_{k}");
                k += 1;
            }
            taken.insert(name.clone());
            name
        })
        .collect()
}
