//! The model IR: a dataflow graph of operator nodes over named values.
//!
//! Operators keep ONNX's names, attributes and input conventions (the IR is
//! what front ends translate into, not an ONNX binding: nothing here depends
//! on the onnx package), so a graph can be written back out as an equivalent
//! ONNX model after optimisation.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::dtype::ElemType;
use crate::error::{Error, Result};
use crate::tensor::HostTensor;

pub type ValueId = usize;
pub type NodeId = usize;

/// A dimension as declared by the model: fixed, or a named/unknown dimension
/// bound when the model is compiled for concrete inputs.
#[derive(Debug, Clone, PartialEq)]
pub enum Dim {
    Fixed(usize),
    Symbolic(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    Int(i64),
    Float(f32),
    String(String),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Strings(Vec<String>),
    Tensor(HostTensor),
}

#[derive(Debug, Clone)]
pub struct Value {
    pub name: String,
    pub dtype: Option<ElemType>,
    /// Declared shape (graph inputs/outputs) or inferred concrete shape.
    pub shape: Option<Vec<Dim>>,
    /// Set for initializers and values folded at compile time.
    pub constant: Option<Arc<HostTensor>>,
}

impl Value {
    /// The shape if every dimension is fixed.
    pub fn concrete_shape(&self) -> Option<Vec<usize>> {
        self.shape
            .as_ref()?
            .iter()
            .map(|d| {
                if let Dim::Fixed(n) = d {
                    Some(*n)
                } else {
                    None
                }
            })
            .collect()
    }
}

#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub op_type: String,
    pub domain: String,
    /// `None` for an omitted optional input.
    pub inputs: Vec<Option<ValueId>>,
    pub outputs: Vec<ValueId>,
    pub attrs: BTreeMap<String, Attr>,
}

impl Node {
    pub fn input(&self, i: usize) -> Option<ValueId> {
        self.inputs.get(i).copied().flatten()
    }
    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.attrs.get(name)
    }
    pub fn attr_i(&self, name: &str, default: i64) -> Result<i64> {
        match self.attrs.get(name) {
            None => Ok(default),
            Some(Attr::Int(v)) => Ok(*v),
            Some(other) => Err(self.bad_attr(name, "an int", other)),
        }
    }
    pub fn attr_f(&self, name: &str, default: f32) -> Result<f32> {
        match self.attrs.get(name) {
            None => Ok(default),
            Some(Attr::Float(v)) => Ok(*v),
            Some(Attr::Int(v)) => Ok(*v as f32),
            Some(other) => Err(self.bad_attr(name, "a float", other)),
        }
    }
    pub fn attr_s(&self, name: &str, default: &str) -> Result<String> {
        match self.attrs.get(name) {
            None => Ok(default.to_string()),
            Some(Attr::String(v)) => Ok(v.clone()),
            Some(other) => Err(self.bad_attr(name, "a string", other)),
        }
    }
    pub fn attr_ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v.clone())),
            Some(Attr::Int(v)) => Ok(Some(vec![*v])),
            Some(other) => Err(self.bad_attr(name, "a list of ints", other)),
        }
    }
    fn bad_attr(&self, name: &str, want: &str, got: &Attr) -> Error {
        Error::model(format!(
            "node '{}' ({}): attribute '{name}' should be {want}, got {got:?}",
            self.name, self.op_type
        ))
    }
}

#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub values: Vec<Value>,
    pub nodes: Vec<Node>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Tensors that live on the device from run to run (training's weights
    /// and optimizer state): read by the graph like inputs, initialised when
    /// the program is loaded, and overwritten at the end of every run.
    pub state: Vec<State>,
    by_name: HashMap<String, ValueId>,
}

/// One state tensor: the value the graph reads, its initial contents, and
/// the value written back at the end of a run (None: never changes).
#[derive(Debug, Clone)]
pub struct State {
    pub value: ValueId,
    pub init: Arc<HostTensor>,
    pub update: Option<ValueId>,
    /// Laid out on the tiles like this value (an optimizer's moments like
    /// their weight), so that the update is tile-local.
    pub layout_like: Option<ValueId>,
    /// In a program of two segments (training with replicas): written back
    /// at the end of segment 0 (gradient accumulators, running statistics)
    /// rather than of segment 1 (weights, optimizer state).
    pub in_first_segment: bool,
    /// Cleared (zeros) at the end of the program, after its update.
    pub cleared_after_update: bool,
}

/// A model: a graph plus the operator-set version of the default domain.
#[derive(Debug, Clone)]
pub struct Model {
    pub graph: Graph,
    pub opset: i64,
    pub name: String,
}

