//! Pad: borders of a constant, or of reflected, repeated or wrapped
//! elements (negative pads crop). Outer indexing with pad values, see
//! `indexing`.

use crate::error::{Error, Result};
use crate::ir::Node;
use crate::lower::LowerCx;
use crate::tensor::HostTensor;

use super::indexing::{empty_like, fill_tensor, set_take, take_all_host, AxisIndex, FOLD_LIMIT};
use super::{checked_numel, host_fits, norm_axis, OpCx, Operator, Registry, TypeShape};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

struct Pad;

struct PadSpec {
    /// (before, after) per axis; negative values crop.
    pads: Vec<(i64, i64)>,
    mode: PadMode,
    value: f64,
}

impl Pad {
    fn spec(cx: &OpCx, rank: usize) -> Result<PadSpec> {
        let mode = match cx.node.attr_s("mode", "constant")?.as_str() {
            "constant" => PadMode::Constant,
            "reflect" => PadMode::Reflect,
            "edge" => PadMode::Edge,
            "wrap" if cx.opset >= 19 => PadMode::Wrap,
            other => {
                return Err(cx.err(format!(
                    "mode '{other}' is not one of 'constant', 'reflect', 'edge'{} at opset {}",
                    if cx.opset >= 19 { ", 'wrap'" } else { "" },
                    cx.opset
                )))
            }
        };
        let (flat, value, axes) = if cx.opset < 11 {
            let p = match cx.node.attr_ints("pads")? {
                Some(p) => p,
                None => cx
                    .node
                    .attr_ints("paddings")?
                    .ok_or_else(|| cx.err("missing 'pads' attribute"))?,
            };
            (p, cx.node.attr_f("value", 0.0)? as f64, None)
        } else {
            let p = cx.const_ints(1, "pads")?;
            let value = if cx.has_input(2) {
                let c = cx.const_input(2).ok_or_else(|| {
                    cx.unsupported_form("constant_value (input 2) must be known at compile time")
                })?;
                c.to_f64_vec().first().copied().unwrap_or(0.0)
            } else {
                0.0
            };
            let axes = if cx.opset >= 18 && cx.has_input(3) {
                Some(cx.const_ints(3, "axes")?)
            } else {
                None
            };
            (p, value, axes)
        };
        let axes: Vec<usize> = match axes {
            Some(a) => a
                .iter()
                .map(|&x| norm_axis(x, rank, cx))
                .collect::<Result<_>>()?,
            None => (0..rank).collect(),
        };
        if flat.len() != 2 * axes.len() {
            return Err(cx.err(format!(
                "pads {flat:?} should have {} entries (two per padded axis)",
                2 * axes.len()
            )));
        }
        let mut pads = vec![(0i64, 0i64); rank];
        let mut seen = vec![false; rank];
        for (k, &a) in axes.iter().enumerate() {
            if std::mem::replace(&mut seen[a], true) {
                return Err(cx.err(format!("axis {a} is padded twice")));
            }
            pads[a] = (flat[k], flat[k + axes.len()]);
        }
        Ok(PadSpec { pads, mode, value })
    }

    /// Per axis, what is kept of the input and what is added around it.
    /// Negative pads crop first; the border modes then extend what remains,
    /// as onnxruntime does (reflect and wrap repeat as often as needed).
    /// Pure arithmetic, checked: nothing here is proportional to the sizes.
    fn axes(cx: &OpCx, shape: &[usize], spec: &PadSpec) -> Result<Vec<AxisPad>> {
        let mut out = Vec::with_capacity(shape.len());
        for (a, (&n, &(pb, pe))) in shape.iter().zip(&spec.pads).enumerate() {
            // A negative pad crops, a positive one adds.
            let split = |p: i64| -> Result<(usize, usize)> {
                let mag = usize::try_from(p.unsigned_abs()).map_err(|_| {
                    cx.err(format!("pad {p} of axis {a} is beyond this host's sizes"))
                })?;
                Ok(if p < 0 { (mag, 0) } else { (0, mag) })
            };
            let (crop_b, before) = split(pb)?;
            let (crop_e, after) = split(pe)?;
            let kept = n
                .checked_sub(crop_b)
                .and_then(|k| k.checked_sub(crop_e))
                .ok_or_else(|| {
                    cx.err(format!(
                        "pads ({pb}, {pe}) crop more than axis {a} of size {n} has"
                    ))
                })?;
            if kept == 0 && (before > 0 || after > 0) && spec.mode != PadMode::Constant {
                return Err(cx.err(format!(
                    "cannot extend the empty axis {a} in {:?} mode",
                    spec.mode
                )));
            }
            let len = kept
                .checked_add(before)
                .and_then(|l| l.checked_add(after))
                .ok_or_else(|| {
                    cx.err(format!(
                        "axis {a} of size {n} padded by ({pb}, {pe}) overflows"
                    ))
                })?;
            out.push(AxisPad {
                lo: crop_b,
                kept,
                before,
                after,
                len,
            });
        }
        Ok(out)
    }

