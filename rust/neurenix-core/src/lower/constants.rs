//! Host constants on the device: each constant value (and each tensor
//! derived from one on the host, a transposed weight say) is placed once per
//! IPU and device type, however many nodes read it.

use crate::dtype::DeviceType;
use crate::error::{Error, Result};
use crate::ir::ValueId;
use crate::tensor::HostTensor;

use super::{DevTensor, LowerCx};

impl LowerCx<'_> {
    /// A device tensor holding constant `v` as type `dt`.
    pub(super) fn constant_tensor(&mut self, v: ValueId, dt: DeviceType) -> Result<DevTensor> {
        let key = (v, dt, self.current_ipu);
        if let Some(t) = self.consts.get(&key) {
            return Ok(t.clone());
        }
        let c = self.graph.constant(v).ok_or_else(|| {
            Error::Internal(format!(
                "value '{}' is not a constant",
                self.graph.value(v).name
            ))
        })?;
        let name = self.graph.value(v).name.clone();
        let t = self.host_constant(c, dt, &name)?;
        self.consts.insert(key, t.clone());
        Ok(t)
    }

    /// A constant computed on the host from constant `v` by `f`, created once
    /// per IPU and type like `v` itself.
    pub fn derived_constant(
        &mut self,
        v: ValueId,
        tag: &'static str,
        dt: DeviceType,
        f: &dyn Fn(&HostTensor) -> HostTensor,
    ) -> Result<DevTensor> {
        let key = (v, tag, dt, self.current_ipu);
        if let Some(t) = self.derived.get(&key) {
            return Ok(t.clone());
        }
        let c = self
            .graph
            .constant(v)
            .ok_or_else(|| Error::Internal("derived_constant of a non-constant".into()))?;
        let name = format!("{}{tag}", self.graph.value(v).name);
        let t = self.host_constant(&f(c), dt, &name)?;
        self.derived.insert(key, t.clone());
        Ok(t)
    }

    /// Places a host tensor on this node's IPU as a constant of type `dt`
    /// (not cached: every call adds one).
    pub fn host_constant(
        &mut self,
        c: &HostTensor,
        dt: DeviceType,
        name: &str,
    ) -> Result<DevTensor> {
        let bytes = c.to_device_bytes(dt, &format!("constant '{name}'"))?;
        let id = self
            .backend
            .add_constant(name, dt, c.shape(), bytes, self.current_ipu)?;
        Ok(self.here(id, c.shape().to_vec(), dt))
    }
}
