//! The compiler driver: passes, sharding and lowering of a model onto a
//! backend.

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::ir::Model;
use crate::lower::precision::Precision;
use crate::lower::{Binding, LowerCx, LowerOptions};
use crate::ops::lookup;
use crate::passes::{prepare, InputSpec, PassStats};
use crate::shard::assign_ipus;

#[derive(Debug, Clone)]
pub struct CompileOptions {
    pub precision: Precision,
    /// Fraction of each tile's memory matmul/conv plans may use for
    /// temporaries, in (0, 1].
    pub memory_proportion: f64,
    /// Matmul/conv partial sums in half precision (half operands only).
    pub enable_half_partials: bool,
    pub num_ipus: u32,
}

impl CompileOptions {
    pub fn validate(&self) -> Result<()> {
        if !(self.memory_proportion > 0.0 && self.memory_proportion <= 1.0) {
            return Err(Error::InvalidArgument(format!(
                "memory_proportion must be in (0, 1], got {}",
                self.memory_proportion
            )));
        }
        if self.num_ipus == 0 || !self.num_ipus.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "num_ipus must be a power of two, got {}",
                self.num_ipus
            )));
        }
        Ok(())
    }
}

/// What lowering produced, besides the backend's graph.
#[derive(Debug, Clone)]
pub struct Lowered {
    pub inputs: Vec<Binding>,
    pub outputs: Vec<Binding>,
    pub stats: PassStats,
    /// (node name, op type, IPU) in program order.
    pub placement: Vec<(String, String, u32)>,
}

/// Prepares `model` for `inputs` and lowers it onto `backend`.
pub fn lower_model(
    model: &Model,
    inputs: &[InputSpec],
    opts: &CompileOptions,
    backend: &mut dyn Backend,
) -> Result<Lowered> {
    opts.validate()?;
    let mut m = model.clone();
    let stats = prepare(&mut m, inputs)?;
    let node_ipu = assign_ipus(&m, opts.num_ipus);
    let lopts = LowerOptions {
        precision: opts.precision,
        memory_proportion: opts.memory_proportion,
        enable_half_partials: opts.enable_half_partials,
    };
    let g = &m.graph;
    let mut cx = LowerCx::new(backend, g, m.opset, &lopts, &node_ipu);
    // Inputs go to the IPU of their first reader.
    let mut in_bind = Vec::new();
    for &v in &g.inputs {
        let ipu = g
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.inputs.iter().flatten().any(|&i| i == v))
            .map(|(i, _)| node_ipu[i])
            .min()
            .unwrap_or(0);
        in_bind.push(cx.bind_input(v, ipu)?);
    }
    let mut placement = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        let op = lookup(node, m.opset)?;
        cx.begin_node(i, op.float_role());
        op.lower(&mut cx, node)?;
        for &o in &node.outputs {
            if !cx.is_set(o) && g.constant(o).is_none() {
                return Err(Error::Internal(format!(
                    "lowering node '{}' left output {o} unset",
                    node.name
                )));
            }
        }
        placement.push((node.name.clone(), node.op_type.clone(), node_ipu[i]));
    }
    let outputs = cx.finish_outputs()?;
    Ok(Lowered {
        inputs: in_bind,
        outputs,
        stats,
        placement,
    })
}

/// Graph-level optimisation only: the prepared model (folded, fused, pruned),
/// specialised to `inputs`.
pub fn optimize(model: &Model, inputs: &[InputSpec]) -> Result<(Model, PassStats)> {
    let mut m = model.clone();
    let stats = prepare(&mut m, inputs)?;
    Ok((m, stats))
}
