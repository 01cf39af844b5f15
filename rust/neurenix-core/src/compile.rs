//! The compiler driver: passes, sharding and lowering of a model onto a
//! backend, then the backend's compile into an [`Executable`].

use std::time::Instant;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::executable::{Executable, HostStream};
use crate::ir::Model;
use crate::lower::precision::Precision;
use crate::lower::{LowerCx, LowerOptions};
use crate::ops::lookup;
use crate::passes::{prepare, Limits, PassStats, TensorSpec};
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

/// Where the sharder put one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub node: String,
    pub op_type: String,
    pub ipu: u32,
}

/// The host's half of an executable, as lowering produced it (the device's
/// half is the backend's graph): the host streams, what the passes did, and
/// where each node runs.
#[derive(Debug, Clone)]
pub struct Lowered {
    pub inputs: Vec<HostStream>,
    pub outputs: Vec<HostStream>,
    pub passes: PassStats,
    /// Every node lowered, in program order.
    pub placement: Vec<Placement>,
}

/// Compiles `model` for `inputs` on the device whose graph library is
/// `backend`: passes, sharding, lowering, then the device's own compile.
pub fn compile(
    model: &Model,
    inputs: &[TensorSpec],
    opts: &CompileOptions,
    mut backend: Box<dyn Backend>,
) -> Result<Executable> {
    let t0 = Instant::now();
    let lowered = lower_model(model, inputs, opts, backend.as_mut())?;
    let device = backend.compile()?;
    Ok(Executable::new(
        device,
        lowered,
        opts.clone(),
        t0.elapsed().as_secs_f64(),
    ))
}

/// Prepares `model` for `inputs` and lowers it onto `backend`.
pub fn lower_model(
    model: &Model,
    inputs: &[TensorSpec],
    opts: &CompileOptions,
    backend: &mut dyn Backend,
) -> Result<Lowered> {
    opts.validate()?;
    let mut m = model.clone();
    let limits = Limits {
        tensor_bytes: backend.ipu_memory_bytes(),
        float_bytes: if opts.precision == Precision::Float32 {
            4
        } else {
            2
        },
        ..Limits::default()
    };
    let passes = prepare(&mut m, inputs, &limits)?;
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
        placement.push(Placement {
            node: node.name.clone(),
            op_type: node.op_type.clone(),
            ipu: node_ipu[i],
        });
    }
    let outputs = cx.finish_outputs()?;
    Ok(Lowered {
        inputs: in_bind,
        outputs,
        passes,
        placement,
    })
}

/// Graph-level optimisation only: the prepared model (folded, fused, pruned),
/// specialised to `inputs`.
pub fn optimize(model: &Model, inputs: &[TensorSpec]) -> Result<(Model, PassStats)> {
    let mut m = model.clone();
    let stats = prepare(&mut m, inputs, &Limits::default())?;
    Ok((m, stats))
}
