//! The executable: compile through the device seam, then load, run and
//! unload, with host data converted to the device types and back.
//!
//! The device here is an echo device: its programs stream their inputs
//! straight back (the model is an Identity), so what comes out shows exactly
//! what the executable's host conversions did.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use neurenix_core::backend::{
    Backend, DeviceEngine, DeviceExecutable, EngineOptions, FloatingPointBehaviour, MatMulOptions,
    ReduceFinal, ReduceOp, TensorId,
};
use neurenix_core::compile::compile;
use neurenix_core::dtype::{DeviceType, ElemType};
use neurenix_core::error::{Error, Result};
use neurenix_core::expr::ExprInstr;
use neurenix_core::lower::precision::Precision;
use neurenix_core::passes::TensorSpec;
use neurenix_core::report::{DeviceReport, RunStats, StepCost, StepKind, SystemInfo};

use crate::common::{copts, ModelBuilder, TestBackend};

fn unsupported<T>(what: &str) -> Result<T> {
    Err(Error::Internal(format!("the echo device has no {what}")))
}

/// Records inputs and which input each output streams back.
#[derive(Default)]
struct EchoBackend {
    inputs: Vec<(DeviceType, usize)>,
    outputs: Vec<TensorId>,
    loads: Arc<AtomicUsize>,
}

impl Backend for EchoBackend {
    fn add_input(
        &mut self,
        _: &str,
        dtype: DeviceType,
        shape: &[usize],
        _: u32,
    ) -> Result<TensorId> {
        self.inputs.push((dtype, shape.iter().product()));
        Ok(self.inputs.len() as TensorId - 1)
    }
    fn add_constant(
        &mut self,
        _: &str,
        _: DeviceType,
        _: &[usize],
        _: Vec<u8>,
        _: u32,
    ) -> Result<TensorId> {
        unsupported("constants")
    }
    fn matmul(&mut self, _: TensorId, _: TensorId, _: &MatMulOptions) -> Result<TensorId> {
        unsupported("matmul")
    }
    fn map(
        &mut self,
        _: &[ExprInstr],
        _: &[TensorId],
        _: DeviceType,
        _: &[usize],
        _: u32,
        _: &str,
    ) -> Result<TensorId> {
        unsupported("map")
    }
    fn reduce(
        &mut self,
        _: TensorId,
        _: &[usize],
        _: ReduceOp,
        _: ReduceFinal,
        _: f64,
        _: DeviceType,
        _: u32,
        _: &str,
    ) -> Result<TensorId> {
        unsupported("reduce")
    }
    fn reshape(&mut self, x: TensorId, _: &[usize]) -> Result<TensorId> {
        Ok(x)
    }
    fn rearrange(
        &mut self,
        _: TensorId,
        _: i64,
        _: &[usize],
        _: &[i64],
        _: u32,
        _: &str,
    ) -> Result<TensorId> {
        unsupported("rearrange")
    }
    fn concat(&mut self, _: &[TensorId], _: usize, _: u32, _: &str) -> Result<TensorId> {
        unsupported("concat")
    }
    fn fill(&mut self, _: DeviceType, _: &[usize], _: f64, _: u32, _: &str) -> Result<TensorId> {
        unsupported("fill")
    }
    fn mark_output(&mut self, x: TensorId, _: &str) -> Result<()> {
        self.outputs.push(x);
        Ok(())
    }
    fn compile(self: Box<Self>) -> Result<Box<dyn DeviceExecutable>> {
        Ok(Box::new(EchoExecutable {
            inputs: self.inputs,
            outputs: self.outputs,
            loads: self.loads,
        }))
    }
}

struct EchoExecutable {
    inputs: Vec<(DeviceType, usize)>,
    outputs: Vec<TensorId>,
    loads: Arc<AtomicUsize>,
}

fn system() -> SystemInfo {
    SystemInfo {
        version: "echo".into(),
        chip: "echo".into(),
        num_ipus: 1,
        tiles_per_ipu: 1,
        bytes_per_tile: 1,
        clock_hz: 1.0,
        fp16_flops_per_cycle: 1,
        fp32_flops_per_cycle: 1,
        fp8_flops_per_cycle: 0,
        worker_threads: 1,
        exchange_bytes_per_cycle: 1,
        exchange_descriptor_cycles: 1,
        local_read_bytes_per_cycle: 1,
        local_write_bytes_per_cycle: 1,
        sync_cycles: 1,
        cross_ipu_sync_cycles: 1,
        ipu_link_bytes_per_sec: 1.0,
        ipu_links: 1,
        host_link: "echo".into(),
        host_link_bytes_per_sec: 1.0,
        host_transfer_latency_cycles: 1,
        vertex_overhead_cycles: 1,
        estimated_constants: vec![],
    }
}

impl DeviceExecutable for EchoExecutable {
    fn report(&self) -> DeviceReport {
        DeviceReport {
            system: system(),
            num_ipus: 1,
            tiles: vec![],
            plans: vec![],
            steps: vec![StepCost {
                ipu: 0,
                kind: StepKind::Compute,
                name: "echo".into(),
                cycles: 7,
                bytes: 0,
                items: 1,
                node: "echo".into(),
                tile: Some(0),
                live_bytes: 0,
                terms: vec![],
            }],
            variables: vec![],
            warnings: vec!["echo".into()],
            cycles_per_run: 7,
        }
    }
    fn load(&self, _options: &EngineOptions) -> Result<Box<dyn DeviceEngine>> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(EchoEngine {
            inputs: self.inputs.clone(),
            outputs: self.outputs.clone(),
            runs: 0,
        }))
    }
}

