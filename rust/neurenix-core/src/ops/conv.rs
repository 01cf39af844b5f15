//! Conv (1-D and 2-D, groups incl. depthwise, strides, dilations, explicit
//! pads and auto_pad) and the window arithmetic it shares with pooling.

use crate::backend::ConvOptions;
use crate::dtype::DeviceType;
use crate::error::Result;
use crate::ir::Node;
use crate::lower::LowerCx;
use crate::tensor::HostTensor;

use super::{numel_f64, OpCx, Operator, Registry, TypeShape};

/// Spatial window of a convolution or pooling: per spatial dimension (1 or 2
/// of them), kernel, stride, dilation, pads at both ends, and output size.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pads_begin: Vec<usize>,
    pub pads_end: Vec<usize>,
    pub out: Vec<usize>,
}

impl Window {
    /// Reads kernel_shape (or `kernel` from the weights), strides, dilations,
    /// pads and auto_pad for `spatial` input sizes. `ceil_mode` applies to
    /// pooling only.
    pub fn from_node(
        cx: &OpCx,
        spatial: &[usize],
        kernel: Option<Vec<usize>>,
        ceil_mode: bool,
    ) -> Result<Window> {
        let n = spatial.len();
        if n == 0 || n > 2 {
            return Err(cx.unsupported_form(&format!(
                "{}-D windows (only 1-D and 2-D convolutions and pooling are implemented)",
                n
            )));
        }
        let node = cx.node;
        let positive = |name: &str, v: &[i64]| -> Result<Vec<usize>> {
            if v.len() != n || v.iter().any(|&x| x < 1) {
                return Err(cx.err(format!("{name} {v:?} must hold {n} positive values")));
            }
            cx.dims(v, name)
        };
        let attr_list = |name: &str, default: usize| -> Result<Vec<usize>> {
            match node.attr_ints(name)? {
                None => Ok(vec![default; n]),
                Some(v) => positive(name, &v),
            }
        };
        let kernel = match node.attr_ints("kernel_shape")? {
            Some(k) => positive("kernel_shape", &k)?,
            None => kernel.ok_or_else(|| cx.err("missing kernel_shape"))?,
        };
        if kernel.len() != n || kernel.contains(&0) {
            return Err(cx.err(format!(
                "the kernel {kernel:?} must hold {n} positive values"
            )));
        }
        let strides = attr_list("strides", 1)?;
        let dilations = attr_list("dilations", 1)?;
        let auto_pad = node.attr_s("auto_pad", "NOTSET")?;
        // The extent of a dilated kernel.
        let effective = |i: usize| -> Result<usize> {
            let span = cx.dim_mul(
                kernel[i] - 1,
                dilations[i],
                format_args!("the kernel of spatial axis {i} dilated"),
            )?;
            cx.dim_add(
                span,
                1,
                format_args!("the kernel of spatial axis {i} dilated"),
            )
        };
        let (mut pb, mut pe) = (vec![0usize; n], vec![0usize; n]);
        let mut out = vec![0usize; n];
        match auto_pad.as_str() {
            "NOTSET" => {
                if let Some(p) = node.attr_ints("pads")? {
                    if p.len() != 2 * n || p.iter().any(|&x| x < 0) {
                        return Err(cx.err(format!(
                            "pads {p:?} must hold {} non-negative values",
                            2 * n
                        )));
                    }
                    let p = cx.dims(&p, "pads")?;
                    pb.copy_from_slice(&p[..n]);
                    pe.copy_from_slice(&p[n..]);
                }
                for i in 0..n {
                    let eff = effective(i)?;
                    let total =
                        cx.dim_add(spatial[i], pb[i], format_args!("spatial axis {i} padded"))?;
                    let total =
                        cx.dim_add(total, pe[i], format_args!("spatial axis {i} padded"))?;
                    if total < eff {
                        return Err(cx.err(format!(
                            "the kernel ({} with dilation {}) is larger than the padded input ({})",
                            kernel[i], dilations[i], total
                        )));
                    }
                    let span = total - eff;
                    let windows = if ceil_mode {
                        span.div_ceil(strides[i])
                    } else {
                        span / strides[i]
                    };
                    out[i] =
                        cx.dim_add(windows, 1, format_args!("the windows of spatial axis {i}"))?;
                    // A window may not start inside the end padding.
                    if ceil_mode
                        && windows.saturating_mul(strides[i]) >= spatial[i].saturating_add(pb[i])
                    {
                        out[i] -= 1;
                    }
                }
            }
            "VALID" => {
                for i in 0..n {
                    let eff = effective(i)?;
                    if spatial[i] < eff {
                        return Err(cx.err("the kernel is larger than the input (auto_pad VALID)"));
                    }
                    out[i] = (spatial[i] - eff) / strides[i] + 1;
                }
            }
            "SAME_UPPER" | "SAME_LOWER" => {
                for i in 0..n {
                    let eff = effective(i)?;
                    out[i] = spatial[i].div_ceil(strides[i]);
                    // The last window starts below the input's end.
                    let last = out[i].saturating_sub(1) * strides[i];
                    let reach =
                        cx.dim_add(last, eff, format_args!("the window of spatial axis {i}"))?;
                    let total = reach.saturating_sub(spatial[i]);
                    let small = total / 2;
                    if auto_pad == "SAME_UPPER" {
                        pb[i] = small;
                        pe[i] = total - small;
                    } else {
                        pb[i] = total - small;
                        pe[i] = small;
                    }
                }
            }
            other => return Err(cx.err(format!("unknown auto_pad '{other}'"))),
        }
        Ok(Window {
            kernel,
            strides,
            dilations,
            pads_begin: pb,
            pads_end: pe,
            out,
        })
    }

