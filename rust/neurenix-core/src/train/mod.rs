//! Training: one program per step, built on the IR the way PopART builds
//! its training session on ONNX. [`training_model`] turns a model into one
//! whose run is a whole training step:
//!
//! 1. the trained initializers become *state* (`ir::State`): float32 master
//!    copies that live in tile memory from run to run;
//! 2. a built-in loss, if asked for, is added (with its label input);
//! 3. after the usual passes, [`autodiff`] adds the backward graph;
//! 4. [`optim`] adds the optimizer's update of every trained weight (and of
//!    its own state), whose results are written back into the state at the
//!    end of the run.
//!
//! The hyperparameters are scalar inputs streamed with every step
//! (`optimizer/...`), so they change without recompiling. docs/training.md
//! describes the API and the arithmetic.

pub mod autodiff;
mod batch_norm;
pub mod build;
mod conv_grad;
mod dropout;
mod lookup;
pub mod optim;
mod transformer_grad;

use std::sync::Arc;

use crate::dtype::ElemType;
use crate::error::{Error, Result};
use crate::ir::{Dim, Model, State, ValueId};

use build::Builder;
pub use optim::{Optimizer, OptimizerKind};

/// The attribute marking the nodes of a training program's second segment
/// (the update that follows the replicas' all-reduce).
pub const SEGMENT_ATTR: &str = "neurenix.segment";

/// The attribute marking the nodes a training graph runs in training mode
/// (Dropout), so that no pass removes them as inference would.
pub const TRAINING_ATTR: &str = "neurenix.training";

/// The loss a training step minimises.
#[derive(Debug, Clone, PartialEq)]
pub enum Loss {
    /// A scalar output of the model (it computes its own loss).
    Output(String),
    /// Mean cross entropy of `logits` [N, C] against integer `labels` [N]
    /// (a new model input of that name), as PyTorch's `CrossEntropyLoss`.
    CrossEntropy { logits: String, labels: String },
    /// Mean squared error of `output` against `target` (a new model input
    /// of that name, shaped like `output`).
    Mse { output: String, target: String },
}

/// What to train and how.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub loss: Loss,
    /// The initializers to train; None: every floating-point one.
    pub trainable: Option<Vec<String>>,
    /// Initializers left out of training (after `trainable`).
    pub frozen: Vec<String>,
    pub optimizer: Optimizer,
    /// Initializers whose gradients (unscaled) are also returned, as
    /// outputs named `<name>.grad`.
    pub gradient_outputs: Vec<String>,
}

/// What the training graph added, for the host.
#[derive(Debug, Clone, Default)]
pub struct TrainingInfo {
    /// The trained initializers' names, in state order.
    pub weights: Vec<String>,
    /// The optimizer's state tensors' names (momenta, ...).
    pub optimizer_state: Vec<String>,
    /// The hyperparameter inputs, in the order the optimizer expects them.
    pub hyperparameters: Vec<String>,
    /// The name of the loss output.
    pub loss: String,
    /// The label input a built-in loss added, if any.
    pub label_input: Option<String>,
    /// State that is not trained but updated by every step: the running
    /// statistics of BatchNormalization in training mode.
    pub buffers: Vec<String>,
    /// A built-in cross entropy's number of classes: its labels must lie in
    /// [0, classes).
    pub label_classes: Option<usize>,
    /// Every state tensor (weights first): name, shape and device type.
    pub state: Vec<(String, Vec<usize>, crate::dtype::DeviceType)>,
}

