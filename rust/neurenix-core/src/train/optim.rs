//! Optimizers as graph nodes: each trained weight's update, with PyTorch's
//! rules (as PopTorch's optimizers follow them), computed in float32 (the
//! `Master` role) from the gradient divided by the static loss scale and,
//! when asked, clipped by the global norm. Hyperparameters are scalar
//! inputs (`optimizer/...`) streamed with every step; the host computes
//! them (`neurenix.hardware.graphcore.optim`), bias corrections included.

use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};

use crate::dtype::ElemType;
use crate::error::{Error, Result};
use crate::ir::{Dim, Model, State, ValueId};
use crate::tensor::HostTensor;

use super::build::Builder;
use super::TrainingInfo;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptimizerKind {
    /// `momentum`: keeps a momentum buffer per weight.
    Sgd {
        momentum: bool,
        nesterov: bool,
    },
    /// `decoupled`: AdamW's weight decay.
    Adam {
        decoupled: bool,
    },
    Lamb,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Optimizer {
    pub kind: OptimizerKind,
    /// Static loss scale: the backward pass starts from it, the update
    /// divides it out.
    pub loss_scaling: f64,
    /// Clip the gradients by their global norm (the limit is streamed).
    pub clip_norm: bool,
    /// Type of the optimizer's state (float32 or float16).
    pub state_dtype: ElemType,
    /// Gradient accumulation: every run adds its gradients to an
    /// accumulator; the update (with the accumulated gradients times the
    /// streamed scale) is applied, and the accumulators cleared, only in
    /// runs where the streamed `optimizer/apply` is 1.
    pub accumulate: bool,
    /// Replicas: the program has two segments; the first adds every run's
    /// gradients to the accumulators, which the host then sums over the
    /// replicas (the all-reduce), and the second updates from them (times
    /// the streamed `optimizer/accumulation_scale`) and clears them. Every
    /// run executes the first, the step's last one the second too.
    pub all_reduce: bool,
}

impl Optimizer {
    /// The hyperparameter inputs, in the order the host streams them.
    pub fn hyperparameters(&self) -> Vec<&'static str> {
        let mut h = match self.kind {
            OptimizerKind::Sgd { .. } => vec![
                "optimizer/lr",
                "optimizer/weight_decay",
                "optimizer/momentum",
                "optimizer/buffer_decay",
                "optimizer/gradient_coefficient",
            ],
            OptimizerKind::Adam { .. } => vec![
                "optimizer/step_size",
                "optimizer/beta1",
                "optimizer/beta2",
                "optimizer/eps",
                "optimizer/sqrt_bias_correction2",
                "optimizer/weight_decay",
                "optimizer/decay",
            ],
            OptimizerKind::Lamb => vec![
                "optimizer/lr",
                "optimizer/beta1",
                "optimizer/beta2",
                "optimizer/eps",
                "optimizer/bias_correction1",
                "optimizer/bias_correction2",
                "optimizer/weight_decay",
            ],
        };
        if self.clip_norm {
            h.push("optimizer/max_grad_norm");
        }
        if self.all_reduce {
            h.push("optimizer/accumulation_scale");
        } else if self.accumulate {
            h.push("optimizer/apply");
            h.push("optimizer/accumulation_scale");
        }
        h
    }

    pub fn validate(&self) -> Result<()> {
        if !(self.loss_scaling.is_finite() && self.loss_scaling > 0.0) {
            return Err(Error::InvalidArgument(format!(
                "loss_scaling must be a positive number, got {}",
                self.loss_scaling
            )));
        }
        if !matches!(self.state_dtype, ElemType::F32 | ElemType::F16) {
            return Err(Error::InvalidArgument(format!(
                "optimizer state must be float32 or float16, got {}",
                self.state_dtype
            )));
        }
        Ok(())
    }
}

/// A new state tensor of zeros shaped like `like` (laid out like weight
/// `w`), and its value.
fn zeros_state(
    b: &mut Builder,
    name: &str,
    like: &[usize],
    dtype: ElemType,
    w: ValueId,
) -> ValueId {
    let v = b.m.graph.fresh_value(name);
    let val = b.m.graph.value_mut(v);
    val.dtype = Some(ElemType::F32);
    val.shape = Some(like.iter().map(|&d| Dim::Fixed(d)).collect());
    b.m.graph.state.push(State {
        value: v,
        init: Arc::new(HostTensor::float(dtype, ArrayD::zeros(IxDyn(like)))),
        update: None,
        layout_like: Some(w),
        in_first_segment: false,
        cleared_after_update: false,
    });
    v
}

fn set_update(m: &mut Model, state: ValueId, update: ValueId) {
    for s in &mut m.graph.state {
        if s.value == state {
            s.update = Some(update);
        }
    }
}

