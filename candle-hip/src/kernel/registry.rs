//! Per-device kernel registry: each source is compiled (through hip-safe's
//! on-disk code-object cache) and loaded the first time one of its kernels
//! is needed; functions are looked up once and kept.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use candle_hip_kernels::Source;
use hip_safe::{Device, Function, Module};

use crate::error::{Result, hip};
use crate::kernel::catalogue::{Kernel, program};

/// Loaded modules and functions of one device.
pub(crate) struct Registry {
    device: Device,
    modules: Mutex<HashMap<Source, Module>>,
    functions: Mutex<HashMap<Kernel, Function>>,
}

/// Locks `m`; a poisoned lock only means another thread panicked while
/// holding it, and the maps stay valid, so the data is used anyway.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Registry {
    /// An empty registry for `device`.
    pub(crate) fn new(device: Device) -> Registry {
        Registry {
            device,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
        }
    }

    /// The module of `source`, compiled and loaded on first use. The lock is
    /// held while compiling so that a source is compiled once.
    pub(crate) fn module(&self, source: Source) -> Result<Module> {
        let mut modules = lock(&self.modules);
        if let Some(m) = modules.get(&source) {
            return Ok(m.clone());
        }
        let module = program(source, self.device.wave_size())
            .compile_for(&self.device)
            .map_err(hip)?;
        modules.insert(source, module.clone());
        Ok(module)
    }

    /// Compiles and loads every source that is not loaded yet.
    pub(crate) fn load_all(&self) -> Result<()> {
        for source in candle_hip_kernels::ALL {
            self.module(source)?;
        }
        Ok(())
    }

    /// The function of `kernel`.
    pub(crate) fn function(&self, kernel: Kernel) -> Result<Function> {
        if let Some(f) = lock(&self.functions).get(&kernel) {
            return Ok(f.clone());
        }
        let module = self.module(kernel.source())?;
        let function = module.function(&kernel.name()).map_err(hip)?;
        lock(&self.functions).insert(kernel, function.clone());
        Ok(function)
    }
}
