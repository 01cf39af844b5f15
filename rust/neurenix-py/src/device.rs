//! `DeviceManager` and `Device`: inventory and exclusive attach of the
//! simulated IPUs.

use std::sync::Mutex;

use neurenix_sys::{Device, DeviceManager};
use pyo3::prelude::*;

use crate::errors::{guarded, lock, IntoPyResult};
use crate::records::DeviceInfo;

#[pyclass(module = "neurenix._native", name = "DeviceManager", frozen)]
pub struct PyDeviceManager {
    inner: Mutex<DeviceManager>,
}

#[pyclass(module = "neurenix._native", name = "Device", frozen)]
pub struct PyDevice {
    inner: Mutex<Device>,
}

#[pymethods]
impl PyDeviceManager {
    #[new]
    #[pyo3(signature = (system, lock_dir = String::new()))]
    fn new(system: String, lock_dir: String) -> PyResult<Self> {
        guarded(|| {
            Ok(PyDeviceManager {
                inner: Mutex::new(DeviceManager::new(&system, &lock_dir).py()?),
            })
        })
    }

    /// Every attachable group of IPUs, numbered like `gc-info`.
    fn devices(&self) -> Vec<DeviceInfo> {
        lock(&self.inner)
            .devices()
            .into_iter()
            .map(|d| DeviceInfo {
                id: d.id,
                ipus: d.ipus,
            })
            .collect()
    }

    /// Pid of the process holding `ipu`, 0 if free, -1 if held by an unknown process.
    fn holder_pid(&self, ipu: u32) -> i32 {
        lock(&self.inner).holder_pid(ipu)
    }

    #[getter]
    fn lock_dir(&self) -> String {
        lock(&self.inner).lock_dir()
    }

    /// Attaches `num_ipus` IPUs (group `device_id`, or any free one if
    /// None), waiting up to `timeout` seconds if positive.
    #[pyo3(signature = (num_ipus, device_id = None, timeout = 0.0))]
    fn attach(
        &self,
        py: Python<'_>,
        num_ipus: u32,
        device_id: Option<u32>,
        timeout: f64,
    ) -> PyResult<PyDevice> {
        guarded(|| {
            let dev = py
                .detach(|| lock(&self.inner).attach(num_ipus, device_id, timeout))
                .py()?;
            Ok(PyDevice {
                inner: Mutex::new(dev),
            })
        })
    }
}

#[pymethods]
impl PyDevice {
    #[getter]
    fn id(&self) -> u32 {
        lock(&self.inner).id()
    }
    #[getter]
    fn ipus(&self) -> Vec<u32> {
        lock(&self.inner).ipus()
    }
    #[getter]
    fn attached(&self) -> bool {
        lock(&self.inner).attached()
    }
    /// Releases the IPUs; safe to call twice.
    fn detach(&self) {
        lock(&self.inner).detach();
    }
}