    /// As 2-D (height, width) arrays, in the 32 bits the device's planners
    /// take; 1-D windows get a unit height. A larger value is an error.
    pub fn hw(&self, cx: &OpCx) -> Result<Hw> {
        let two = |v: &[usize], one: u32, what: &str| -> Result<[u32; 2]> {
            let u = |x: usize| {
                u32::try_from(x).map_err(|_| {
                    cx.err(format!(
                        "{what} {v:?}: {x} is beyond the 32-bit window sizes the IPU's planners take"
                    ))
                })
            };
            match v {
                [w] => Ok([one, u(*w)?]),
                [h, w] => Ok([u(*h)?, u(*w)?]),
                _ => Err(cx.err(format!("{what} {v:?} must hold 1 or 2 values"))),
            }
        };
        let pb = two(&self.pads_begin, 0, "pads")?;
        let pe = two(&self.pads_end, 0, "pads")?;
        Ok(Hw {
            kernel: two(&self.kernel, 1, "kernel")?,
            strides: two(&self.strides, 1, "strides")?,
            dilations: two(&self.dilations, 1, "dilations")?,
            pads: [pb[0], pb[1], pe[0], pe[1]],
            out: two(&self.out, 1, "the output size")?,
        })
    }
}

/// A window in the device's terms: (height, width) pairs, pads as
/// [top, left, bottom, right].
pub struct Hw {
    pub kernel: [u32; 2],
    pub strides: [u32; 2],
    pub dilations: [u32; 2],
    pub pads: [u32; 4],
    pub out: [u32; 2],
}

/// Shape with a unit height inserted for 1-D layouts ([N, C, L] -> [N, C, 1, L]).
pub fn as_2d(shape: &[usize]) -> Vec<usize> {
    if shape.len() == 3 {
        vec![shape[0], shape[1], 1, shape[2]]
    } else {
        shape.to_vec()
    }
}

struct Conv;

