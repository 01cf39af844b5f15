//! `TestBackend`: a recording, evaluating implementation of
//! `neurenix_core::backend::Backend`. Every call is executed eagerly on the
//! host in f64 (see `interp`) and recorded (kind, IPU, dtype, shape,
//! details) so tests can count and inspect calls. Values are rounded to
//! their device type when stored (float32, float16, int32, bool), and
//! instructions flagged `half` round their float results to binary16, like
//! the simulator's map vertex. The backend enforces the device rules the
//! compiler must respect: operands of an operation live on the operation's
//! IPU, operand kinds agree, shapes agree.

use std::collections::HashMap;

use half::f16;
use neurenix_core::backend::{Backend, MatMulOptions, ReduceFinal, ReduceOp, TensorId};
use neurenix_core::dtype::DeviceType;
use neurenix_core::error::Result;
use neurenix_core::expr::ExprInstr;

use super::check::numel;
use super::interp::{eval_postfix, fail, store, unravel, DevT};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Input,
    Constant,
    MatMul,
    Map,
    Reduce,
    Reshape,
    Rearrange,
    Concat,
    Fill,
    Output,
}

/// What the tests inspect of a call, besides its kind, IPU, type and shape.
#[derive(Debug, Clone)]
pub enum Detail {
    None,
    Map(Vec<ExprInstr>),
    Reduce { op: ReduceOp, fin: ReduceFinal },
    MatMul(MatMulOptions),
}

/// One recorded backend call.
#[derive(Debug, Clone)]
pub struct Call {
    pub kind: Kind,
    pub ipu: u32,
    /// Device type of the result (for outputs: of the streamed tensor).
    pub dtype: DeviceType,
    pub shape: Vec<usize>,
    pub name: String,
    pub args: Vec<TensorId>,
    pub result: Option<TensorId>,
    pub detail: Detail,
}

#[derive(Default)]
pub struct TestBackend {
    pub tensors: Vec<DevT>,
    pub calls: Vec<Call>,
    /// Host data of the inputs, by name (in the model's element type).
    pub feeds: HashMap<String, Vec<f64>>,
    /// Streamed outputs in call order.
    pub outputs: Vec<(String, TensorId)>,
}

fn kind_of(dt: DeviceType) -> &'static str {
    match dt {
        DeviceType::F32 | DeviceType::F16 | DeviceType::F8E4M3FNUZ | DeviceType::F8E5M2FNUZ => {
            "float"
        }
        DeviceType::I32 => "int",
        DeviceType::Bool => "bool",
    }
}

/// Decodes device bytes independently of the crate.
pub fn decode(dt: DeviceType, bytes: &[u8]) -> Vec<f64> {
    match dt {
        DeviceType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        DeviceType::F16 => bytes
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes(c.try_into().unwrap()).to_f64())
            .collect(),
        DeviceType::I32 => bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        DeviceType::Bool => bytes
            .iter()
            .map(|&b| if b != 0 { 1.0 } else { 0.0 })
            .collect(),
        DeviceType::F8E4M3FNUZ | DeviceType::F8E5M2FNUZ => {
            panic!("the test backend holds no float8 tensors")
        }
    }
}

impl TestBackend {
    pub fn new() -> TestBackend {
        TestBackend::default()
    }
    pub fn feed(mut self, name: &str, data: Vec<f64>) -> TestBackend {
        self.feeds.insert(name.into(), data);
        self
    }

    fn get(&self, id: TensorId) -> Result<&DevT> {
        match self.tensors.get(id as usize) {
            Some(t) => Ok(t),
            None => fail(format!("unknown tensor {id}")),
        }
    }
    fn on_ipu(&self, id: TensorId, ipu: u32, what: &str) -> Result<&DevT> {
        let t = self.get(id)?;
        if t.ipu != ipu {
            return fail(format!(
                "{what}: operand {id} lives on IPU {} but the operation runs on IPU {ipu}",
                t.ipu
            ));
        }
        Ok(t)
    }
    fn push(
        &mut self,
        t: DevT,
        kind: Kind,
        name: &str,
        args: Vec<TensorId>,
        detail: Detail,
    ) -> TensorId {
        let id = self.tensors.len() as TensorId;
        self.calls.push(Call {
            kind,
            ipu: t.ipu,
            dtype: t.dtype,
            shape: t.shape.clone(),
            name: name.into(),
            args,
            result: Some(id),
            detail,
        });
        self.tensors.push(t);
        id
    }