    fn out_shape(cx: &OpCx, shape: &[usize], spec: &PadSpec) -> Result<Vec<usize>> {
        let out: Vec<usize> = Pad::axes(cx, shape, spec)?.iter().map(|p| p.len).collect();
        cx.numel(&out, "the padded shape")?;
        Ok(out)
    }

    /// Per axis, which input position each output position reads, as runs.
    /// Called for results that exist (on the host or the device), so the
    /// runs, at most a few per period of the border, are bounded by them.
    fn indices(cx: &OpCx, shape: &[usize], spec: &PadSpec) -> Result<Vec<AxisIndex>> {
        Pad::axes(cx, shape, spec)?
            .iter()
            .map(|p| p.index(spec.mode))
            .collect()
    }
}

/// One padded axis: `kept` input positions from `lo`, with `before` and
/// `after` positions added around them, `len` in all.
struct AxisPad {
    lo: usize,
    kept: usize,
    before: usize,
    after: usize,
    len: usize,
}

impl AxisPad {
    fn index(&self, mode: PadMode) -> Result<AxisIndex> {
        let AxisPad {
            lo,
            kept: m,
            before,
            after,
            len,
        } = *self;
        let mut idx = AxisIndex::default();
        // Output position j reads input position lo + k(j - before), for the
        // source position k(i) of an unclamped position i.
        match mode {
            PadMode::Constant => {
                idx.push_fill(before);
                idx.push_seq(lo, 1, m);
                idx.push_fill(after);
            }
            // Nothing to extend: `axes` allows no border around it.
            _ if m == 0 => {}
            _ if m == 1 => idx.push_seq(lo, 0, len),
            PadMode::Edge => {
                let last = lo + m - 1;
                idx.push_seq(lo, 0, before);
                idx.push_seq(lo, 1, m);
                idx.push_seq(last, 0, after);
            }
            PadMode::Wrap => {
                // k(i) = i mod m: ascending runs of up to m positions.
                let mut k = (m - before % m) % m;
                let mut left = len;
                while left > 0 {
                    let n = (m - k).min(left);
                    idx.push_seq(lo + k, 1, n);
                    left -= n;
                    k = 0;
                }
            }
            PadMode::Reflect => {
                // k(i) = r or p - r for r = i mod p, p = 2 (m - 1): runs up
                // (r < m) and down (r >= m), alternately.
                let p = (m - 1).checked_mul(2).ok_or_else(|| {
                    Error::model(format!("reflecting an axis of {m} positions overflows"))
                })?;
                let mut r = (p - before % p) % p;
                let mut left = len;
                while left > 0 {
                    if r < m {
                        let n = (m - r).min(left);
                        idx.push_seq(lo + r, 1, n);
                        left -= n;
                        r += n;
                    } else {
                        let n = (p - r).min(left);
                        idx.push_seq(lo + (p - r), -1, n);
                        left -= n;
                        r += n;
                    }
                    if r >= p {
                        r -= p;
                    }
                }
            }
        }
        Ok(idx)
    }
}

