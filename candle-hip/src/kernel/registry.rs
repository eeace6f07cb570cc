//! Per-device kernel registry: each compilation [`Unit`] is compiled
//! (through hip-safe's on-disk code-object cache) and loaded the first time
//! one of its kernels is needed; functions are looked up once and kept.
//!
//! Compiling never holds a lock other ops need: every unit has a slot of
//! its own, so an op waits only for the module it needs, and different
//! modules compile in parallel (on different threads, or in
//! [`Registry::load_all`]): NVRTC (the NVIDIA test platform) and the CPU
//! platform's compiler compile side by side, and AMD's hipRTC, which runs
//! one compile at a time per copy of it, does on copies that hip-safe loads
//! for concurrent compiles (`hip_sys::hiprtc_copy`). A kernel bundle
//! removes the compiles. Code objects are
//! shared by all devices of one architecture in the process, so two GPUs of
//! one kind compile a unit once. First-use compiles are logged with `tracing` (target
//! `candle_hip::kernel`): which module, for which target, how long.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Instant;

use hip_safe::{Device, Function, Module};

use crate::error::{Result, hip};
use crate::kernel::Unit;
use crate::kernel::bundle;
use crate::kernel::catalogue::Kernel;

/// A value made once, on first use, by whoever asks first.
type Slot<T> = Arc<Mutex<Option<T>>>;

/// Loaded modules and functions of one device.
pub(crate) struct Registry {
    device: Device,
    modules: Mutex<HashMap<Unit, Slot<Module>>>,
    functions: Mutex<HashMap<Kernel, Function>>,
    registers: Mutex<HashMap<Kernel, u32>>,
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

/// What a code object is compiled for: the unit, the architecture and the
/// wave size (a define of every program).
#[derive(Clone, PartialEq, Eq, Hash)]
struct CodeKey {
    unit: Unit,
    arch: String,
    wave_size: u32,
}

/// Code objects compiled in this process, shared by the devices of one
/// architecture (kept for the process's lifetime, so a later device of the
/// same kind loads without compiling, also without a disk cache).
static CODE: LazyLock<Mutex<HashMap<CodeKey, CodeSlot>>> = LazyLock::new(Default::default);

/// A code object, made once.
type CodeSlot = Slot<Arc<Vec<u8>>>;

/// The code object of `unit` for `arch` with `wave_size`-lane waves, as
/// a device of that kind loads it: from the kernel bundle when it has this
/// exact one ([`bundle`](crate::kernel::bundle)), else compiled (through
/// the disk cache) by the first caller; others asking for the same one
/// wait for it, other units are not held up. Kept for the process's
/// lifetime; failures are not kept (the next call tries again). Needs
/// hipRTC only when compiling, never a device.
pub fn code_object(unit: Unit, arch: &str, wave_size: u32) -> Result<Arc<Vec<u8>>> {
    let key = CodeKey {
        unit,
        arch: arch.to_string(),
        wave_size,
    };
    let slot = slot(&CODE, key);
    let mut slot_code = lock(&slot);
    if let Some(code) = slot_code.as_ref() {
        return Ok(code.clone());
    }
    let program = unit.program(wave_size);
    if let Some(code) = bundle::lookup(unit, &program, arch, wave_size) {
        let code = Arc::new(code.to_vec());
        *slot_code = Some(code.clone());
        return Ok(code);
    }
    let start = Instant::now();
    tracing::debug!(target: "candle_hip::kernel", module = %unit, arch,
        "compiling kernel module (first use)");
    let compiled = program.compile_for_arch(arch).map_err(hip)?;
    tracing::info!(target: "candle_hip::kernel", module = %unit, arch,
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
            registers: Mutex::new(HashMap::new()),
        }
    }

    /// The module of `unit`, compiled and loaded on first use; only
    /// callers asking for the same unit wait for each other.
    pub(crate) fn module(&self, unit: Unit) -> Result<Module> {
        let slot = slot(&self.modules, unit);
        let mut module = lock(&slot);
        if let Some(m) = module.as_ref() {
            return Ok(m.clone());
        }
        let code = code_object(unit, self.device.arch(), self.device.wave_size())?;
        let loaded = Module::from_code_object(&self.device, &code).map_err(hip)?;
        *module = Some(loaded.clone());
        Ok(loaded)
    }

    /// Compiles and loads every unit that is not loaded yet, several at a
    /// time (one worker per available core, at most [`MAX_WORKERS`]).
    pub(crate) fn load_all(&self) -> Result<()> {
        let units = Unit::all();
        let next = AtomicUsize::new(0);
        let workers = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, MAX_WORKERS);
        let start = Instant::now();
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    scope.spawn(|| -> Result<()> {
                        while let Some(&unit) = units.get(next.fetch_add(1, Ordering::Relaxed)) {
                            self.module(unit)?;
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
        tracing::info!(target: "candle_hip::kernel", modules = units.len(), workers,
            ms = start.elapsed().as_millis() as u64, "every kernel module loaded");
        results.into_iter().collect()
    }

    /// The function of `kernel`.
    pub(crate) fn function(&self, kernel: Kernel) -> Result<Function> {
        if let Some(f) = lock(&self.functions).get(&kernel) {
            return Ok(f.clone());
        }
        let module = self.module(Unit::of(&kernel))?;
        let function = module.function(&kernel.name()).map_err(hip)?;
        lock(&self.functions).insert(kernel, function.clone());
        Ok(function)
    }

    /// The registers a lane of `kernel` uses, asked of the driver once (a
    /// launch that sizes its grid by them asks on every call).
    pub(crate) fn registers(&self, kernel: Kernel) -> Result<u32> {
        if let Some(&r) = lock(&self.registers).get(&kernel) {
            return Ok(r);
        }
        let registers = self.function(kernel)?.num_registers().map_err(hip)?;
        lock(&self.registers).insert(kernel, registers);
        Ok(registers)
    }
}

/// The most compile workers [`Registry::load_all`] starts.
const MAX_WORKERS: usize = 8;