    // -- queries used by the tests --------------------------------------------

    pub fn count(&self, kind: Kind) -> usize {
        self.calls.iter().filter(|c| c.kind == kind).count()
    }
    pub fn calls_of(&self, kind: Kind) -> Vec<&Call> {
        self.calls.iter().filter(|c| c.kind == kind).collect()
    }
    pub fn output(&self, name: &str) -> &DevT {
        let (_, id) = self
            .outputs
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no output named '{name}' (outputs: {:?})", self.outputs));
        &self.tensors[*id as usize]
    }
    pub fn out(&self, name: &str) -> Vec<f64> {
        self.output(name).data.clone()
    }
}

impl Backend for TestBackend {
    fn add_input(
        &mut self,
        name: &str,
        dtype: DeviceType,
        shape: &[usize],
        ipu: u32,
    ) -> Result<TensorId> {
        let Some(data) = self.feeds.get(name) else {
            return fail(format!("no data fed for input '{name}'"));
        };
        if data.len() != numel(shape) {
            return fail(format!(
                "input '{name}' fed {} values for shape {shape:?}",
                data.len()
            ));
        }
        let data = data.iter().map(|&v| store(dtype, v)).collect();
        Ok(self.push(
            DevT {
                dtype,
                shape: shape.to_vec(),
                data,
                ipu,
            },
            Kind::Input,
            name,
            vec![],
            Detail::None,
        ))
    }

    fn add_constant(
        &mut self,
        name: &str,
        dtype: DeviceType,
        shape: &[usize],
        data: Vec<u8>,
        ipu: u32,
    ) -> Result<TensorId> {
        if data.len() != numel(shape) * dtype.size() {
            return fail(format!(
                "constant '{name}': {} bytes for {dtype} {shape:?}",
                data.len()
            ));
        }
        let vals = decode(dtype, &data);
        Ok(self.push(
            DevT {
                dtype,
                shape: shape.to_vec(),
                data: vals,
                ipu,
            },
            Kind::Constant,
            name,
            vec![],
            Detail::None,
        ))
    }

