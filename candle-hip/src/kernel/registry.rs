//! Per-device kernel registry: each source is compiled (through hip-safe's
//! on-disk code-object cache) and loaded the first time one of its kernels
//! is needed; functions are looked up once and kept.
//!
//! Compiling never holds a lock other ops need: every source has a slot of
//! its own, so an op waits only for the module it needs, and different
//! modules compile in parallel (on different threads, or in
//! [`Registry::load_all`]). Code objects are shared by all devices of one
//! architecture in the process, so two GPUs of one kind compile a source
//! once. First-use compiles are logged with `tracing` (target
//! `candle_hip::kernel`): which module, for which target, how long.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Instant;

use candle_hip_kernels::Source;
use hip_safe::{Device, Function, Module};

use crate::error::{Result, hip};
use crate::kernel::bundle;
use crate::kernel::catalogue::{Kernel, program};

/// A value made once, on first use, by whoever asks first.
type Slot<T> = Arc<Mutex<Option<T>>>;

/// Loaded modules and functions of one device.
pub(crate) struct Registry {
    device: Device,
    modules: Mutex<HashMap<Source, Slot<Module>>>,
    functions: Mutex<HashMap<Kernel, Function>>,
}

/// Locks `m`; a poisoned lock only means another thread panicked while
/// holding it, and the maps stay valid, so the data is used anyway.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The slot of `key` in `map`, created empty on first use.
fn slot<K: std::hash::Hash + Eq, T>(map: &Mutex<HashMap<K, Slot<T>>>, key: K) -> Slot<T> {
    lock(map).entry(key).or_default().clone()
}

/// What a code object is compiled for: the source, the architecture and the
/// wave size (a define of every program).
#[derive(Clone, PartialEq, Eq, Hash)]
struct CodeKey {
    source: Source,
    arch: String,
    wave_size: u32,
}

/// Code objects compiled in this process, shared by the devices of one
/// architecture (kept for the process's lifetime, so a later device of the
/// same kind loads without compiling, also without a disk cache).
static CODE: LazyLock<Mutex<HashMap<CodeKey, CodeSlot>>> = LazyLock::new(Default::default);

/// A code object, made once.
type CodeSlot = Slot<Arc<Vec<u8>>>;

/// The code object of `source` for `device`: from the kernel bundle when it
/// has this exact one ([`bundle`]), else compiled by the first caller
/// (others asking for the same one wait for it; other sources are not held
/// up). Failures are not kept: the next call tries again.
fn code_object(source: Source, device: &Device) -> Result<Arc<Vec<u8>>> {
    let key = CodeKey {
        source,
        arch: device.arch().to_string(),
        wave_size: device.wave_size(),
    };
    let slot = slot(&CODE, key);
    let mut slot_code = lock(&slot);
    if let Some(code) = slot_code.as_ref() {
        return Ok(code.clone());
    }
    let program = program(source, device.wave_size());
    if let Some(code) = bundle::lookup(source, &program, device.arch(), device.wave_size()) {
        let code = Arc::new(code.to_vec());
        *slot_code = Some(code.clone());
        return Ok(code);
    }
    let start = Instant::now();
    tracing::debug!(target: "candle_hip::kernel", module = source.file_name(), arch = device.arch(),
        "compiling kernel module (first use)");
    let compiled = program.compile_for_arch(device.arch()).map_err(hip)?;
    tracing::info!(target: "candle_hip::kernel", module = source.file_name(), arch = device.arch(),
        ms = start.elapsed().as_millis() as u64, bytes = compiled.len(),
        "kernel module ready (compiled, or read from the code-object cache)");
    let compiled = Arc::new(compiled);
    *slot_code = Some(compiled.clone());
    Ok(compiled)
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

    /// The module of `source`, compiled and loaded on first use; only
    /// callers asking for the same source wait for each other.
    pub(crate) fn module(&self, source: Source) -> Result<Module> {
        let slot = slot(&self.modules, source);
        let mut module = lock(&slot);
        if let Some(m) = module.as_ref() {
            return Ok(m.clone());
        }
        let code = code_object(source, &self.device)?;
        let loaded = Module::from_code_object(&self.device, &code).map_err(hip)?;
        *module = Some(loaded.clone());
        Ok(loaded)
    }

    /// Compiles and loads every source that is not loaded yet, several at
    /// a time (one worker per available core, at most [`MAX_WORKERS`]).
    pub(crate) fn load_all(&self) -> Result<()> {
        let sources = candle_hip_kernels::ALL;
        let next = AtomicUsize::new(0);
        let workers = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, MAX_WORKERS);
        let start = Instant::now();
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    scope.spawn(|| -> Result<()> {
                        while let Some(&source) = sources.get(next.fetch_add(1, Ordering::Relaxed))
                        {
                            self.module(source)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(crate::error::invalid(
                            "load_all",
                            "a compile worker panicked",
                        ))
                    })
                })
                .collect()
        });
        tracing::info!(target: "candle_hip::kernel", modules = sources.len(), workers,
            ms = start.elapsed().as_millis() as u64, "every kernel module loaded");
        results.into_iter().collect()
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

/// The most compile workers [`Registry::load_all`] starts.
const MAX_WORKERS: usize = 8;
