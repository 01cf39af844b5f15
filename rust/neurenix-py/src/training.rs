//! `compile_training`: a training step of a model compiled for the
//! simulated IPUs (`neurenix_core::compile::compile_training`).

use std::sync::Mutex;

use neurenix_core::backend::Backend;
use neurenix_core::compile::{compile_training as compile_core, CompileOptions};
use neurenix_core::dtype::ElemType;
use neurenix_core::error::Error;
use neurenix_core::lower::precision::{parse_fp8_format, Precision};
use neurenix_core::shard::Sharding;
use neurenix_core::train::{Loss, Optimizer, OptimizerKind, TrainOptions};
use neurenix_sys::GraphBuilder;
use pyo3::prelude::*;

use crate::errors::{guarded, IntoPyResult};
use crate::executable::PyExecutable;
use crate::model::{tensor_specs, PyModel};
use crate::records::{TensorSpec, TrainingInfo};

/// Compiles one training step of `model` for `inputs` (one batch, labels
/// included) on one IPU of `system`. `loss`: ("output", name, "") or
/// ("cross_entropy", logits, labels) or ("mse", output, target).
/// `optimizer`: "sgd", "sgd_momentum", "sgd_nesterov", "adam", "adamw" or
/// "lamb". `accumulate`: gradient accumulation (the update applies in runs
/// whose `optimizer/apply` input is 1). `replicas` > 1: one IPU per replica,
/// a program in two segments (`Executable.run_replicated`). Returns the
/// executable and what training added.
#[pyfunction]
#[pyo3(signature = (model, inputs, system, precision, memory_proportion, enable_half_partials, loss, optimizer,
                    trainable = None, frozen = Vec::new(), loss_scaling = 1.0, clip_norm = false,
                    state_dtype = "float32", gradient_outputs = Vec::new(), fp8_format = "e4m3",
                    accumulate = false, replicas = 1))]
#[allow(clippy::too_many_arguments)]
pub fn compile_training(
    py: Python<'_>,
    model: &PyModel,
    inputs: Vec<TensorSpec>,
    system: String,
    precision: &str,
    memory_proportion: f64,
    enable_half_partials: bool,
    loss: (String, String, String),
    optimizer: &str,
    trainable: Option<Vec<String>>,
    frozen: Vec<String>,
    loss_scaling: f64,
    clip_norm: bool,
    state_dtype: &str,
    gradient_outputs: Vec<String>,
    fp8_format: &str,
    accumulate: bool,
    replicas: u32,
) -> PyResult<(PyExecutable, TrainingInfo)> {
    guarded(|| {
        let specs = tensor_specs(&inputs).py()?;
        let options = CompileOptions {
            precision: Precision::parse(precision).py()?,
            memory_proportion,
            enable_half_partials,
            num_ipus: replicas.max(1),
            replication_factor: replicas.max(1),
            device_iterations: 1,
            sharding: Sharding::Auto,
            execution: None,
            fp8_format: parse_fp8_format(fp8_format).py()?,
        };
        let loss = match loss.0.as_str() {
            "output" => Loss::Output(loss.1),
            "cross_entropy" => Loss::CrossEntropy {
                logits: loss.1,
                labels: loss.2,
            },
            "mse" => Loss::Mse {
                output: loss.1,
                target: loss.2,
            },
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown loss kind '{other}'"
                )))
                .py()
            }
        };
        let kind = match optimizer {
            "sgd" => OptimizerKind::Sgd {
                momentum: false,
                nesterov: false,
            },
            "sgd_momentum" => OptimizerKind::Sgd {
                momentum: true,
                nesterov: false,
            },
            "sgd_nesterov" => OptimizerKind::Sgd {
                momentum: true,
                nesterov: true,
            },
            "adam" => OptimizerKind::Adam { decoupled: false },
            "adamw" => OptimizerKind::Adam { decoupled: true },
            "lamb" => OptimizerKind::Lamb,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown optimizer '{other}'"
                )))
                .py()
            }
        };
        let state_dtype = match state_dtype {
            "float32" => ElemType::F32,
            "float16" => ElemType::F16,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "optimizer state type must be 'float32' or 'float16', got '{other}'"
                )))
                .py()
            }
        };
        let train = TrainOptions {
            loss,
            trainable,
            frozen,
            optimizer: Optimizer {
                kind,
                loss_scaling,
                clip_norm,
                state_dtype,
                accumulate: accumulate && replicas <= 1,
                all_reduce: replicas > 1,
            },
            gradient_outputs,
        };
        let (exe, info) = py
            .detach(|| {
                let mut new_backend = || -> neurenix_core::error::Result<Box<dyn Backend>> {
                    Ok(Box::new(GraphBuilder::new(&system, 1)?))
                };
                compile_core(&model.model, &specs, &options, &train, &mut new_backend)
            })
            .py()?;
        Ok((
            PyExecutable {
                exe: Mutex::new(exe),
                system,
            },
            info.into(),
        ))
    })
}
