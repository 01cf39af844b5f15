//! The one place where core errors become Python exceptions. The classes are
//! defined in Python (`neurenix.hardware.graphcore.errors`); each variant of
//! `neurenix_core::Error` maps to exactly one of them, with its structured
//! data as keyword arguments. A Rust panic never reaches Python as one: every
//! entry point runs under [`guarded`], which makes it an `IPUInternalError`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, PoisonError};

use neurenix_core::Error;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

const ERRORS: &str = "neurenix.hardware.graphcore.errors";

pub fn to_py(err: Error) -> PyErr {
    Python::attach(|py| match build(py, &err) {
        Ok(e) => e,
        Err(e) => e,
    })
}

fn build(py: Python<'_>, err: &Error) -> PyResult<PyErr> {
    let module = py.import(ERRORS)?;
    let kwargs = PyDict::new(py);
    let class = match err {
        Error::InvalidArgument(_) => "InvalidOptionError",
        Error::ShapeMismatch { node, .. } => {
            kwargs.set_item("node", node)?;
            "ModelFormatError"
        }
        Error::ModelFormat(_) => "ModelFormatError",
        Error::OutOfMemory { tiles, tensor, .. } => {
            let list = PyList::empty(py);
            for t in tiles {
                let largest = PyList::empty(py);
                for neurenix_core::report::TileTensor { name, bytes, .. } in &t.largest {
                    largest.append(PyTuple::new(
                        py,
                        [
                            name.into_pyobject(py)?.into_any(),
                            bytes.into_pyobject(py)?.into_any(),
                        ],
                    )?)?;
                }
                let d = PyDict::new(py);
                d.set_item("ipu", t.ipu)?;
                d.set_item("tile", t.tile)?;
                d.set_item("used", t.used)?;
                d.set_item("capacity", t.capacity)?;
                d.set_item("largest", largest)?;
                list.append(d)?;
            }
            kwargs.set_item("tiles", list)?;
            if let Some(t) = tensor {
                kwargs.set_item("tensor", (t.name.clone(), t.bytes, t.capacity))?;
            }
            "IPUOutOfMemoryError"
        }
        Error::DeviceUnavailable { ipus, pids, .. } => {
            kwargs.set_item("ipus", ipus.clone())?;
            kwargs.set_item("pids", pids.clone())?;
            "DeviceUnavailableError"
        }
        Error::Unsupported {
            op_type,
            node,
            domain,
            opset,
            supported,
            ..
        } => {
            kwargs.set_item("op_type", op_type)?;
            kwargs.set_item("node", node)?;
            kwargs.set_item("domain", domain)?;
            kwargs.set_item("opset", opset)?;
            kwargs.set_item("supported", supported.clone())?;
            "UnsupportedOperatorError"
        }
        Error::InputMismatch { input, .. } => {
            kwargs.set_item("input_name", input)?;
            "InputMismatchError"
        }
        Error::InvalidState(_) => "IPUStateError",
        Error::Internal(_) => "IPUInternalError",
        Error::FloatingPoint(_) => "IPUFloatingPointError",
    };
    let cls = module.getattr(class)?;
    let exc = cls.call((err.to_string(),), Some(&kwargs))?;
    Ok(PyErr::from_value(exc))
}

/// `Result` of the core into a Python result.
pub trait IntoPyResult<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, Error> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// Runs an entry point's body; a panic inside becomes `IPUInternalError`
/// carrying the panic's message, and the process goes on.
pub fn guarded<T>(body: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_string());
            Err(to_py(Error::Internal(what)))
        }
    }
}

/// Locks `m` even if a panic (turned into an error by [`guarded`]) poisoned
/// it: the state it protects is only ever replaced whole, never left torn.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
