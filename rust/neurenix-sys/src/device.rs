//! `DeviceManager` and `Device`: inventory and exclusive attach of simulated
//! IPUs.

use cxx::UniquePtr;
use neurenix_core::error::{Error, Result};

use crate::bridge::ffi;
use crate::error::from_cxx;

pub use ffi::DeviceInfo;

pub struct DeviceManager {
    inner: UniquePtr<ffi::DeviceManager>,
}

impl DeviceManager {
    /// The IPUs of the system `spec` describes; locks live in `lock_dir`
    /// (empty: `$NEURENIX_IPU_LOCK_DIR` or the default).
    pub fn new(spec: &str, lock_dir: &str) -> Result<DeviceManager> {
        Ok(DeviceManager {
            inner: ffi::new_device_manager(spec, lock_dir).map_err(from_cxx)?,
        })
    }
    /// Every attachable group, in id order.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        self.inner.devices()
    }
    /// Pid of the process holding `ipu`: 0 if free, -1 if the holder is unknown.
    pub fn holder_pid(&self, ipu: u32) -> i32 {
        self.inner.holder_pid(ipu)
    }
    pub fn lock_dir(&self) -> String {
        self.inner.lock_dir()
    }
    /// Attaches group `device_id`, or any free group of `num_ipus`; waits up
    /// to `timeout_seconds` for busy IPUs. Busy IPUs are an
    /// `Error::DeviceUnavailable` naming them and their holders.
    pub fn attach(
        &mut self,
        num_ipus: u32,
        device_id: Option<u32>,
        timeout_seconds: f64,
    ) -> Result<Device> {
        let id: Vec<u32> = device_id.into_iter().collect();
        match self.inner.pin_mut().attach(num_ipus, &id, timeout_seconds) {
            Ok(d) => Ok(Device { inner: d }),
            Err(e) => Err(match from_cxx(e) {
                Error::DeviceUnavailable { message, .. } => Error::DeviceUnavailable {
                    ipus: self.inner.last_busy_ipus(),
                    pids: self.inner.last_busy_pids(),
                    message,
                },
                other => other,
            }),
        }
    }
}

/// Attached IPUs.
pub struct Device {
    inner: UniquePtr<ffi::Device>,
}

impl Device {
    pub fn id(&self) -> u32 {
        self.inner.id()
    }
    pub fn ipus(&self) -> Vec<u32> {
        self.inner.ipus()
    }
    pub fn attached(&self) -> bool {
        self.inner.attached()
    }
    /// Releases the IPUs; safe to call twice.
    pub fn detach(&mut self) {
        self.inner.pin_mut().detach();
    }
}
