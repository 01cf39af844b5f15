//! Pad: borders of a constant, or of reflected, repeated or wrapped
//! elements (negative pads crop). Outer indexing with pad values, see
//! `indexing`.

use crate::error::Result;
use crate::ir::Node;
use crate::lower::LowerCx;
use crate::tensor::HostTensor;

use super::indexing::{set_take, take_all_host, AxisIndex, FOLD_LIMIT};
use super::{norm_axis, numel, OpCx, Operator, Registry, TypeShape};

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

    /// Per axis, which input position each output position reads. Negative
    /// pads crop first; the border modes then extend what remains, as
    /// onnxruntime does (reflect and wrap repeat as often as needed).
    fn indices(cx: &OpCx, shape: &[usize], spec: &PadSpec) -> Result<Vec<AxisIndex>> {
        let mut out = Vec::with_capacity(shape.len());
        for (a, (&n, &(pb, pe))) in shape.iter().zip(&spec.pads).enumerate() {
            let lo = (-pb).max(0);
            let hi = n as i64 - (-pe).max(0);
            if hi < lo {
                return Err(cx.err(format!(
                    "pads ({pb}, {pe}) crop more than axis {a} of size {n} has"
                )));
            }
            let m = hi - lo;
            let (before, after) = (pb.max(0), pe.max(0));
            if m == 0 && (before > 0 || after > 0) && spec.mode != PadMode::Constant {
                return Err(cx.err(format!(
                    "cannot extend the empty axis {a} in {:?} mode",
                    spec.mode
                )));
            }
            let idx: AxisIndex = (-before..m + after)
                .map(|j| {
                    let k = if (0..m).contains(&j) {
                        j
                    } else {
                        match spec.mode {
                            PadMode::Constant => return None,
                            PadMode::Edge => j.clamp(0, m - 1),
                            PadMode::Wrap => j.rem_euclid(m),
                            PadMode::Reflect if m == 1 => 0,
                            PadMode::Reflect => {
                                let p = 2 * (m - 1);
                                let r = j.rem_euclid(p);
                                if r < m {
                                    r
                                } else {
                                    p - r
                                }
                            }
                        }
                    };
                    Some((lo + k) as usize)
                })
                .collect();
            out.push(idx);
        }
        Ok(out)
    }
}

impl Operator for Pad {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let s = cx.in_shape(0)?;
        let spec = Pad::spec(cx, s.len())?;
        let idx = Pad::indices(cx, &s, &spec)?;
        Ok(vec![TypeShape::new(
            cx.in_dtype(0)?,
            idx.iter().map(Vec::len).collect(),
        )])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        let spec = tryo!(Pad::spec(cx, x.shape().len()));
        let idx = tryo!(Pad::indices(cx, x.shape(), &spec));
        if numel(&idx.iter().map(Vec::len).collect::<Vec<_>>()) > FOLD_LIMIT {
            return None;
        }
        Some(Ok(vec![take_all_host(x, &idx, spec.value)]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let shape = cx.shape(node.input(0).unwrap())?;
        let opcx = OpCx::of(cx, node);
        let spec = Pad::spec(&opcx, shape.len())?;
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