/// Adds every weight's update (and the optimizer state's).
pub fn add_updates(
    m: &mut Model,
    opt: &Optimizer,
    weights: &[ValueId],
    grads: &[ValueId],
    info: &mut TrainingInfo,
) -> Result<()> {
    opt.validate()?;
    // Hyperparameter inputs.
    let mut hp = std::collections::HashMap::new();
    for name in opt.hyperparameters() {
        if m.graph.find(name).is_some() {
            return Err(Error::InvalidArgument(format!(
                "the model already has a value named '{name}', which training needs for a hyperparameter"
            )));
        }
        let v = m.graph.value_named(name);
        let val = m.graph.value_mut(v);
        val.dtype = Some(ElemType::F32);
        val.shape = Some(Vec::new());
        m.graph.inputs.push(v);
        hp.insert(name, v);
        info.hyperparameters.push(name.to_string());
    }
    let h = |n: &str| hp[&format!("optimizer/{n}").as_str()];
    let mut b = Builder::new(m, "optimizer/");
    b.master = true;
    // Unscaled gradients.
    let mut gs = Vec::with_capacity(grads.len());
    for &g in grads {
        let g = b.cast(g, ElemType::F32)?;
        gs.push(b.scale(g, 1.0 / opt.loss_scaling)?);
    }
    // Gradient accumulation: the step's gradient is the accumulator plus this
    // run's, scaled; the accumulator keeps the sum until the step applies.
    if opt.all_reduce {
        for (k, g) in gs.iter_mut().enumerate() {
            let w = weights[k];
            let shape = b.shape(w)?;
            let acc = zeros_state(
                &mut b,
                &format!("{}/accumulator", info.weights[k]),
                &shape,
                ElemType::F32,
                w,
            );
            let total = b.add(acc, *g)?;
            set_update(b.m, acc, total);
            if let Some(s) = b.m.graph.state.iter_mut().find(|s| s.value == acc) {
                s.in_first_segment = true;
                s.cleared_after_update = true;
            }
            *g = acc;
        }
        // The rest reads the accumulators once they hold every replica's sum.
        b.second_segment = true;
        for g in gs.iter_mut() {
            *g = b.mul(*g, h("accumulation_scale"))?;
        }
    }
    let apply = if opt.accumulate && !opt.all_reduce {
        let half = b.constant(0.5, ElemType::F32, &[]);
        let apply = b.node("Greater", &[h("apply"), half], vec![], ElemType::Bool, &[]);
        let zero = b.constant(0.0, ElemType::F32, &[]);
        for (k, g) in gs.iter_mut().enumerate() {
            let w = weights[k];
            let shape = b.shape(w)?;
            let acc = zeros_state(
                &mut b,
                &format!("{}/accumulator", info.weights[k]),
                &shape,
                ElemType::F32,
                w,
            );
            let total = b.add(acc, *g)?;
            let cleared = b.node(
                "Where",
                &[apply, zero, total],
                vec![],
                ElemType::F32,
                &shape,
            );
            set_update(b.m, acc, cleared);
            *g = b.mul(total, h("accumulation_scale"))?;
        }
        Some(apply)
    } else {
        None
    };
    let accumulators: Vec<ValueId> = b.m.graph.state.iter().map(|s| s.value).collect();
    if opt.clip_norm {
        // PyTorch's clip_grad_norm_: c = min(1, max_norm / (norm + 1e-6)).
        let mut total: Option<ValueId> = None;
        for &g in &gs {
            let r = b.shape(g)?.len();
            let axes: Vec<usize> = (0..r).collect();
            let sq = b.mul(g, g)?;
            let s = b.reduce("ReduceSum", sq, &axes, false)?;
            total = Some(match total {
                None => s,
                Some(t) => b.add(t, s)?,
            });
        }
        let total = total.expect("at least one weight");
        let norm = b.unary("Sqrt", total)?;
        let eps = b.constant(1e-6, ElemType::F32, &[]);
        let den = b.add(norm, eps)?;
        let ratio = b.div(h("max_grad_norm"), den)?;
        let one = b.constant(1.0, ElemType::F32, &[]);
        let c = b.binary("Min", ratio, one)?;
        for g in &mut gs {
            *g = b.mul(*g, c)?;
        }
    }
    for (k, (&w, &g)) in weights.iter().zip(&gs).enumerate() {
        let weight = w;
        let shape = b.shape(w)?;
        let wname = info.weights[k].clone();
        let new_w = match opt.kind {
            OptimizerKind::Sgd { momentum, nesterov } => {
                let wd = b.mul(h("weight_decay"), w)?;
                // The weight's term first: the result (and all that follows) is laid
                // out like the weight, the gradient moved to it once.
                let d = b.add(wd, g)?;
                let step = if momentum {
                    let buf = zeros_state(
                        &mut b,
                        &format!("{wname}/momentum"),
                        &shape,
                        opt.state_dtype,
                        w,
                    );
                    let kept = b.mul(h("buffer_decay"), buf)?;
                    let fresh = b.mul(h("gradient_coefficient"), d)?;
                    let buf_new = b.add(kept, fresh)?;
                    set_update(b.m, buf, buf_new);
                    if nesterov {
                        let mb = b.mul(h("momentum"), buf_new)?;
                        b.add(d, mb)?
                    } else {
                        buf_new
                    }
                } else {
                    d
                };
                let delta = b.mul(h("lr"), step)?;
                b.sub(w, delta)?
            }
            OptimizerKind::Adam { .. } => {
                // PyTorch: g += wd * w (Adam) or w *= 1 - lr * wd (AdamW;
                // the host streams wd = 0 or decay = 1 for the other).
                let wd = b.mul(h("weight_decay"), w)?;
                let g = b.add(wd, g)?;
                let w = b.mul(h("decay"), w)?;
                let (mv, vv) = moments(&mut b, &wname, &shape, g, opt, &h, weight)?;
                let sv = b.unary("Sqrt", vv)?;
                let den = b.div(sv, h("sqrt_bias_correction2"))?;
                let den = b.add(den, h("eps"))?;
                let q = b.div(mv, den)?;
                let delta = b.mul(h("step_size"), q)?;
                b.sub(w, delta)?
            }
            OptimizerKind::Lamb => {
                let (mv, vv) = moments(&mut b, &wname, &shape, g, opt, &h, weight)?;
                let mh = b.div(mv, h("bias_correction1"))?;
                let vh = b.div(vv, h("bias_correction2"))?;
                let sv = b.unary("Sqrt", vh)?;
                let den = b.add(sv, h("eps"))?;
                let r = b.div(mh, den)?;
                let wd = b.mul(h("weight_decay"), w)?;
                let r = b.add(r, wd)?;
                // trust = |w| / |r| when both are non-zero, else 1.
                let axes: Vec<usize> = (0..shape.len()).collect();
                let w2 = b.mul(w, w)?;
                let wn = b.reduce("ReduceSum", w2, &axes, false)?;
                let wn = b.unary("Sqrt", wn)?;
                let r2 = b.mul(r, r)?;
                let rn = b.reduce("ReduceSum", r2, &axes, false)?;
                let rn = b.unary("Sqrt", rn)?;
                let zero = b.constant(0.0, ElemType::F32, &[]);
                let one = b.constant(1.0, ElemType::F32, &[]);
                let wpos = b.node("Greater", &[wn, zero], vec![], ElemType::Bool, &[]);
                let rpos = b.node("Greater", &[rn, zero], vec![], ElemType::Bool, &[]);
                let both = b.node("And", &[wpos, rpos], vec![], ElemType::Bool, &[]);
                let ratio = b.div(wn, rn)?;
                let trust = b.node("Where", &[both, ratio, one], vec![], ElemType::F32, &[]);
                let lt = b.mul(h("lr"), trust)?;
                let delta = b.mul(lt, r)?;
                b.sub(w, delta)?
            }
        };
        set_update(b.m, weight, new_w);
    }
    // With accumulation, the weights and the optimizer's state change only
    // in runs that apply the step (the accumulators change in every run).
    if let Some(apply) = apply {
        let gated: Vec<(usize, ValueId, ValueId)> =
            b.m.graph
                .state
                .iter()
                .enumerate()
                .filter(|(_, s)| !accumulators.contains(&s.value) || weights.contains(&s.value))
                .filter_map(|(i, s)| s.update.map(|u| (i, s.value, u)))
                .collect();
        for (i, old, new) in gated {
            let shape = b.shape(old)?;
            let kept = b.node("Where", &[apply, new, old], vec![], ElemType::F32, &shape);
            b.m.graph.state[i].update = Some(kept);
        }
    }
    info.optimizer_state =
        b.m.graph
            .state
            .iter()
            .filter(|s| !weights.contains(&s.value) && s.layout_like.is_some())
            .map(|s| b.m.graph.value(s.value).name.clone())
            .collect();
    Ok(())
}

