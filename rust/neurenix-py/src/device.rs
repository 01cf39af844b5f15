//! `DeviceManager` and `Device`: inventory and exclusive attach of the
//! simulated IPUs.

use std::sync::Mutex;

use neurenix_sys::{SimDevice, SimDeviceManager};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::IntoPyResult;

#[pyclass(module = "neurenix._native", name = "DeviceManager")]
pub struct PyDeviceManager {
    inner: Mutex<SimDeviceManager>,
}

#[pyclass(module = "neurenix._native", name = "Device")]
pub struct PyDevice {
    inner: Mutex<SimDevice>,
}

#[pymethods]
impl PyDeviceManager {
    #[new]
    #[pyo3(signature = (system, lock_dir = String::new()))]
    fn new(system: String, lock_dir: String) -> PyResult<Self> {
        Ok(PyDeviceManager {
            inner: Mutex::new(SimDeviceManager::new(&system, &lock_dir).py()?),
        })
    }

    /// [{"id": .., "ipus": [..]}] for every attachable group.
    fn devices<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for d in self.inner.lock().unwrap().devices() {
            let e = PyDict::new(py);
            e.set_item("id", d.id)?;
            e.set_item("ipus", d.ipus)?;
            out.append(e)?;
        }
        Ok(out)
    }

    /// Pid of the process holding `ipu`, 0 if free, -1 if held by an unknown process.
    fn holder_pid(&self, ipu: u32) -> i32 {
        self.inner.lock().unwrap().holder_pid(ipu)
    }

    #[getter]
    fn lock_dir(&self) -> String {
        self.inner.lock().unwrap().lock_dir()
    }

    /// Attaches `num_ipus` IPUs (group `device_id`, or any free one if
    /// negative), waiting up to `timeout` seconds if positive.
    #[pyo3(signature = (num_ipus, device_id = -1, timeout = 0.0))]
    fn attach(
        &self,
        py: Python<'_>,
        num_ipus: u32,
        device_id: i64,
        timeout: f64,
    ) -> PyResult<PyDevice> {
        let dev = py
            .detach(|| {
                self.inner
                    .lock()
                    .unwrap()
                    .attach(num_ipus, device_id, timeout)
            })
            .py()?;
        Ok(PyDevice {
            inner: Mutex::new(dev),
        })
    }
}

#[pymethods]
impl PyDevice {
    #[getter]
    fn id(&self) -> u32 {
        self.inner.lock().unwrap().id()
    }
    #[getter]
    fn ipus(&self) -> Vec<u32> {
        self.inner.lock().unwrap().ipus()
    }
    #[getter]
    fn attached(&self) -> bool {
        self.inner.lock().unwrap().attached()
    }
    /// Releases the IPUs; safe to call twice.
    fn detach(&self) {
        self.inner.lock().unwrap().detach();
    }
}