    fn matmul(&mut self, a: TensorId, b: TensorId, p: &MatMulOptions) -> Result<TensorId> {
        let ta = self.on_ipu(a, p.ipu, &p.name)?.clone();
        let tb = self.on_ipu(b, p.ipu, &p.name)?.clone();
        if ta.shape.len() != 3 || tb.shape.len() != 3 {
            return fail(format!("matmul of {:?} and {:?}", ta.shape, tb.shape));
        }
        let (g, m, k) = (ta.shape[0], ta.shape[1], ta.shape[2]);
        let (g2, k2, n) = (tb.shape[0], tb.shape[1], tb.shape[2]);
        if g != g2 || k != k2 {
            return fail(format!("matmul of {:?} and {:?}", ta.shape, tb.shape));
        }
        if ta.dtype != tb.dtype
            || !ta.dtype.is_float()
            || !p.out_dtype.is_float()
            || !p.partials.is_float()
        {
            return fail(format!(
                "matmul of {} and {} into {}",
                ta.dtype, tb.dtype, p.out_dtype
            ));
        }
        if !(p.memory_proportion > 0.0 && p.memory_proportion <= 1.0) {
            return fail(format!("memory proportion {}", p.memory_proportion));
        }
        let mut out = vec![0.0; g * m * n];
        for gi in 0..g {
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0.0;
                    for kk in 0..k {
                        s += ta.data[(gi * m + i) * k + kk] * tb.data[(gi * k + kk) * n + j];
                    }
                    out[(gi * m + i) * n + j] = store(p.out_dtype, store(p.partials, s));
                }
            }
        }
        Ok(self.push(
            DevT {
                dtype: p.out_dtype,
                shape: vec![g, m, n],
                data: out,
                ipu: p.ipu,
            },
            Kind::MatMul,
            &p.name.clone(),
            vec![a, b],
            Detail::MatMul(p.clone()),
        ))
    }

    fn map(
        &mut self,
        expr: &[ExprInstr],
        inputs: &[TensorId],
        out_dtype: DeviceType,
        out_shape: &[usize],
        ipu: u32,
        name: &str,
    ) -> Result<TensorId> {
        let ops: Vec<DevT> = inputs
            .iter()
            .map(|&i| self.on_ipu(i, ipu, name).cloned())
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&DevT> = ops.iter().collect();
        let (vals, kind) = eval_postfix(expr, &refs, out_shape)?;
        if kind != kind_of(out_dtype) {
            return fail(format!(
                "map '{name}' computes a {kind} result but its output is {out_dtype}"
            ));
        }
        let data = vals.into_iter().map(|v| store(out_dtype, v)).collect();
        Ok(self.push(
            DevT {
                dtype: out_dtype,
                shape: out_shape.to_vec(),
                data,
                ipu,
            },
            Kind::Map,
            name,
            inputs.to_vec(),
            Detail::Map(expr.to_vec()),
        ))
    }

    fn reduce(
        &mut self,
        x: TensorId,
        axes: &[usize],
        op: ReduceOp,
        final_op: ReduceFinal,
        scale: f64,
        out_dtype: DeviceType,
        ipu: u32,
        name: &str,
    ) -> Result<TensorId> {
        let t = self.on_ipu(x, ipu, name)?.clone();
        let rank = t.shape.len();
        if axes.iter().any(|&a| a >= rank) || (1..axes.len()).any(|i| axes[..i].contains(&axes[i]))
        {
            return fail(format!("reduce axes {axes:?} of rank {rank}"));
        }
        let out_shape: Vec<usize> = t
            .shape
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .collect();
        let mut groups: Vec<Vec<f64>> = vec![Vec::new(); numel(&out_shape)];
        for (li, &v) in t.data.iter().enumerate() {
            let idx = unravel(li, &t.shape);
            let mut o = 0;
            for (ax, &d) in t.shape.iter().enumerate() {
                if !axes.contains(&ax) {
                    o = o * d + idx[ax];
                }
            }
            groups[o].push(v);
        }
        let data = groups
            .into_iter()
            .map(|g| {
                let r = match op {
                    ReduceOp::Sum => g.iter().sum::<f64>(),
                    ReduceOp::Max => g.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                    ReduceOp::Min => g.iter().cloned().fold(f64::INFINITY, f64::min),
                    ReduceOp::Prod => g.iter().product::<f64>(),
                    ReduceOp::SumSquare => g.iter().map(|v| v * v).sum::<f64>(),
                    ReduceOp::SumAbs => g.iter().map(|v| v.abs()).sum::<f64>(),
                    ReduceOp::MaxAbs => g.iter().map(|v| v.abs()).fold(0.0, f64::max),
                };
                let r = match final_op {
                    ReduceFinal::None => r,
                    ReduceFinal::Scale => r * scale,
                    ReduceFinal::Sqrt => r.sqrt(),
                    ReduceFinal::Log => r.ln(),
                    ReduceFinal::Float8Scale => {
                        panic!("the test backend computes no float8 scales")
                    }
                };
                store(out_dtype, r)
            })
            .collect();
        Ok(self.push(
            DevT {
                dtype: out_dtype,
                shape: out_shape,
                data,
                ipu,
            },
            Kind::Reduce,
            name,
            vec![x],
            Detail::Reduce { op, fin: final_op },
        ))
    }

    fn reshape(&mut self, x: TensorId, shape: &[usize]) -> Result<TensorId> {
        let t = self.get(x)?.clone();
        if numel(shape) != numel(&t.shape) {
            return fail(format!("reshape {:?} -> {shape:?}", t.shape));
        }
        Ok(self.push(
            DevT {
                shape: shape.to_vec(),
                ..t
            },
            Kind::Reshape,
            "",
            vec![x],
            Detail::None,
        ))
    }

    fn rearrange(
        &mut self,
        x: TensorId,
        offset: i64,
        shape: &[usize],
        strides: &[i64],
        ipu: u32,
        name: &str,
    ) -> Result<TensorId> {
        let t = self.on_ipu(x, ipu, name)?.clone();
        if strides.len() != shape.len() {
            return fail(format!(
                "rearrange with {} strides for shape {shape:?}",
                strides.len()
            ));
        }
        let mut data = Vec::with_capacity(numel(shape));
        for li in 0..numel(shape) {
            let idx = unravel(li, shape);
            let src: i64 = offset
                + idx
                    .iter()
                    .zip(strides)
                    .map(|(&i, &s)| i as i64 * s)
                    .sum::<i64>();
            if src < 0 || src as usize >= t.data.len() {
                return fail(format!(
                    "rearrange reads element {src} of a {}-element tensor",
                    t.data.len()
                ));
            }
            data.push(t.data[src as usize]);
        }
        Ok(self.push(
            DevT {
                dtype: t.dtype,
                shape: shape.to_vec(),
                data,
                ipu,
            },
            Kind::Rearrange,
            name,
            vec![x],
            Detail::None,
        ))
    }

    fn concat(&mut self, xs: &[TensorId], axis: usize, ipu: u32, name: &str) -> Result<TensorId> {
        let ts: Vec<DevT> = xs
            .iter()
            .map(|&i| self.on_ipu(i, ipu, name).cloned())
            .collect::<Result<Vec<_>>>()?;
        let Some(first) = ts.first() else {
            return fail("concat of nothing");
        };
        let rank = first.shape.len();
        if axis >= rank {
            return fail(format!("concat axis {axis} of rank {rank}"));
        }
        for t in &ts {
            let same_rest = t.shape.len() == rank
                && (0..rank).all(|i| i == axis || t.shape[i] == first.shape[i]);
            if !same_rest || t.dtype != first.dtype {
                return fail(format!(
                    "concat of {} {:?} and {} {:?}",
                    first.dtype, first.shape, t.dtype, t.shape
                ));
            }
        }
        let mut shape = first.shape.clone();
        shape[axis] = ts.iter().map(|t| t.shape[axis]).sum();
        let outer: usize = shape[..axis].iter().product();
        let inner: usize = shape[axis + 1..].iter().product();
        let mut data = Vec::with_capacity(numel(&shape));
        for o in 0..outer {
            for t in &ts {
                let blk = t.shape[axis] * inner;
                data.extend_from_slice(&t.data[o * blk..(o + 1) * blk]);
            }
        }
        let dtype = first.dtype;
        Ok(self.push(
            DevT {
                dtype,
                shape,
                data,
                ipu,
            },
            Kind::Concat,
            name,
            xs.to_vec(),
            Detail::None,
        ))
    }

    fn fill(
        &mut self,
        dtype: DeviceType,
        shape: &[usize],
        value: f64,
        ipu: u32,
        name: &str,
    ) -> Result<TensorId> {
        let data = vec![store(dtype, value); numel(shape)];
        Ok(self.push(
            DevT {
                dtype,
                shape: shape.to_vec(),
                data,
                ipu,
            },
            Kind::Fill,
            name,
            vec![],
            Detail::None,
        ))
    }

    fn mark_output(&mut self, x: TensorId, name: &str) -> Result<()> {
        let t = self.get(x)?.clone();
        self.outputs.push((name.to_string(), x));
        self.calls.push(Call {
            kind: Kind::Output,
            ipu: t.ipu,
            dtype: t.dtype,
            shape: t.shape,
            name: name.into(),
            args: vec![x],
            result: None,
            detail: Detail::None,
        });
        Ok(())
    }
}