/// Step one, before the passes: trained initializers become state, a
/// built-in loss is added. Returns the weights' values and the loss value.
pub fn prepare_training(
    m: &mut Model,
    opts: &TrainOptions,
) -> Result<(Vec<ValueId>, TrainingInfo)> {
    let g = &mut m.graph;
    let mut info = TrainingInfo::default();
    // Which initializers train.
    let mut names: Vec<String> = Vec::new();
    match &opts.trainable {
        Some(list) => {
            for n in list {
                let v = g
                    .find(n)
                    .filter(|&v| g.constant(v).is_some())
                    .ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "trainable names '{n}', which is not an initializer of the model"
                        ))
                    })?;
                if !g.constant(v).is_some_and(|c| c.dtype.is_float()) {
                    return Err(Error::InvalidArgument(format!(
                        "trainable initializer '{n}' is not floating point"
                    )));
                }
                names.push(n.clone());
            }
        }
        None => {
            // BatchNormalization's running statistics are not trained (they
            // are updated from the batches: batch_norm.rs), nor are Pow's
            // exponents (no gradient by the exponent).
            let untrained: Vec<ValueId> = g
                .nodes
                .iter()
                .flat_map(|n| match n.op_type.as_str() {
                    "BatchNormalization" => vec![n.input(3), n.input(4)],
                    "Pow" => vec![n.input(1)],
                    _ => vec![],
                })
                .flatten()
                .collect();
            for v in 0..g.values.len() {
                if g.constant(v)
                    .is_some_and(|c| c.dtype.is_float() && c.numel() > 0)
                    && g.nodes.iter().any(|n| n.inputs.contains(&Some(v)))
                    && !untrained.contains(&v)
                {
                    names.push(g.value(v).name.clone());
                }
            }
        }
    }
    for f in &opts.frozen {
        if g.find(f).and_then(|v| g.constant(v)).is_none() {
            return Err(Error::InvalidArgument(format!(
                "frozen names '{f}', which is not an initializer of the model"
            )));
        }
    }
    names.retain(|n| !opts.frozen.contains(n));
    if names.is_empty() {
        return Err(Error::InvalidArgument(
            "nothing to train: the model has no floating-point initializers left after trainable/frozen".into(),
        ));
    }
    let mut weights = Vec::new();
    let mut casts = Vec::new();
    for n in &names {
        let v = g.find(n).expect("checked above");
        let init = g.values[v].constant.take().expect("an initializer");
        let stored = init.dtype;
        let init = if init.dtype == ElemType::F32 {
            init
        } else {
            // Master weights are float32 whatever the model stores; the
            // model's nodes read them cast back to its type.
            Arc::new(crate::tensor::HostTensor::float(
                ElemType::F32,
                init.as_float(),
            ))
        };
        let shape: Vec<Dim> = init.shape().iter().map(|&d| Dim::Fixed(d)).collect();
        let val = g.value_mut(v);
        val.dtype = Some(ElemType::F32);
        val.shape = Some(shape.clone());
        if stored != ElemType::F32 {
            let c = g.fresh_value(&format!("{n}/as_{}", stored.name()));
            let cv = g.value_mut(c);
            cv.dtype = Some(stored);
            cv.shape = Some(shape);
            for node in &mut g.nodes {
                for i in node.inputs.iter_mut() {
                    if *i == Some(v) {
                        *i = Some(c);
                    }
                }
            }
            casts.push(crate::ir::Node {
                name: format!("{n}/as_{}", stored.name()),
                op_type: "Cast".into(),
                domain: String::new(),
                inputs: vec![Some(v)],
                outputs: vec![c],
                attrs: [(
                    "to".to_string(),
                    crate::ir::Attr::Int(stored.onnx_code() as i64),
                )]
                .into_iter()
                .collect(),
            });
        }
        g.state.push(State {
            value: v,
            init,
            update: None,
            layout_like: None,
            in_first_segment: false,
            cleared_after_update: false,
        });
        weights.push(v);
    }
    // The casts first: everything reads them.
    casts.append(&mut g.nodes);
    g.nodes = casts;
    // Dropout drops in training (dropout.rs): keep it through the passes.
    for n in &mut g.nodes {
        if n.op_type == "Dropout" {
            n.attrs
                .insert(TRAINING_ATTR.to_string(), crate::ir::Attr::Int(1));
        }
    }
    // BatchNormalization's running statistics become state before the passes
    // (so that no pass folds the layer away as inference would), updated by
    // every step (batch_norm.rs).
    let running: Vec<ValueId> = g
        .nodes
        .iter()
        .filter(|n| n.op_type == "BatchNormalization")
        .flat_map(|n| [n.input(3), n.input(4)])
        .flatten()
        .collect();
    for v in running {
        if g.is_state(v) {
            continue; // named in trainable: batch_norm.rs refuses it
        }
        let Some(init) = g.values[v].constant.take() else {
            continue; // computed statistics: batch_norm.rs refuses them
        };
        let init = if init.dtype == ElemType::F32 {
            init
        } else {
            Arc::new(crate::tensor::HostTensor::float(
                ElemType::F32,
                init.as_float(),
            ))
        };
        let val = g.value_mut(v);
        val.dtype = Some(ElemType::F32);
        val.shape = Some(init.shape().iter().map(|&d| Dim::Fixed(d)).collect());
        g.state.push(State {
            value: v,
            init,
            update: None,
            layout_like: None,
            in_first_segment: false,
            cleared_after_update: false,
        });
    }
    info.weights = names;
    // The loss.
    match &opts.loss {
        Loss::Output(name) => {
            let v = g
                .find(name)
                .filter(|v| g.outputs.contains(v))
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "loss '{name}' is not an output of the model; outputs: {}",
                        g.outputs
                            .iter()
                            .map(|&o| g.value(o).name.clone())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
            info.loss = g.value(v).name.clone();
        }
        Loss::CrossEntropy {
            labels,
            logits: out,
        }
        | Loss::Mse {
            target: labels,
            output: out,
        } => {
            // What the loss reads survives the passes' dead-code removal.
            let x = g.find(out).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "the loss reads '{out}', which the model does not have"
                ))
            })?;
            if !g.outputs.contains(&x) {
                g.outputs.push(x);
            }
            if g.find(labels).is_some() {
                return Err(Error::InvalidArgument(format!(
                    "the loss's label input '{labels}' has the name of a value the model already has"
                )));
            }
            let l = g.value_named(labels);
            g.inputs.push(l);
            info.label_input = Some(labels.clone());
            info.loss = "loss".to_string();
        }
    }
    Ok((weights, info))
}

