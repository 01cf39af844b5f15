//! Conv (1-D and 2-D, groups incl. depthwise, strides, dilations, explicit
//! pads and auto_pad) and the window arithmetic it shares with pooling.

use crate::backend::ConvOptions;
use crate::dtype::DeviceType;
use crate::error::Result;
use crate::ir::Node;
use crate::lower::LowerCx;
use crate::tensor::HostTensor;

use super::{OpCx, Operator, Registry, TypeShape};

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
        let attr_list = |name: &str, default: usize| -> Result<Vec<usize>> {
            match node.attr_ints(name)? {
                None => Ok(vec![default; n]),
                Some(v) if v.len() == n && v.iter().all(|&x| x >= 1) => {
                    Ok(v.iter().map(|&x| x as usize).collect())
                }
                Some(v) => Err(cx.err(format!("{name} {v:?} must hold {n} positive values"))),
            }
        };
        let kernel = match node.attr_ints("kernel_shape")? {
            Some(k) => {
                if k.len() != n || k.iter().any(|&x| x < 1) {
                    return Err(cx.err(format!("kernel_shape {k:?} must hold {n} positive values")));
                }
                k.iter().map(|&x| x as usize).collect()
            }
            None => kernel.ok_or_else(|| cx.err("missing kernel_shape"))?,
        };
        let strides = attr_list("strides", 1)?;
        let dilations = attr_list("dilations", 1)?;
        let auto_pad = node.attr_s("auto_pad", "NOTSET")?;
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
                    for i in 0..n {
                        pb[i] = p[i] as usize;
                        pe[i] = p[n + i] as usize;
                    }
                }
                for i in 0..n {
                    let eff = (kernel[i] - 1) * dilations[i] + 1;
                    let total = spatial[i] + pb[i] + pe[i];
                    if total < eff {
                        return Err(cx.err(format!(
                            "the kernel ({} with dilation {}) is larger than the padded input ({})",
                            kernel[i], dilations[i], total
                        )));
                    }
                    let span = total - eff;
                    out[i] = if ceil_mode {
                        span.div_ceil(strides[i]) + 1
                    } else {
                        span / strides[i] + 1
                    };
                    // A window may not start inside the end padding.
                    if ceil_mode && (out[i] - 1) * strides[i] >= spatial[i] + pb[i] {
                        out[i] -= 1;
                    }
                }
            }
            "VALID" => {
                for i in 0..n {
                    let eff = (kernel[i] - 1) * dilations[i] + 1;
                    if spatial[i] < eff {
                        return Err(cx.err("the kernel is larger than the input (auto_pad VALID)"));
                    }
                    out[i] = (spatial[i] - eff) / strides[i] + 1;
                }
            }
            "SAME_UPPER" | "SAME_LOWER" => {
                for i in 0..n {
                    let eff = (kernel[i] - 1) * dilations[i] + 1;
                    out[i] = spatial[i].div_ceil(strides[i]);
                    let total = ((out[i] - 1) * strides[i] + eff).saturating_sub(spatial[i]);
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

    /// As 2-D (height, width) arrays; 1-D windows get a unit height.
    pub fn hw(&self) -> ([u32; 2], [u32; 2], [u32; 2], [u32; 4], [u32; 2]) {
        let two = |v: &[usize], one: usize| -> [u32; 2] {
            if v.len() == 1 {
                [one as u32, v[0] as u32]
            } else {
                [v[0] as u32, v[1] as u32]
            }
        };
        let pb = two(&self.pads_begin, 0);
        let pe = two(&self.pads_end, 0);
        (
            two(&self.kernel, 1),
            two(&self.strides, 1),
            two(&self.dilations, 1),
            [pb[0], pb[1], pe[0], pe[1]],
            two(&self.out, 1),
        )
    }
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
        let group = group as usize;
        if x[1] % group != 0 || w[0] % group != 0 || w[1] * group != x[1] {
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
        let ft = cx.float_type();
        let (vx, vw) = (node.input(0).unwrap(), node.input(1).unwrap());
        let x = cx.tensor_as(vx, ft)?;
        let x = cx.reshape(&x, &as_2d(&x.shape))?;
        let w = match cx.constant(vw) {
            Some(c) if c.shape().len() == 3 => {
                let c2: HostTensor = c.reshape(&as_2d(c.shape()))?;
                let name = cx.graph.value(vw).name.clone();
                cx.host_constant(&c2, ft, &name)?
            }
            _ => {
                let w = cx.tensor_as(vw, ft)?;
                cx.reshape(&w, &as_2d(&w.shape))?
            }
        };
        let bias = match node.input(2) {
            Some(b) => Some(cx.tensor_as(b, ft)?),
            None => None,
        };
        let (kernel, strides, dilations, pads, out_hw) = win.hw();
        let p = ConvOptions {
            groups: group as u32,
            kernel,
            strides,
            dilations,
            pads,
            memory_proportion: 0.0,
            partials: DeviceType::F32,
            out_dtype: ft,
            ipu: 0,
            name: String::new(),
        };
        let out4 = vec![out[0], out[1], out_hw[0] as usize, out_hw[1] as usize];
        let y = cx.conv(&x, &w, bias.as_ref(), p, &out4)?;
        let y = cx.reshape(&y, &out)?;
        cx.set(node.outputs[0], y);
        Ok(())
    }

    fn flops(&self, cx: &OpCx) -> f64 {
        match (Conv::check(cx), cx.in_shape(1)) {
            (Ok((_, _, out)), Ok(w)) => {
                2.0 * out.iter().product::<usize>() as f64 * w[1..].iter().product::<usize>() as f64
            }
            _ => 0.0,
        }
    }
}

pub fn register(r: &mut Registry) {
    r.insert("Conv", Box::new(Conv));
}
