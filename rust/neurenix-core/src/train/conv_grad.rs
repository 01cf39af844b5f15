//! Gradient rules of the convolutional operators: Conv (groups, strides,
//! pads, dilations), non-overlapping MaxPool and AveragePool,
//! GlobalAveragePool and Concat, each built from forward operators (Conv,
//! Pad, Slice, Reshape, Expand, Transpose, ...).

use crate::dtype::ElemType;
use crate::error::Result;
use crate::ir::{Node, ValueId};

use super::autodiff::no_gradient;
use super::build::Builder;

/// The 2-D window attributes of a Conv or pooling node; `None` when the
/// node's form has no gradient here (auto_pad, not 2-D).
struct Window {
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    /// top, left, bottom, right
    pads: [usize; 4],
}

fn window(b: &Builder, node: &Node, x: ValueId, kernel: Option<[usize; 2]>) -> Result<Window> {
    let opset = b.opset();
    let xs = b.shape(x)?;
    if xs.len() != 4 {
        return Err(no_gradient(node, opset, "only 2-D windows (NCHW)"));
    }
    let auto = node.attr_s("auto_pad", "NOTSET")?;
    if auto != "NOTSET" && auto != "VALID" {
        return Err(no_gradient(node, opset, "auto_pad"));
    }
    let two = |name: &str, default: usize| -> Result<[usize; 2]> {
        Ok(match node.attr_ints(name)? {
            Some(v) if v.len() == 2 => [v[0] as usize, v[1] as usize],
            Some(_) => return Err(no_gradient(node, opset, "only 2-D windows")),
            None => [default, default],
        })
    };
    let kernel = match kernel {
        Some(k) => k,
        None => two("kernel_shape", 1)?,
    };
    let pads = match node.attr_ints("pads")? {
        Some(p) if p.len() == 4 => [p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize],
        Some(_) => return Err(no_gradient(node, opset, "only 2-D windows")),
        None => [0; 4],
    };
    Ok(Window {
        kernel,
        strides: two("strides", 1)?,
        dilations: two("dilations", 1)?,
        pads,
    })
}