/// Step three, after the passes (shapes known): the built-in loss, the
/// backward graph and the optimizer. `weights` from [`prepare_training`].
pub fn add_training(
    m: &mut Model,
    opts: &TrainOptions,
    weights: &[ValueId],
    info: &mut TrainingInfo,
) -> Result<()> {
    let loss = builtin_loss(m, opts)?;
    if let Loss::CrossEntropy { logits, .. } = &opts.loss {
        info.label_classes = m
            .graph
            .find(logits)
            .and_then(|v| m.graph.shape_of(v))
            .and_then(|s| s.get(1).copied());
    }
    let buffers = batch_norm::to_training_mode(m, weights)?;
    dropout::to_training_mode(m)?;
    lookup::to_products(m, weights)?;
    m.graph.toposort()?;
    info.buffers = buffers
        .iter()
        .map(|&v| m.graph.value(v).name.clone())
        .collect();
    let loss = match loss {
        Some(v) => v,
        None => m
            .graph
            .find(&info.loss)
            .expect("checked in prepare_training"),
    };
    let shape = m.graph.shape_of(loss).unwrap_or_default();
    if shape.iter().product::<usize>() != 1 {
        return Err(Error::InvalidArgument(format!(
            "loss '{}' must be a scalar (one element), it has shape {shape:?}",
            info.loss
        )));
    }
    if !m.graph.value(loss).dtype.is_some_and(|t| t.is_float()) {
        return Err(Error::InvalidArgument(format!(
            "loss '{}' must be floating point",
            info.loss
        )));
    }
    // A step returns the loss (and the gradients asked for), nothing else.
    m.graph.outputs = vec![loss];
    let scale = opts.optimizer.loss_scaling;
    let grads = {
        let mut b = Builder::new(m, "grad/");
        autodiff::gradients(&mut b, loss, weights, scale)?
    };
    for (k, (&w, g)) in weights.iter().zip(&grads).enumerate() {
        if g.is_none() {
            return Err(Error::InvalidArgument(format!(
                "the loss does not depend on trainable initializer '{}'; leave it out with frozen=[...]",
                info.weights[k]
            )));
        }
        let _ = w;
    }
    let grads: Vec<ValueId> = grads.into_iter().map(|g| g.expect("checked")).collect();
    // Gradient outputs (unscaled).
    for name in &opts.gradient_outputs {
        let k = info.weights.iter().position(|w| w == name).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "gradient of '{name}' asked for, but it is not a trained initializer"
            ))
        })?;
        let mut b = Builder::new(m, "");
        let g = b.scale(grads[k], 1.0 / scale)?;
        let out = b.unary("Identity", g)?;
        let gv = m.graph.value(out).name.clone();
        let want = format!("{name}.grad");
        rename(m, out, &want).map_err(|_| {
            Error::InvalidArgument(format!("cannot name the gradient output '{want}' ({gv})"))
        })?;
        m.graph.outputs.push(out);
    }
    optim::add_updates(m, &opts.optimizer, weights, &grads, info)?;
    m.graph.toposort()?;
    m.graph.remove_dead_nodes();
    info.state = m
        .graph
        .state
        .iter()
        .map(|s| {
            let dev = if s.init.dtype == ElemType::F16 {
                crate::dtype::DeviceType::F16
            } else {
                crate::dtype::DeviceType::F32
            };
            (
                m.graph.value(s.value).name.clone(),
                s.init.shape().to_vec(),
                dev,
            )
        })
        .collect();
    Ok(())
}