struct EchoEngine {
    inputs: Vec<(DeviceType, usize)>,
    outputs: Vec<TensorId>,
    runs: u64,
}

impl DeviceEngine for EchoEngine {
    fn run(&mut self, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        for ((dt, n), data) in self.inputs.iter().zip(inputs) {
            assert_eq!(
                data.len(),
                dt.size() * n,
                "the executable streams device bytes"
            );
        }
        self.runs += 1;
        Ok(self
            .outputs
            .iter()
            .map(|&i| inputs[i as usize].to_vec())
            .collect())
    }
    fn last_run(&self) -> Option<RunStats> {
        (self.runs > 0).then(|| RunStats {
            steps: self.runs,
            ..RunStats::default()
        })
    }
}

/// y = Identity(x) for an input of `dtype` and shape [n].
fn echo_model(dtype: ElemType, n: usize) -> neurenix_core::ir::Model {
    let mut b = ModelBuilder::new(17);
    b.input_fixed("x", dtype, &[n]);
    b.node("Identity", "id", &["x"], &["y"]);
    b.output("y");
    b.build()
}

fn spec(dtype: ElemType, n: usize) -> Vec<TensorSpec> {
    vec![TensorSpec {
        name: "x".into(),
        dtype,
        shape: vec![n],
    }]
}

fn le_f64(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn runs_convert_host_data_through_the_device_types() {
    let loads = Arc::new(AtomicUsize::new(0));
    let mut new_backend = || -> Result<Box<dyn Backend>> {
        Ok(Box::new(EchoBackend {
            loads: loads.clone(),
            ..Default::default()
        }))
    };
    let m = echo_model(ElemType::F64, 3);
    let mut exe = compile(
        &m,
        &spec(ElemType::F64, 3),
        &copts(Precision::Float32, 1),
        &mut new_backend,
    )
    .unwrap();
    assert_eq!(exe.inputs()[0].device_type, DeviceType::F32);
    assert_eq!(exe.outputs()[0].dtype, ElemType::F64);
    assert_eq!(exe.report().cycles_per_run, 7);
    assert!(!exe.is_loaded() && exe.last_run().is_none());
    // float64 in, float32 on the device, float64 out: values round through f32.
    let x = [0.1f64, -2.5, 1e30];
    let out = exe.run(&[&le_f64(&x)]).unwrap();
    let want: Vec<f64> = x.iter().map(|&v| v as f32 as f64).collect();
    assert_eq!(out, vec![le_f64(&want)]);
    assert!(exe.is_loaded(), "run loads the program when needed");
    assert_eq!(exe.last_run().unwrap().steps, 1);
    // Values beyond float32 are refused before anything reaches the device.
    let e = exe.run(&[&le_f64(&[1.0, 1e300, 0.0])]).unwrap_err();
    assert!(
        matches!(&e, Error::InputMismatch { input, .. } if input == "x"),
        "{e}"
    );
    assert_eq!(exe.last_run().unwrap().steps, 1);
    // Unload frees the engine; the next run loads a fresh one.
    exe.unload();
    assert!(!exe.is_loaded() && exe.last_run().is_none());
    exe.run(&[&le_f64(&x)]).unwrap();
    assert_eq!(loads.load(Ordering::SeqCst), 2);
    exe.load(0, FloatingPointBehaviour::default()).unwrap();
    assert_eq!(loads.load(Ordering::SeqCst), 3);
}

#[test]
fn runs_check_the_number_and_size_of_inputs() {
    let m = echo_model(ElemType::I64, 2);
    let mut exe = compile(
        &m,
        &spec(ElemType::I64, 2),
        &copts(Precision::Float32, 1),
        &mut || -> Result<Box<dyn Backend>> { Ok(Box::<EchoBackend>::default()) },
    )
    .unwrap();
    let ok: Vec<u8> = [5i64, -7].iter().flat_map(|v| v.to_le_bytes()).collect();
    let out = exe.run(&[&ok]).unwrap();
    assert_eq!(out, vec![ok.clone()]);
    let e = exe.run(&[]).unwrap_err();
    assert!(e.to_string().contains("takes 1 input(s), got 0"), "{e}");
    let e = exe.run(&[&ok[..12]]).unwrap_err();
    assert!(e.to_string().contains("needs 16 bytes"), "{e}");
    assert!(e.to_string().contains("got 12"), "{e}");
    // int64 values the device's int32 cannot hold are named.
    let big: Vec<u8> = [1i64, 1 << 40]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let e = exe.run(&[&big]).unwrap_err();
    assert!(
        matches!(&e, Error::InputMismatch { .. }) && e.to_string().contains("1099511627776"),
        "{e}"
    );
}

#[test]
fn a_backend_that_cannot_compile_says_so() {
    // The lowering test double builds graphs but compiles nothing.
    let m = echo_model(ElemType::F32, 2);
    let e = compile(
        &m,
        &spec(ElemType::F32, 2),
        &copts(Precision::Float32, 1),
        &mut || -> Result<Box<dyn Backend>> {
            Ok(Box::new(TestBackend::new().feed("x", vec![1.0, 2.0])))
        },
    )
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::Internal(m) if m.contains("does not implement compile")),
        "{e}"
    );
}
