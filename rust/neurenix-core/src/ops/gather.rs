//! Gather with indices known only at run time (embedding lookups): the
//! device's column-split table lookup. Constant indices are handled as data
//! movement in `shape_ops`.

use crate::dtype::DeviceType;
use crate::error::Result;
use crate::ir::Node;
use crate::lower::LowerCx;

/// Lowers `Gather(data, indices, axis)` with run-time indices: data is viewed
/// as a [V, rest] table (after moving `axis` first when it is not), every
/// index picks a row, and the rows are put back in ONNX's output order.
pub fn lower_dynamic(cx: &mut LowerCx, node: &Node, axis: usize) -> Result<()> {
    let vd = node.input(0).unwrap();
    let vi = node.input(1).unwrap();
    let s = cx.shape(vd)?;
    let out = cx.shape(node.outputs[0])?;
    let before: usize = s[..axis].iter().product();
    let after: usize = s[axis + 1..].iter().product();
    let v = s[axis];
    let data = cx.tensor(vd)?;
    // [before, V, after] -> [V, before * after]
    let table = if before == 1 {
        cx.reshape(&data, &[v, after])?
    } else {
        let d3 = cx.reshape(&data, &[before, v, after])?;
        let t = cx.transpose(&d3, &[1, 0, 2])?;
        cx.reshape(&t, &[v, before * after])?
    };
    let idx = cx.tensor_as(vi, DeviceType::I32)?;
    let n = idx.numel();
    let idx = cx.reshape(&idx, &[n])?;
    let rows = cx.gather_rows(&table, &idx)?;
    // [n, before * after] -> [before, n, after]
    let y = if before == 1 {
        rows
    } else {
        let r3 = cx.reshape(&rows, &[n, before, after])?;
        cx.transpose(&r3, &[1, 0, 2])?
    };
    let y = cx.reshape(&y, &out)?;
    cx.set(node.outputs[0], y);
    Ok(())
}
