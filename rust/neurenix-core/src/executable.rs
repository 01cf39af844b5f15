//! The executable: a model compiled for a device, which loads, runs and
//! unloads it.
//!
//! It has two halves: the device's compiled program ([`DeviceExecutable`],
//! with its engine once loaded) and the host's half from lowering
//! ([`Lowered`]): which host streams carry the inputs and outputs, in which
//! element types on either side, and what the passes and the sharder did.
//! `run` converts host data to the device types on the way in and back on
//! the way out.

use crate::backend::{DeviceEngine, DeviceExecutable};
use crate::compile::{CompileOptions, Lowered};
use crate::dtype::{DeviceType, ElemType};
use crate::error::{Error, Result};
use crate::report::{DeviceReport, RunStats};
use crate::tensor::{device_to_host, host_to_device};

/// One input or output of a compiled program: the tensor as the host sees it
/// (the model's element type) and as the device holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostStream {
    pub name: String,
    pub dtype: ElemType,
    pub shape: Vec<usize>,
    pub device_type: DeviceType,
}

impl HostStream {
    /// Bytes of the host data in the model's element type.
    pub fn host_bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size()
    }
}

pub struct Executable {
    pub lowered: Lowered,
    pub options: CompileOptions,
    /// Host time the compile took.
    pub compile_seconds: f64,
    report: DeviceReport,
    device: Box<dyn DeviceExecutable>,
    engine: Option<Box<dyn DeviceEngine>>,
}

impl Executable {
    pub fn new(
        device: Box<dyn DeviceExecutable>,
        lowered: Lowered,
        options: CompileOptions,
        compile_seconds: f64,
    ) -> Executable {
        Executable {
            report: device.report(),
            lowered,
            options,
            compile_seconds,
            device,
            engine: None,
        }
    }

    pub fn inputs(&self) -> &[HostStream] {
        &self.lowered.inputs
    }
    pub fn outputs(&self) -> &[HostStream] {
        &self.lowered.outputs
    }
    /// What the device says about the compiled program.
    pub fn report(&self) -> &DeviceReport {
        &self.report
    }

    /// Loads the program into fresh device memory (`threads` = 0: the
    /// device's default). Replaces a program loaded before.
    pub fn load(&mut self, threads: u32) -> Result<()> {
        self.engine = None;
        self.engine = Some(self.device.load(threads)?);
        Ok(())
    }

    /// Frees the device memory of the loaded program, if any.
    pub fn unload(&mut self) {
        self.engine = None;
    }

    pub fn is_loaded(&self) -> bool {
        self.engine.is_some()
    }

    /// Runs once, loading the program first if needed. `inputs`: each
    /// input's little-endian bytes in its declared element type, in input
    /// order. Returns the outputs' bytes in their declared element types.
    pub fn run(&mut self, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        let streams = &self.lowered.inputs;
        if inputs.len() != streams.len() {
            return Err(Error::InputMismatch {
                input: String::new(),
                message: format!(
                    "the program takes {} input(s), got {}",
                    streams.len(),
                    inputs.len()
                ),
            });
        }
        let mut device_inputs = Vec::with_capacity(inputs.len());
        for (s, data) in streams.iter().zip(inputs) {
            let expect = s.host_bytes();
            if data.len() != expect {
                return Err(Error::InputMismatch {
                    input: s.name.clone(),
                    message: format!(
                        "input '{}' ({}{:?}) needs {expect} bytes, got {}",
                        s.name,
                        s.dtype,
                        s.shape,
                        data.len()
                    ),
                });
            }
            device_inputs.push(host_to_device(s.dtype, data, s.device_type, &s.name)?);
        }
        if self.engine.is_none() {
            self.load(0)?;
        }
        let engine = self.engine.as_mut().expect("loaded above");
        let raw = engine.run(&device_inputs)?;
        if raw.len() != self.lowered.outputs.len() {
            return Err(Error::Internal(format!(
                "the device returned {} outputs for a program with {}",
                raw.len(),
                self.lowered.outputs.len()
            )));
        }
        raw.iter()
            .zip(&self.lowered.outputs)
            .map(|(r, s)| device_to_host(s.device_type, r, s.dtype))
            .collect()
    }

    /// Statistics of the last run of the loaded program.
    pub fn last_run(&self) -> Option<RunStats> {
        self.engine.as_ref()?.last_run()
    }
}
