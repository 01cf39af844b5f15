//! Lowering a model onto a fresh test backend, which executes it.

use neurenix_core::compile::{lower_model, CompileOptions, Lowered};
use neurenix_core::dtype::ElemType;
use neurenix_core::error::Result;
use neurenix_core::ir::Model;
use neurenix_core::lower::precision::Precision;
use neurenix_core::passes::TensorSpec;

use super::backend::TestBackend;
use super::check::numel;

pub struct Feed {
    pub name: String,
    pub dtype: ElemType,
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

pub fn feed(name: &str, dtype: ElemType, shape: &[usize], data: Vec<f64>) -> Feed {
    assert_eq!(
        numel(shape),
        data.len(),
        "feed '{name}' does not fill its shape"
    );
    Feed {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
        data,
    }
}

pub fn copts(precision: Precision, num_ipus: u32) -> CompileOptions {
    CompileOptions {
        precision,
        memory_proportion: 0.6,
        enable_half_partials: false,
        num_ipus,
        ..CompileOptions::default()
    }
}

pub fn specs(feeds: &[Feed]) -> Vec<TensorSpec> {
    feeds
        .iter()
        .map(|f| TensorSpec {
            name: f.name.clone(),
            dtype: f.dtype,
            shape: f.shape.clone(),
        })
        .collect()
}

/// Lowers `model` for `feeds` onto a fresh test backend, which executes it.
pub fn try_lower(
    model: &Model,
    feeds: &[Feed],
    opts: &CompileOptions,
) -> Result<(Lowered, TestBackend)> {
    let mut be = TestBackend::new();
    for f in feeds {
        be.feeds.insert(f.name.clone(), f.data.clone());
    }
    let l = lower_model(model, &specs(feeds), opts, &mut be)?;
    Ok((l, be))
}

#[track_caller]
pub fn lower(model: &Model, feeds: &[Feed], opts: &CompileOptions) -> (Lowered, TestBackend) {
    match try_lower(model, feeds, opts) {
        Ok(r) => r,
        Err(e) => panic!("lowering failed: {e:?}"),
    }
}
