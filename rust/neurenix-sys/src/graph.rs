//! `GraphBuilder`: the simulator's graph library as the core's [`Backend`].

use cxx::UniquePtr;
use neurenix_core::backend::{
    Backend, ConvOptions, DeviceExecutable, MatMulOptions, PoolMode, PoolOptions, ReduceFinal,
    ReduceOp, TensorId,
};
use neurenix_core::dtype::DeviceType;
use neurenix_core::error::{Error, Result, TileOverflow};
use neurenix_core::expr::ExprInstr;
use neurenix_core::report::SystemInfo;

use crate::bridge::{ffi, ExprOpCode};
use crate::error::from_cxx;
use crate::executable::Executable;

pub(crate) fn device_type(t: DeviceType) -> ffi::DeviceType {
    match t {
        DeviceType::F32 => ffi::DeviceType::kFloat32,
        DeviceType::F16 => ffi::DeviceType::kFloat16,
        DeviceType::I32 => ffi::DeviceType::kInt32,
        DeviceType::Bool => ffi::DeviceType::kBool,
        DeviceType::F8E4M3FNUZ => ffi::DeviceType::kFloat8E4M3FNUZ,
        DeviceType::F8E5M2FNUZ => ffi::DeviceType::kFloat8E5M2FNUZ,
    }
}

pub(crate) fn from_device_type(t: ffi::DeviceType) -> DeviceType {
    match t {
        ffi::DeviceType::kFloat32 => DeviceType::F32,
        ffi::DeviceType::kFloat16 => DeviceType::F16,
        ffi::DeviceType::kInt32 => DeviceType::I32,
        ffi::DeviceType::kFloat8E4M3FNUZ => DeviceType::F8E4M3FNUZ,
        ffi::DeviceType::kFloat8E5M2FNUZ => DeviceType::F8E5M2FNUZ,
        _ => DeviceType::Bool,
    }
}

fn reduce_op(op: ReduceOp) -> ffi::ReduceOp {
    match op {
        ReduceOp::Sum => ffi::ReduceOp::kSum,
        ReduceOp::Max => ffi::ReduceOp::kMax,
        ReduceOp::Min => ffi::ReduceOp::kMin,
        ReduceOp::Prod => ffi::ReduceOp::kProd,
        ReduceOp::SumSquare => ffi::ReduceOp::kSumSquare,
        ReduceOp::SumAbs => ffi::ReduceOp::kSumAbs,
        ReduceOp::MaxAbs => ffi::ReduceOp::kMaxAbs,
    }
}

fn reduce_final(f: ReduceFinal) -> ffi::ReduceFinal {
    match f {
        ReduceFinal::None => ffi::ReduceFinal::kNone,
        ReduceFinal::Scale => ffi::ReduceFinal::kScale,
        ReduceFinal::Sqrt => ffi::ReduceFinal::kSqrt,
        ReduceFinal::Log => ffi::ReduceFinal::kLog,
        ReduceFinal::Float8Scale => ffi::ReduceFinal::kFloat8Scale,
    }
}

fn pool_mode(m: PoolMode) -> ffi::PoolMode {
    match m {
        PoolMode::Max => ffi::PoolMode::kMax,
        PoolMode::Average => ffi::PoolMode::kAverage,
        PoolMode::AverageIncludePad => ffi::PoolMode::kAverageIncludePad,
    }
}

fn window(kernel: [u32; 2], strides: [u32; 2], dilations: [u32; 2], pads: [u32; 4]) -> ffi::Window {
    ffi::Window {
        kh: kernel[0],
        kw: kernel[1],
        sh: strides[0],
        sw: strides[1],
        dh: dilations[0],
        dw: dilations[1],
        pad_top: pads[0],
        pad_left: pads[1],
        pad_bottom: pads[2],
        pad_right: pads[3],
    }
}

fn shape64(shape: &[usize]) -> Vec<u64> {
    shape.iter().map(|&d| d as u64).collect()
}

/// A graph under construction for some IPUs of a simulated system.
pub struct GraphBuilder {
    builder: UniquePtr<ffi::GraphBuilder>,
    system: SystemInfo,
}

impl GraphBuilder {
    /// A graph for `num_ipus` IPUs of the system `spec` describes.
    pub fn new(spec: &str, num_ipus: u32) -> Result<GraphBuilder> {
        let system = crate::describe_system(spec)?;
        Ok(GraphBuilder {
            builder: ffi::new_graph(spec, num_ipus).map_err(from_cxx)?,
            system,
        })
    }

    fn b(&mut self) -> std::pin::Pin<&mut ffi::GraphBuilder> {
        self.builder.pin_mut()
    }
}