impl Operator for Pad {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let s = cx.in_shape(0)?;
        let spec = Pad::spec(cx, s.len())?;
        Ok(vec![TypeShape::new(
            cx.in_dtype(0)?,
            Pad::out_shape(cx, &s, &spec)?,
        )])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        let spec = tryo!(Pad::spec(cx, x.shape().len()));
        let out = tryo!(Pad::out_shape(cx, x.shape(), &spec));
        if !host_fits(&out, FOLD_LIMIT) {
            return None;
        }
        if checked_numel(&out) == Some(0) {
            return Some(empty_like(x, &out).map(|y| vec![y]));
        }
        let idx = tryo!(Pad::indices(cx, x.shape(), &spec));
        Some(take_all_host(x, &idx, spec.value).map(|y| vec![y]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let shape = opcx.in_shape(0)?;
        let spec = Pad::spec(&opcx, shape.len())?;
        let out = Pad::out_shape(&opcx, &shape, &spec)?;
        if checked_numel(&out) == Some(0) {
            let x = cx.tensor(opcx.input(0)?)?;
            let y = fill_tensor(cx, x.dtype, &out, spec.value)?;
            cx.set(node.outputs[0], y);
            return Ok(());
        }
        let idx = Pad::indices(&opcx, &shape, &spec)?;
        set_take(cx, node, 0, &idx, spec.value)
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

pub fn register(r: &mut Registry) {
    r.insert("Pad", Box::new(Pad));
}

#[cfg(test)]
mod tests {
    use crate::ir::Attr;
    use crate::ops::testing::*;

    #[test]
    fn pad_modes() {
        let x = arange(&[3]);
        let pad = |mode: &str, p: [i64; 2], opset: i64| {
            fold(
                "Pad",
                opset,
                vec![In::C(x.clone()), In::C(i64s(&[2], &p))],
                1,
                &[("mode", Attr::String(mode.into()))],
            )
            .map(|r| r[0].to_i64_vec())
        };
        assert_eq!(pad("constant", [1, 2], 13).unwrap(), vec![0, 0, 1, 2, 0, 0]);
        assert_eq!(
            pad("reflect", [2, 2], 13).unwrap(),
            vec![2, 1, 0, 1, 2, 1, 0]
        );
        assert_eq!(
            pad("reflect", [3, 5], 13).unwrap(),
            vec![1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1]
        );
        assert_eq!(pad("edge", [-1, 4], 13).unwrap(), vec![1, 2, 2, 2, 2, 2]);
        assert_eq!(pad("edge", [3, 0], 13).unwrap(), vec![0, 0, 0, 0, 1, 2]);
        assert_eq!(
            pad("wrap", [7, 0], 19).unwrap(),
            vec![2, 0, 1, 2, 0, 1, 2, 0, 1, 2]
        );
        assert_eq!(pad("wrap", [-1, 4], 19).unwrap(), vec![1, 2, 1, 2, 1, 2]);
        assert!(pad("wrap", [1, 1], 18).is_err());
        assert!(pad("constant", [-2, -2], 13).is_err());

        // Opset 11 constant_value, opset 18 axes, opset 2 attributes.
        let x2 = arange(&[2, 2]);
        let y = one(
            "Pad",
            11,
            vec![
                In::C(x2.clone()),
                In::C(i64s(&[4], &[0, 1, 1, 0])),
                In::C(f32s(&[], &[-1.0])),
            ],
            &[],
        );
        assert_eq!(y.shape(), &[3, 3]);
        assert_eq!(y.to_i64_vec(), vec![-1, 0, 1, -1, 2, 3, -1, -1, -1]);
        let y = one(
            "Pad",
            18,
            vec![
                In::C(x2.clone()),
                In::C(i64s(&[2], &[1, 0])),
                In::Absent,
                In::C(i64s(&[1], &[-1])),
            ],
            &[("mode", Attr::String("edge".into()))],
        );
        assert_eq!(y.to_i64_vec(), vec![0, 0, 1, 2, 2, 3]);
        let y = one(
            "Pad",
            10,
            vec![In::C(x2)],
            &[("pads", ints(&[1, 0, 0, 0])), ("value", Attr::Float(7.0))],
        );
        assert_eq!(y.to_i64_vec(), vec![7, 7, 0, 1, 2, 3]);
    }
}