fn rename(m: &mut Model, v: ValueId, name: &str) -> Result<()> {
    if m.graph.find(name).is_some() {
        return Err(Error::InvalidArgument(format!("'{name}' exists")));
    }
    m.graph.rename_value(v, name);
    Ok(())
}

/// Adds a built-in loss; its output becomes the model output "loss".
fn builtin_loss(m: &mut Model, opts: &TrainOptions) -> Result<Option<ValueId>> {
    let (out_name, label_name, cross) = match &opts.loss {
        Loss::Output(_) => return Ok(None),
        Loss::CrossEntropy { logits, labels } => (logits, labels, true),
        Loss::Mse { output, target } => (output, target, false),
    };
    let x = m.graph.find(out_name).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "the loss reads '{out_name}', which the model does not have"
        ))
    })?;
    let label = m.graph.find(label_name).expect("added by prepare_training");
    let xs = m
        .graph
        .shape_of(x)
        .ok_or_else(|| Error::InvalidArgument(format!("'{out_name}' has no known shape")))?;
    let xt = m.graph.value(x).dtype.unwrap_or(ElemType::F32);
    let ls = m.graph.shape_of(label).unwrap_or_default();
    let lt = m.graph.value(label).dtype.unwrap_or(ElemType::F32);
    let mut b = Builder::new(m, "loss/");
    let loss = if cross {
        if xs.len() != 2 {
            return Err(Error::InvalidArgument(format!(
                "CrossEntropy takes logits of shape [N, C], '{out_name}' has {xs:?}"
            )));
        }
        if ls != [xs[0]] || !matches!(lt, ElemType::I64 | ElemType::I32) {
            return Err(Error::InvalidArgument(format!(
                "CrossEntropy labels '{label_name}' must be int64 or int32 of shape [{}], got {lt} {ls:?}",
                xs[0]
            )));
        }
        // one_hot = (labels[:, None] == arange(C)); loss = -mean(sum(one_hot * log_softmax(x)))
        let c = xs[1];
        let l2 = b.reshape(label, &[xs[0], 1])?;
        let classes = b.value("classes", lt, &[c]);
        b.m.graph.set_constant(
            classes,
            crate::tensor::HostTensor::int(
                lt,
                ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[c]), |i| i[0] as i64),
            ),
        );
        let eq = b.node("Equal", &[l2, classes], vec![], ElemType::Bool, &xs);
        let onehot = b.cast(eq, xt)?;
        let ls = b.node(
            "LogSoftmax",
            &[x],
            vec![("axis", crate::ir::Attr::Int(1))],
            xt,
            &xs,
        );
        let p = b.mul(onehot, ls)?;
        let s = b.reduce("ReduceSum", p, &[1], false)?;
        let mean = b.reduce("ReduceMean", s, &[0], false)?;
        b.unary("Neg", mean)?
    } else {
        if ls != xs {
            return Err(Error::InvalidArgument(format!(
                "MSE target '{label_name}' must have the output's shape {xs:?}, got {ls:?}"
            )));
        }
        let t = b.cast(label, xt)?;
        let d = b.sub(x, t)?;
        let sq = b.mul(d, d)?;
        let axes: Vec<usize> = (0..xs.len()).collect();
        b.reduce("ReduceMean", sq, &axes, false)?
    };
    let out = b.unary("Identity", loss)?;
    rename(m, out, "loss")?;
    m.graph.outputs.push(out);
    Ok(Some(out))
}