impl Backend for GraphBuilder {
    fn begin_node(&mut self, node: &str) {
        self.b().begin_node(node);
    }
    fn add_input(
        &mut self,
        name: &str,
        dtype: DeviceType,
        shape: &[usize],
        ipu: u32,
    ) -> Result<TensorId> {
        self.b()
            .add_input(name, device_type(dtype), &shape64(shape), ipu)
            .map_err(from_cxx)
    }
    fn add_constant(
        &mut self,
        name: &str,
        dtype: DeviceType,
        shape: &[usize],
        data: Vec<u8>,
        ipu: u32,
    ) -> Result<TensorId> {
        self.b()
            .add_constant(name, device_type(dtype), &shape64(shape), data, ipu)
            .map_err(from_cxx)
    }
    fn matmul(&mut self, a: TensorId, b: TensorId, p: &MatMulOptions) -> Result<TensorId> {
        let options = ffi::MatMulOptions {
            memory_proportion: p.memory_proportion,
            partials: device_type(p.partials),
            out_dtype: device_type(p.out_dtype),
            ipu: p.ipu,
            name: p.name.clone(),
            scales: p.scales.map_or_else(Vec::new, |s| s.to_vec()),
        };
        self.b().matmul(a, b, &options).map_err(from_cxx)
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
        let e: Vec<ffi::ExprInstr> = expr
            .iter()
            .map(|i| ffi::ExprInstr {
                op: ExprOpCode(i.op),
                arg: i.arg,
                imm: i.imm,
                imm2: i.imm2,
                half: i.half,
            })
            .collect();
        self.b()
            .map(
                &e,
                inputs,
                device_type(out_dtype),
                &shape64(out_shape),
                ipu,
                name,
            )
            .map_err(from_cxx)
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
        let axes: Vec<u32> = axes.iter().map(|&a| a as u32).collect();
        self.b()
            .reduce(
                x,
                &axes,
                reduce_op(op),
                reduce_final(final_op),
                scale,
                device_type(out_dtype),
                ipu,
                name,
            )
            .map_err(from_cxx)
    }
    fn reshape(&mut self, x: TensorId, shape: &[usize]) -> Result<TensorId> {
        self.b().reshape(x, &shape64(shape)).map_err(from_cxx)
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
        self.b()
            .rearrange(x, offset, &shape64(shape), strides, ipu, name)
            .map_err(from_cxx)
    }
    fn concat(&mut self, xs: &[TensorId], axis: usize, ipu: u32, name: &str) -> Result<TensorId> {
        self.b()
            .concat(xs, axis as u32, ipu, name)
            .map_err(from_cxx)
    }
    fn fill(
        &mut self,
        dtype: DeviceType,
        shape: &[usize],
        value: f64,
        ipu: u32,
        name: &str,
    ) -> Result<TensorId> {
        self.b()
            .fill(device_type(dtype), &shape64(shape), value, ipu, name)
            .map_err(from_cxx)
    }
    fn mark_output(&mut self, x: TensorId, name: &str) -> Result<()> {
        self.b().mark_output(x, name).map_err(from_cxx)
    }
    fn conv(
        &mut self,
        x: TensorId,
        w: TensorId,
        bias: Option<TensorId>,
        p: &ConvOptions,
    ) -> Result<TensorId> {
        let options = ffi::ConvOptions {
            groups: p.groups,
            window: window(p.kernel, p.strides, p.dilations, p.pads),
            memory_proportion: p.memory_proportion,
            partials: device_type(p.partials),
            out_dtype: device_type(p.out_dtype),
            ipu: p.ipu,
            name: p.name.clone(),
            scales: p.scales.map_or_else(Vec::new, |s| s.to_vec()),
        };
        let bias: Vec<u32> = bias.into_iter().collect();
        self.b().conv(x, w, &bias, &options).map_err(from_cxx)
    }
    fn pool(&mut self, x: TensorId, p: &PoolOptions) -> Result<TensorId> {
        let options = ffi::PoolOptions {
            mode: pool_mode(p.mode),
            window: window(p.kernel, p.strides, p.dilations, p.pads),
            out_h: p.out_hw[0],
            out_w: p.out_hw[1],
            ipu: p.ipu,
            name: p.name.clone(),
        };
        self.b().pool(x, &options).map_err(from_cxx)
    }
    fn gather_rows(
        &mut self,
        table: TensorId,
        indices: TensorId,
        ipu: u32,
        name: &str,
    ) -> Result<TensorId> {
        self.b()
            .gather_rows(table, indices, ipu, name)
            .map_err(from_cxx)
    }
    fn assign(&mut self, dst: TensorId, src: TensorId, name: &str) -> Result<()> {
        self.b().assign(dst, src, name).map_err(from_cxx)
    }
    fn spread(&mut self, x: TensorId) -> Result<()> {
        self.b().spread(x).map_err(from_cxx)
    }
    fn place_like(&mut self, x: TensorId, like: TensorId) -> Result<()> {
        self.b().place_like(x, like).map_err(from_cxx)
    }
    fn begin_segment(&mut self) -> Result<()> {
        self.b().begin_segment().map_err(from_cxx)
    }
    fn ipu_memory_bytes(&self) -> u64 {
        u64::from(self.system.tiles_per_ipu).saturating_mul(self.system.bytes_per_tile)
    }
    fn system(&self) -> Option<SystemInfo> {
        Some(self.system.clone())
    }
    /// Tiles that overflow are an `Error::OutOfMemory` naming each of them.
    fn compile(mut self: Box<Self>) -> Result<Box<dyn DeviceExecutable>> {
        let exe = self.b().compile().map_err(from_cxx)?;
        if !exe.fits() {
            let tiles: Vec<TileOverflow> = exe
                .overflows()
                .into_iter()
                .map(|o| TileOverflow {
                    ipu: o.ipu,
                    tile: o.tile,
                    used: o.used,
                    capacity: o.capacity,
                    largest: o
                        .largest
                        .into_iter()
                        .map(|c| neurenix_core::report::TileTensor {
                            name: c.name,
                            node: c.node,
                            bytes: c.bytes,
                        })
                        .collect(),
                })
                .collect();
            // The compiler adds what would fit (it knows the model).
            return Err(Error::out_of_memory(tiles, ""));
        }
        Ok(Box::new(Executable::new(exe)))
    }
}