impl Conv {
    fn check(cx: &OpCx) -> Result<(Window, usize, Vec<usize>)> {
        let x = cx.in_shape(0)?;
        let w = cx.in_shape(1)?;
        let t = cx.same_dtype(&[0, 1, 2])?;
        if !t.is_float() {
            return Err(cx.unsupported_form(&format!(
                "Conv on {t}: only float convolutions run on the IPU"
            )));
        }
        if x.len() < 3 || w.len() != x.len() {
            return Err(cx.err(format!(
                "input {x:?} and weights {w:?} must have the same rank (3 or 4)"
            )));
        }
        let group = cx.node.attr_i("group", 1)?;
        if group < 1 {
            return Err(cx.err(format!("group must be positive, got {group}")));
        }
        let group = cx.to_dim(group, "group")?;
        if x[1] % group != 0 || w[0] % group != 0 || w[1].checked_mul(group) != Some(x[1]) {
            return Err(cx.err(format!(
                "input channels {} and weights {w:?} do not fit {group} groups",
                x[1]
            )));
        }
        if cx.has_input(2) {
            let b = cx.in_shape(2)?;
            if b != [w[0]] {
                return Err(cx.err(format!("bias {b:?} must be [{}]", w[0])));
            }
        }
        let win = Window::from_node(cx, &x[2..], Some(w[2..].to_vec()), false)?;
        if win.kernel != w[2..] {
            return Err(cx.err(format!(
                "kernel_shape {:?} disagrees with the weights {w:?}",
                win.kernel
            )));
        }
        let mut out = vec![x[0], w[0]];
        out.extend(&win.out);
        Ok((win, group, out))
    }
}

impl Operator for Conv {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let (_, _, out) = Conv::check(cx)?;
        Ok(vec![TypeShape::new(cx.in_dtype(0)?, out)])
    }

    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let (win, group, out) = Conv::check(&opcx)?;
        let hw = win.hw(&opcx)?;
        let groups = u32::try_from(group).map_err(|_| {
            opcx.err(format!(
                "{group} groups are beyond the 32 bits the IPU takes"
            ))
        })?;
        let ft = cx.float_type();
        let (vx, vw) = (opcx.input(0)?, opcx.input(1)?);
        let x = cx.tensor_as(vx, ft)?;
        let x = cx.reshape(&x, &as_2d(&x.shape))?;
        let w = match cx.constant(vw) {
            Some(c) if c.shape().len() == 3 => {
                let reshape = |c: &HostTensor| -> HostTensor {
                    c.reshape(&as_2d(c.shape()))
                        .expect("a 1-D convolution's weights reshape to 2-D")
                };
                cx.product_operand(vw, ft, Some(("[2d]", &reshape)))?
            }
            _ => {
                let w = cx.product_operand(vw, ft, None)?;
                cx.reshape(&w, &as_2d(&w.shape))?
            }
        };
        let bias = match node.input(2) {
            Some(b) => Some(cx.tensor_as(b, ft)?),
            None => None,
        };
        let p = ConvOptions {
            groups,
            kernel: hw.kernel,
            strides: hw.strides,
            dilations: hw.dilations,
            pads: hw.pads,
            memory_proportion: 0.0,
            partials: DeviceType::F32,
            out_dtype: ft,
            ipu: 0,
            name: String::new(),
            scales: None,
        };
        let out4 = vec![out[0], out[1], hw.out[0] as usize, hw.out[1] as usize];
        let y = cx.conv(&x, &w, bias.as_ref(), p, &out4)?;
        let y = cx.reshape(&y, &out)?;
        cx.set(node.outputs[0], y);
        Ok(())
    }

    fn flops(&self, cx: &OpCx) -> f64 {
        match (Conv::check(cx), cx.in_shape(1)) {
            (Ok((_, _, out)), Ok(w)) => 2.0 * numel_f64(&out) * numel_f64(&w[1..]),
            _ => 0.0,
        }
    }
}

pub fn register(r: &mut Registry) {
    r.insert("Conv", Box::new(Conv));
}