/// Adam's first and second moments of `g`, as new state; their updated
/// values.
#[allow(clippy::too_many_arguments)]
fn moments(
    b: &mut Builder,
    wname: &str,
    shape: &[usize],
    g: ValueId,
    opt: &Optimizer,
    h: &dyn Fn(&str) -> ValueId,
    w: ValueId,
) -> Result<(ValueId, ValueId)> {
    let m = zeros_state(b, &format!("{wname}/exp_avg"), shape, opt.state_dtype, w);
    let v = zeros_state(b, &format!("{wname}/exp_avg_sq"), shape, opt.state_dtype, w);
    let one = b.constant(1.0, ElemType::F32, &[]);
    let b1 = h("beta1");
    let b2 = h("beta2");
    let omb1 = b.sub(one, b1)?;
    let omb2 = b.sub(one, b2)?;
    let mk = b.mul(b1, m)?;
    let mg = b.mul(omb1, g)?;
    let m_new = b.add(mk, mg)?;
    let vk = b.mul(b2, v)?;
    let g2 = b.mul(g, g)?;
    let vg = b.mul(omb2, g2)?;
    let v_new = b.add(vk, vg)?;
    set_update(b.m, m, m_new);
    set_update(b.m, v, v_new);
    Ok((m_new, v_new))
}