impl Graph {
    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id]
    }
    pub fn value_mut(&mut self, id: ValueId) -> &mut Value {
        &mut self.values[id]
    }
    pub fn find(&self, name: &str) -> Option<ValueId> {
        self.by_name.get(name).copied()
    }
    /// The value called `name`, created untyped if new.
    pub fn value_named(&mut self, name: &str) -> ValueId {
        if let Some(&id) = self.by_name.get(name) {
            return id;
        }
        self.add_value(Value {
            name: name.to_string(),
            dtype: None,
            shape: None,
            constant: None,
        })
    }
    pub fn add_value(&mut self, v: Value) -> ValueId {
        let id = self.values.len();
        self.by_name.insert(v.name.clone(), id);
        self.values.push(v);
        id
    }
    /// A fresh value with a name derived from `base` that no other value has.
    pub fn fresh_value(&mut self, base: &str) -> ValueId {
        let mut name = base.to_string();
        let mut i = 0;
        while self.by_name.contains_key(&name) {
            i += 1;
            name = format!("{base}_{i}");
        }
        self.value_named(&name)
    }
    /// Gives value `id` the name `name` (which no other value has).
    pub fn rename_value(&mut self, id: ValueId, name: &str) {
        let old = std::mem::replace(&mut self.values[id].name, name.to_string());
        self.by_name.remove(&old);
        self.by_name.insert(name.to_string(), id);
    }
    pub fn set_constant(&mut self, id: ValueId, t: HostTensor) {
        let v = &mut self.values[id];
        v.dtype = Some(t.dtype);
        v.shape = Some(t.shape().iter().map(|&d| Dim::Fixed(d)).collect());
        v.constant = Some(Arc::new(t));
    }
    pub fn constant(&self, id: ValueId) -> Option<&HostTensor> {
        self.values[id].constant.as_deref()
    }
    pub fn shape_of(&self, id: ValueId) -> Option<Vec<usize>> {
        self.values[id].concrete_shape()
    }

    /// Node that produces each value.
    pub fn producers(&self) -> HashMap<ValueId, NodeId> {
        let mut p = HashMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for &o in &n.outputs {
                p.insert(o, i);
            }
        }
        p
    }

    /// Number of node inputs plus graph outputs that read each value.
    pub fn use_counts(&self) -> Vec<usize> {
        let mut c = vec![0; self.values.len()];
        for n in &self.nodes {
            for &i in n.inputs.iter().flatten() {
                c[i] += 1;
            }
        }
        for &o in &self.outputs {
            c[o] += 1;
        }
        for s in &self.state {
            if let Some(u) = s.update {
                c[u] += 1;
            }
        }
        c
    }

    /// Orders the nodes so that every value is produced before it is used.
    /// Errors on cycles and on values nobody produces.
    pub fn toposort(&mut self) -> Result<()> {
        let n = self.nodes.len();
        let producers = self.producers();
        let mut indeg = vec![0usize; n];
        let mut users: Vec<Vec<NodeId>> = vec![Vec::new(); n];
        for (i, node) in self.nodes.iter().enumerate() {
            for &v in node.inputs.iter().flatten() {
                if let Some(&p) = producers.get(&v) {
                    indeg[i] += 1;
                    users[p].push(i);
                } else if self.values[v].constant.is_none()
                    && !self.inputs.contains(&v)
                    && !self.is_state(v)
                {
                    return Err(Error::model(format!(
                        "node '{}' ({}) reads '{}', which is not a graph input, an initializer, or any node's output",
                        node.name, node.op_type, self.values[v].name
                    )));
                }
            }
        }
        let mut ready: std::collections::VecDeque<NodeId> =
            (0..n).filter(|&i| indeg[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop_front() {
            order.push(i);
            for &u in &users[i] {
                indeg[u] -= 1;
                if indeg[u] == 0 {
                    ready.push_back(u);
                }
            }
        }
        if order.len() != n {
            let stuck: Vec<&str> = (0..n)
                .filter(|i| indeg[*i] > 0)
                .take(5)
                .map(|i| self.nodes[i].name.as_str())
                .collect();
            return Err(Error::model(format!(
                "the graph has a cycle through nodes {}",
                stuck.join(", ")
            )));
        }
        let mut old: Vec<Option<Node>> = std::mem::take(&mut self.nodes)
            .into_iter()
            .map(Some)
            .collect();
        self.nodes = order.into_iter().map(|i| old[i].take().unwrap()).collect();
        Ok(())
    }

    /// True if `v` is a state tensor's value.
    pub fn is_state(&self, v: ValueId) -> bool {
        self.state.iter().any(|s| s.value == v)
    }

    /// Removes nodes whose outputs nobody needs (no side effects in the op
    /// set): neither a graph output nor a state update.
    pub fn remove_dead_nodes(&mut self) -> usize {
        let mut needed = vec![false; self.values.len()];
        for &o in &self.outputs {
            needed[o] = true;
        }
        for s in &self.state {
            if let Some(u) = s.update {
                needed[u] = true;
            }
        }
        let mut keep = vec![false; self.nodes.len()];
        for i in (0..self.nodes.len()).rev() {
            if self.nodes[i].outputs.iter().any(|&o| needed[o]) {
                keep[i] = true;
                for &v in self.nodes[i].inputs.iter().flatten() {
                    needed[v] = true;
                }
            }
        }
        let before = self.nodes.len();
        let mut i = 0;
        self.nodes.retain(|_| {
            let k = keep[i];
            i += 1;
            k
        });
        before - self.nodes.len()
    }
}

#[cfg(test)]
mod ir_unit_tests {
    use super::*;

    fn node(attrs: Vec<(&str, Attr)>) -> Node {
        Node {
            name: "n".into(),
            op_type: "Op".into(),
            domain: String::new(),
            inputs: vec![Some(0), None, Some(1)],
            outputs: vec![2],
            attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        }
    }

    #[test]
    fn attribute_accessors_convert_and_default() {
        let n = node(vec![
            ("i", Attr::Int(3)),
            ("f", Attr::Float(0.5)),
            ("s", Attr::String("tanh".into())),
            ("is", Attr::Ints(vec![1, -2])),
        ]);
        assert_eq!(n.attr_i("i", 0).unwrap(), 3);
        assert_eq!(n.attr_i("missing", 7).unwrap(), 7);
        assert_eq!(n.attr_f("f", 0.0).unwrap(), 0.5);
        assert_eq!(
            n.attr_f("i", 0.0).unwrap(),
            3.0,
            "an int attribute reads as a float"
        );
        assert_eq!(n.attr_s("s", "none").unwrap(), "tanh");
        assert_eq!(n.attr_s("missing", "none").unwrap(), "none");
        assert_eq!(n.attr_ints("is").unwrap(), Some(vec![1, -2]));
        assert_eq!(
            n.attr_ints("i").unwrap(),
            Some(vec![3]),
            "a single int reads as a list"
        );
        assert_eq!(n.attr_ints("missing").unwrap(), None);
        for bad in [
            n.attr_i("s", 0).unwrap_err(),
            n.attr_f("s", 0.0).unwrap_err(),
            n.attr_s("i", "").unwrap_err(),
        ] {
            match bad {
                Error::ModelFormat(m) => assert!(m.contains("node 'n' (Op)"), "{m}"),
                other => panic!("{other:?}"),
            }
        }
        assert!(n.attr_ints("f").is_err());
        assert_eq!(n.input(0), Some(0));
        assert_eq!(n.input(1), None, "omitted optional input");
        assert_eq!(n.input(9), None, "absent input");
    }

    #[test]
    fn values_by_name_fresh_names_and_use_counts() {
        let mut g = Graph::default();
        let a = g.value_named("a");
        assert_eq!(g.value_named("a"), a, "existing names are found");
        let b = g.fresh_value("a");
        assert_eq!(g.value(b).name, "a_1");
        let c = g.fresh_value("a");
        assert_eq!(g.value(c).name, "a_2");
        assert_eq!(g.find("a_2"), Some(c));
        assert_eq!(g.find("nope"), None);
        g.nodes.push(Node {
            name: "add".into(),
            op_type: "Add".into(),
            domain: String::new(),
            inputs: vec![Some(a), Some(a)],
            outputs: vec![b],
            attrs: BTreeMap::new(),
        });
        g.outputs = vec![b, a];
        assert_eq!(g.use_counts(), vec![3, 1, 0]);
        assert_eq!(g.producers().get(&b), Some(&0));
        assert_eq!(g.producers().get(&a), None);
    }

    #[test]
    fn constants_fix_type_and_shape() {
        let mut g = Graph::default();
        let v = g.value_named("w");
        assert_eq!(g.shape_of(v), None);
        g.set_constant(v, HostTensor::from_i64s(&[2, 1], vec![4, 5]));
        assert_eq!(g.shape_of(v), Some(vec![2, 1]));
        assert_eq!(g.value(v).dtype, Some(ElemType::I64));
        assert_eq!(g.constant(v).unwrap().to_i64_vec(), vec![4, 5]);
        let sym = Value {
            name: "s".into(),
            dtype: None,
            shape: Some(vec![Dim::Fixed(2), Dim::Symbolic("N".into())]),
            constant: None,
        };
        assert_eq!(
            sym.concrete_shape(),
            None,
            "a symbolic dimension is not concrete"
        );
        let none = Value {
            name: "u".into(),
            dtype: None,
            shape: None,
            constant: None,
        };
        assert_eq!(none.concrete_shape(), None);
    }
}