/// Conv: dX as a convolution of the zero-dilated, padded dY with the
/// spatially flipped, channel-transposed weights; dW as a convolution of
/// the padded X (channels as batch) with dY (batch as channels), stride
/// and dilation exchanged, per group; dB the sum of dY.
pub fn conv(
    b: &mut Builder,
    node: &Node,
    dy: ValueId,
    want: &dyn Fn(usize) -> bool,
) -> Result<Vec<Option<ValueId>>> {
    let x = node.input(0).expect("Conv has an input");
    let w = node.input(1).expect("Conv has weights");
    let ws = b.shape(w)?;
    if ws.len() != 4 {
        return Err(no_gradient(node, b.opset(), "only 2-D convolutions (NCHW)"));
    }
    if b.opset() < 10 && want(0) {
        return Err(no_gradient(
            node,
            b.opset(),
            "by the input before opset 10 (no Slice with steps)",
        ));
    }
    let win = window(b, node, x, Some([ws[2], ws[3]]))?;
    let xs = b.shape(x)?;
    let ys = b.shape(dy)?;
    let g = node.attr_i("group", 1)? as usize;
    let (n, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (co, cg) = (ws[0], ws[1]);
    let cog = co / g;
    let (ho, wo) = (ys[2], ys[3]);
    let [kh, kw] = win.kernel;
    let [sh, sw] = win.strides;
    let [dh, dw] = win.dilations;
    let [pt, pl, pb, pr] = win.pads;
    let mut out = vec![None; node.inputs.len()];
    if want(0) {
        // dY dilated by the strides: zeros between the rows and columns.
        let mut d = dy;
        if sh > 1 || sw > 1 {
            let r = b.reshape(dy, &[n, co, ho, 1, wo, 1])?;
            let p = b.pad(
                r,
                &[0, 0, 0, 0, 0, 0, 0, 0, 0, sh as i64 - 1, 0, sw as i64 - 1],
            )?;
            let r = b.reshape(p, &[n, co, ho * sh, wo * sw])?;
            d = b.slice(
                r,
                &[0, 0],
                &[((ho - 1) * sh + 1) as i64, ((wo - 1) * sw + 1) as i64],
                &[2, 3],
                &[1, 1],
            )?;
        }
        // Padded so that a correlation with the flipped kernel yields H x W.
        let len_h = ((ho - 1) * sh + 1) as i64;
        let len_w = ((wo - 1) * sw + 1) as i64;
        let top = ((kh - 1) * dh) as i64 - pt as i64;
        let left = ((kw - 1) * dw) as i64 - pl as i64;
        let bottom = h as i64 + ((kh - 1) * dh) as i64 - top - len_h;
        let right = wd as i64 + ((kw - 1) * dw) as i64 - left - len_w;
        let d = b.pad(d, &[0, 0, top, left, 0, 0, bottom, right])?;
        // Weights [Co, C/G, kh, kw] -> [C, Co/G, kh, kw], flipped.
        let r = b.reshape(w, &[g, cog, cg, kh, kw])?;
        let t = b.transpose(r, &[0, 2, 1, 3, 4])?;
        let t = b.reshape(t, &[c, cog, kh, kw])?;
        let f = b.slice(t, &[-1, -1], &[i64::MIN, i64::MIN], &[2, 3], &[-1, -1])?;
        out[0] = Some(b.conv(d, f, [1, 1], [dh, dw], [0; 4], g)?);
    }
    if want(1) {
        let xp = b.pad(x, &[0, 0, pt as i64, pl as i64, 0, 0, pb as i64, pr as i64])?;
        let mut parts = Vec::with_capacity(g);
        for gi in 0..g {
            let xg = if g == 1 {
                xp
            } else {
                b.slice(
                    xp,
                    &[(gi * cg) as i64],
                    &[((gi + 1) * cg) as i64],
                    &[1],
                    &[1],
                )?
            };
            let dg = if g == 1 {
                dy
            } else {
                b.slice(
                    dy,
                    &[(gi * cog) as i64],
                    &[((gi + 1) * cog) as i64],
                    &[1],
                    &[1],
                )?
            };
            let xt = b.transpose(xg, &[1, 0, 2, 3])?; // [C/G, N, Hp, Wp]
            let dt = b.transpose(dg, &[1, 0, 2, 3])?; // [Co/G, N, Ho, Wo]
            let r = b.conv(xt, dt, [dh, dw], [sh, sw], [0; 4], 1)?; // [C/G, Co/G, A, B]
            let r = b.slice(r, &[0, 0], &[kh as i64, kw as i64], &[2, 3], &[1, 1])?;
            parts.push(b.transpose(r, &[1, 0, 2, 3])?);
        }
        out[1] = Some(b.concat(&parts, 0)?);
    }
    if want(2) {
        let s = b.reduce("ReduceSum", dy, &[0, 2, 3], false)?;
        out[2] = Some(s);
    }
    Ok(out)
}

/// `t` [N, C, Ho, Wo] with every element repeated over a kh x kw block.
fn upsample(b: &mut Builder, t: ValueId, kh: usize, kw: usize) -> Result<ValueId> {
    let s = b.shape(t)?;
    let r = b.reshape(t, &[s[0], s[1], s[2], 1, s[3], 1])?;
    let e = b.expand(r, &[s[0], s[1], s[2], kh, s[3], kw])?;
    b.reshape(e, &[s[0], s[1], s[2] * kh, s[3] * kw])
}

/// MaxPool and AveragePool whose windows tile the input (kernel = strides,
/// no pads, no dilation): dX is dY spread back over each window (divided by
/// its size for the average; to the window's maxima for the max, every one
/// of them when several tie).
pub fn pool(b: &mut Builder, node: &Node, dy: ValueId, y: ValueId) -> Result<Vec<Option<ValueId>>> {
    let opset = b.opset();
    let x = node.input(0).expect("a pool has an input");
    let win = window(b, node, x, None)?;
    if node.attr_i("ceil_mode", 0)? != 0 {
        return Err(no_gradient(node, opset, "ceil_mode"));
    }
    if win.kernel != win.strides || win.pads != [0; 4] || win.dilations != [1, 1] {
        if node.outputs.len() > 1 {
            return Err(no_gradient(node, opset, "MaxPool's indices output"));
        }
        return pool_windows(b, node, dy, y, &win);
    }
    if node.outputs.len() > 1 {
        return Err(no_gradient(node, opset, "MaxPool's indices output"));
    }
    let xs = b.shape(x)?;
    let ys = b.shape(y)?;
    let [kh, kw] = win.kernel;
    let (hc, wc) = (ys[2] * kh, ys[3] * kw);
    let up = upsample(b, dy, kh, kw)?;
    let t = b.dtype(x)?;
    let dxc = if node.op_type == "MaxPool" {
        let xc = b.slice(x, &[0, 0], &[hc as i64, wc as i64], &[2, 3], &[1, 1])?;
        let yu = upsample(b, y, kh, kw)?;
        let eq = b.node(
            "Equal",
            &[xc, yu],
            vec![],
            ElemType::Bool,
            &[xs[0], xs[1], hc, wc],
        );
        let zero = b.constant(0.0, t, &[]);
        b.node("Where", &[eq, up, zero], vec![], t, &[xs[0], xs[1], hc, wc])
    } else {
        b.scale(up, 1.0 / (kh * kw) as f64)?
    };
    // Rows and columns past the last whole window get no gradient.
    let dx = b.pad(
        dxc,
        &[0, 0, 0, 0, 0, 0, (xs[2] - hc) as i64, (xs[3] - wc) as i64],
    )?;
    Ok(vec![Some(dx)])
}

/// Pooling with any windows (overlapping, padded, dilated): the gradient
/// of every window tap, spread back where the tap reads the input and
/// summed. MaxPool's goes to the inputs equal to their window's maximum
/// (padding compares as the lowest float; tied maxima all receive it);
/// AveragePool's is divided by each window's count (with or without the
/// padding, `count_include_pad`).
fn pool_windows(
    b: &mut Builder,
    node: &Node,
    dy: ValueId,
    y: ValueId,
    win: &Window,
) -> Result<Vec<Option<ValueId>>> {
    let x = node.input(0).expect("a pool has an input");
    let xs = b.shape(x)?;
    let ys = b.shape(y)?;
    let t = b.dtype(x)?;
    let (n, c, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    let (ho, wo) = (ys[2], ys[3]);
    let [kh, kw] = win.kernel;
    let [sh, sw] = win.strides;
    let [dh, dw] = win.dilations;
    let [pt, pl, pb, pr] = win.pads;
    let (hp, wp) = (h + pt + pb, w + pl + pr);
    let max = node.op_type == "MaxPool";
    let pads = [0, 0, pt as i64, pl as i64, 0, 0, pb as i64, pr as i64];
    let xp = if max {
        b.pad_with(x, &pads, f64::from(f32::MIN))?
    } else {
        x
    };
    let zero = b.constant(0.0, t, &[]);
    let (len_h, len_w) = ((ho - 1) * sh + 1, (wo - 1) * sw + 1);
    // AveragePool's divisor per output position.
    let per_window = if max {
        None
    } else {
        let include = node.attr_i("count_include_pad", 0)? != 0;
        let count = |o: usize, k: usize, s: usize, d: usize, p: usize, len: usize| -> usize {
            (0..k)
                .filter(|&a| {
                    let i = (o * s + a * d) as i64 - p as i64;
                    include || (i >= 0 && i < len as i64)
                })
                .count()
        };
        let cnt = b.value("window_counts", t, &[1, 1, ho, wo]);
        let arr = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[1, 1, ho, wo]), |i| {
            1.0 / (count(i[2], kh, sh, dh, pt, h) * count(i[3], kw, sw, dw, pl, w)).max(1) as f64
        });
        b.m.graph
            .set_constant(cnt, crate::tensor::HostTensor::float(t, arr));
        Some(b.mul(dy, cnt)?)
    };
    let mut acc: Option<ValueId> = None;
    for a in 0..kh {
        for bb in 0..kw {
            let (r0, c0) = ((a * dh) as i64, (bb * dw) as i64);
            let part = if max {
                let tap = b.slice(
                    xp,
                    &[r0, c0],
                    &[r0 + len_h as i64, c0 + len_w as i64],
                    &[2, 3],
                    &[sh as i64, sw as i64],
                )?;
                let eq = b.node("Equal", &[tap, y], vec![], ElemType::Bool, &ys);
                b.node("Where", &[eq, dy, zero], vec![], t, &ys)
            } else {
                per_window.expect("an average pool's divisor")
            };
            // Back where the tap reads: dilated by the strides, shifted by the tap.
            let mut d = part;
            if sh > 1 || sw > 1 {
                let r = b.reshape(part, &[n, c, ho, 1, wo, 1])?;
                let p = b.pad(
                    r,
                    &[0, 0, 0, 0, 0, 0, 0, 0, 0, sh as i64 - 1, 0, sw as i64 - 1],
                )?;
                let r = b.reshape(p, &[n, c, ho * sh, wo * sw])?;
                d = b.slice(r, &[0, 0], &[len_h as i64, len_w as i64], &[2, 3], &[1, 1])?;
            }
            let placed = b.pad(
                d,
                &[
                    0,
                    0,
                    r0,
                    c0,
                    0,
                    0,
                    hp as i64 - r0 - len_h as i64,
                    wp as i64 - c0 - len_w as i64,
                ],
            )?;
            acc = Some(match acc {
                None => placed,
                Some(s) => b.add(s, placed)?,
            });
        }
    }
    let acc = acc.expect("a window has taps");
    let dx = b.pad(
        acc,
        &[
            0,
            0,
            -(pt as i64),
            -(pl as i64),
            0,
            0,
            -(pb as i64),
            -(pr as i64),
        ],
    )?;
    Ok(vec![Some(dx)])
}

pub fn global_average_pool(
    b: &mut Builder,
    node: &Node,
    dy: ValueId,
) -> Result<Vec<Option<ValueId>>> {
    let x = node.input(0).expect("a pool has an input");
    let xs = b.shape(x)?;
    let n: usize = xs[2..].iter().product();
    let d = b.scale(dy, 1.0 / n as f64)?;
    Ok(vec![Some(b.expand(d, &xs)?)])
}

pub fn concat(
    b: &mut Builder,
    node: &Node,
    dy: ValueId,
    want: &dyn Fn(usize) -> bool,
) -> Result<Vec<Option<ValueId>>> {
    let r = b.shape(dy)?.len() as i64;
    let axis = node.attr_i("axis", 0)?;
    let axis = (if axis < 0 { axis + r } else { axis }) as usize;
    let mut out = vec![None; node.inputs.len()];
    let mut at = 0i64;
    for (k, v) in node.inputs.iter().enumerate() {
        let Some(v) = *v else { continue };
        let len = b.shape(v)?[axis] as i64;
        if want(k) {
            out[k] = Some(b.slice(dy, &[at], &[at + len], &[axis], &[1])?);
        }
        at += len;
    }
    Ok(out)
}
