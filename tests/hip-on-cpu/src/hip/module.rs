//! Code objects and kernel launches.
//!
//! A code object of this platform is a host shared object made by our
//! hipRTC, handed out with its ELF machine stamped `EM_AMDGPU` so that
//! callers treat it as the AMD code object it stands for (hip-safe checks
//! the ELF structure before loading). `hipModuleLoadData` checks the stamp,
//! writes the image back with the host's machine to a private temporary
//! file and `dlopen`s it. Each kernel `k` has a launch entry
//! `__hipcpu_launch_k` (see `device/hipcpu/exec.h`); a launch splits the
//! grid's blocks over a pool of CPU threads, each running its blocks'
//! threads as fibers, and checks the buffers' guards afterwards.
//!
//! A launch on a capturing stream is recorded instead (see `hip::graph`)
//! with a copy of its argument values: the kernel's pack entry
//! `__hipcpu_pack_k` lays the values `kernelParams` points at out in a
//! packed buffer (or the `extra` buffer is copied), which every replay
//! passes to the launch entry.

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use hip_sys::{hipError_t, hipFunction_attribute as Attr, hipFunction_t, hipModule_t, hipStream_t};

use super::device::device;
use super::graph::record;
use super::memory::check_guards;
use super::status::HipResult;
use crate::ffi::{non_null, write_out};

const INVALID: hipError_t = hipError_t::hipErrorInvalidValue;
const INVALID_HANDLE: hipError_t = hipError_t::hipErrorInvalidHandle;

/// ELF machine numbers: the stamp our code objects carry, and the host's.
pub(crate) const EM_AMDGPU: u16 = 224;
pub(crate) const EM_HOST: u16 = 62; // EM_X86_64
/// Offset of `e_machine` in an ELF header.
pub(crate) const E_MACHINE: usize = 18;

/// Symbol every module of this platform exports (its layout version).
pub(crate) const ABI_SYMBOL: &str = "__hipcpu_module_abi";
/// The layout version: `Launch` as this runtime passes it (2: the host's
/// fiber stacks). Modules of another version are refused.
pub(crate) const MODULE_ABI: c_int = 2;
/// Prefix of a kernel's launch entry.
pub(crate) const LAUNCH_PREFIX: &str = "__hipcpu_launch_";
/// Prefix of a kernel's pack entry (see `hipcpu::pack_arguments`).
pub(crate) const PACK_PREFIX: &str = "__hipcpu_pack_";

/// Environment variable capping the CPU threads a launch uses.
pub const THREADS_VAR: &str = "HIP_ON_CPU_THREADS";

/// `threadIdx`-style dimensions, as `hipcpu::Dim3`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Dim3 {
    x: u32,
    y: u32,
    z: u32,
}

/// A launch as a module's entry reads it (`hipcpu::Launch`; keep in step).
#[repr(C)]
#[derive(Clone, Copy)]
struct Launch {
    grid: Dim3,
    block: Dim3,
    shared_bytes: u64,
    first_block: u64,
    block_step: u64,
    args: *mut *mut c_void,
    packed: *const c_char,
    packed_size: u64,
    kernel: *const c_char,
    error: *mut c_char,
    error_len: u64,
    /// This CPU thread's fiber stacks (see `fibers`), set by `run_share`.
    stacks: *const *mut c_char,
    stack_count: u64,
}

/// A kernel's launch entry.
type Entry = unsafe extern "C" fn(*const Launch) -> c_int;
/// A kernel's pack entry: `(args, out, capacity) -> bytes needed`.
type Pack = unsafe extern "C" fn(*const *mut c_void, *mut c_char, u64) -> u64;

/// A block of a packed argument buffer, aligned as `hipcpu::kMaxArgAlign`.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct ArgBlock([u8; 64]);

/// A loaded module and the functions handed out from it.
struct Module {
    library: libloading::Library,
    /// Boxed: each function's address is handed out as a `hipFunction_t`.
    #[allow(clippy::vec_box)]
    functions: Mutex<Vec<Box<Function>>>,
}

/// A kernel of a module.
struct Function {
    name: CString,
    entry: Entry,
    /// Absent from modules built before stream capture existed.
    pack: Option<Pack>,
}

/// The total length of the ELF image at `image` (section headers last, as
/// the host linker writes them), after checking the magic and the stamp.
///
/// # Safety
/// `image` must point at a code object (at least an ELF header).
unsafe fn image_len(image: *const u8) -> HipResult<usize> {
    // SAFETY: the header is 64 bytes, inside any ELF64 image.
    let header = unsafe { std::slice::from_raw_parts(image, 64) };
    let u16_at = |o: usize| u16::from_le_bytes([header[o], header[o + 1]]);
    if &header[..4] != b"\x7fELF" || header[4] != 2 || u16_at(E_MACHINE) != EM_AMDGPU {
        return Err(hipError_t::hipErrorInvalidImage);
    }
    let shoff = u64::from_le_bytes(header[0x28..0x30].try_into().unwrap_or_default());
    let table = u64::from(u16_at(0x3A)) * u64::from(u16_at(0x3C));
    let len = shoff
        .checked_add(table)
        .ok_or(hipError_t::hipErrorInvalidImage)?;
    usize::try_from(len).map_err(|_| hipError_t::hipErrorInvalidImage)
}

/// Writes `image` with the host machine restored to a fresh private file
/// and loads it.
fn load_shared_object(image: &[u8]) -> HipResult<libloading::Library> {
    let mut bytes = image.to_vec();
    bytes[E_MACHINE..E_MACHINE + 2].copy_from_slice(&EM_HOST.to_le_bytes());
    let (path, written) = {
        use std::io::Write;
        let (path, mut file) = create_private().map_err(|_| hipError_t::hipErrorInvalidImage)?;
        (path, file.write_all(&bytes))
    };
    let loaded = written
        .map_err(|_| hipError_t::hipErrorInvalidImage)
        // SAFETY: our own module: its initialisers only set up the
        // thread-local scheduler state.
        .and_then(|()| {
            unsafe { libloading::Library::new(&path) }.map_err(|e| {
                eprintln!("hip-on-cpu: loading a code object failed: {e}");
                hipError_t::hipErrorInvalidImage
            })
        });
    let _ = std::fs::remove_file(&path);
    loaded
}

/// A new file only this process writes, `hip-on-cpu-<pid>-<n>.so` in the
/// temporary folder: names a process of the same id left behind (one that
/// died while loading) are skipped.
fn create_private() -> std::io::Result<(std::path::PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    loop {
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("hip-on-cpu-{}-{n}.so", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o700)
            .open(&path)
        {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            opened => return opened.map(|file| (path, file)),
        }
    }
}

/// `hipModuleLoadData`: loads a code object of this platform.
pub(crate) unsafe fn hipModuleLoadData(
    module: *mut hipModule_t,
    image: *const c_void,
) -> HipResult {
    non_null(module, INVALID)?;
    non_null(image, INVALID)?;
    device()?;
    // SAFETY: the caller passes a code object.
    let len = unsafe { image_len(image.cast()) }?;
    // SAFETY: the image's own section table ends at `len`.
    let bytes = unsafe { std::slice::from_raw_parts(image.cast::<u8>(), len) };
    let library = load_shared_object(bytes)?;
    // SAFETY: every module of this platform defines the symbol as a `const int`.
    let abi = unsafe {
        library
            .get::<*const c_int>(ABI_SYMBOL.as_bytes())
            .map(|symbol| **symbol)
    }
    .map_err(|_| hipError_t::hipErrorInvalidImage)?;
    if abi != MODULE_ABI {
        eprintln!("hip-on-cpu: a code object of layout version {abi}, not {MODULE_ABI}, refused");
        return Err(hipError_t::hipErrorInvalidImage);
    }
    let handle = Box::into_raw(Box::new(Module {
        library,
        functions: Mutex::new(Vec::new()),
    }));
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(module, handle.cast(), INVALID) }
}

/// `hipModuleUnload`: frees the handle and its functions; the shared object
/// stays mapped, because its fault handler and thread-local scheduler state
/// outlive any one handle.
pub(crate) unsafe fn hipModuleUnload(module: hipModule_t) -> HipResult {
    non_null(module, INVALID_HANDLE)?;
    // SAFETY: the caller passes a module from hipModuleLoadData.
    let module = unsafe { Box::from_raw(module.cast::<Module>()) };
    std::mem::forget(module.library);
    Ok(())
}

/// `hipModuleGetFunction`: `hipErrorNotFound` for a name the module lacks.
pub(crate) unsafe fn hipModuleGetFunction(
    function: *mut hipFunction_t,
    module: hipModule_t,
    name: *const c_char,
) -> HipResult {
    non_null(function, INVALID)?;
    non_null(module, INVALID_HANDLE)?;
    non_null(name, INVALID)?;
    // SAFETY: the caller passes a live module and a C string.
    let (m, name) = unsafe { (&*module.cast::<Module>(), CStr::from_ptr(name)) };
    let symbol = [LAUNCH_PREFIX.as_bytes(), name.to_bytes()].concat();
    let symbol = symbol.as_slice();
    // SAFETY: launch entries have the `Entry` signature.
    let entry: Entry =
        *unsafe { m.library.get::<Entry>(symbol) }.map_err(|_| hipError_t::hipErrorNotFound)?;
    let pack_symbol = [PACK_PREFIX.as_bytes(), name.to_bytes()].concat();
    // SAFETY: pack entries have the `Pack` signature.
    let pack = unsafe { m.library.get::<Pack>(pack_symbol.as_slice()) }
        .ok()
        .map(|p| *p);
    let f = Box::new(Function {
        name: name.to_owned(),
        entry,
        pack,
    });
    let ptr: *const Function = &*f;
    m.functions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(f);
    // SAFETY: checked non-null; the function lives as long as its module.
    unsafe { write_out(function, ptr.cast_mut().cast(), INVALID) }
}

/// `HIP_LAUNCH_PARAM_BUFFER_POINTER`, `..._BUFFER_SIZE`, `..._END`.
const BUFFER_POINTER: usize = 1;
const BUFFER_SIZE: usize = 2;
const END: usize = 3;

/// The packed argument buffer and its size from HIP's `extra` array.
///
/// # Safety
/// `extra` must point at key/value pairs ending with `HIP_LAUNCH_PARAM_END`.
unsafe fn packed_arguments(extra: *mut *mut c_void) -> HipResult<(*const c_char, u64)> {
    let (mut buffer, mut size) = (None, None);
    for i in (0..16).step_by(2) {
        // SAFETY: within the caller's terminated array.
        let key = unsafe { extra.add(i).read() } as usize;
        if key == END {
            let (Some(b), Some(s)) = (buffer, size) else {
                return Err(INVALID);
            };
            return Ok((b, s));
        }
        // SAFETY: a key other than END is followed by its value.
        let value = unsafe { extra.add(i + 1).read() };
        match key {
            BUFFER_POINTER => buffer = Some(value.cast_const().cast()),
            // SAFETY: the size entry points at a size_t.
            BUFFER_SIZE => size = Some(unsafe { value.cast::<usize>().read() } as u64),
            _ => return Err(INVALID),
        }
    }
    Err(INVALID)
}

/// A job for a pool thread: one share of a launch.
struct Job {
    entry: Entry,
    launch: Launch,
    done: mpsc::Sender<Result<(), String>>,
}

// SAFETY: the pointers in `launch` stay valid until the launching thread
// has received every share's result, which it waits for.
unsafe impl Send for Job {}

/// Runs one share of a launch on the current thread.
fn run_share(entry: Entry, mut launch: Launch) -> Result<(), String> {
    let mut message = vec![0 as c_char; 1024];
    launch.error = message.as_mut_ptr();
    launch.error_len = message.len() as u64;
    let threads = launch.block.x as usize * launch.block.y as usize * launch.block.z as usize;
    let status = super::fibers::with_stacks(threads, |stacks, count| {
        launch.stacks = stacks;
        launch.stack_count = count;
        // SAFETY: the entry of a loaded module, with a launch whose pointers
        // are valid for the call (see `Job`; the stacks are this thread's).
        unsafe { entry(&launch) }
    })?;
    if status == 0 {
        return Ok(());
    }
    // SAFETY: the entry wrote a NUL-terminated message into `message`.
    let text = unsafe { CStr::from_ptr(message.as_ptr()) };
    Err(text.to_string_lossy().into_owned())
}

/// The pool of launch threads (beyond the launching thread itself).
fn pool() -> &'static Mutex<Vec<mpsc::Sender<Job>>> {
    static POOL: OnceLock<Mutex<Vec<mpsc::Sender<Job>>>> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = crate::parallel::threads();
        let senders = (1..threads)
            .filter_map(|i| {
                let (tx, rx) = mpsc::channel::<Job>();
                std::thread::Builder::new()
                    .name(format!("hip-on-cpu-{i}"))
                    .spawn(move || {
                        for job in rx {
                            let _ = job.done.send(run_share(job.entry, job.launch));
                        }
                    })
                    .ok()
                    .map(|_| tx)
            })
            .collect();
        Mutex::new(senders)
    })
}

/// Runs every block of `launch`, split over the pool and this thread:
/// share `i` of `n` runs blocks `i, i + n, ...`; the first error is returned.
fn run(entry: Entry, launch: Launch, blocks: u64) -> Result<(), String> {
    let senders = pool().lock().unwrap_or_else(|e| e.into_inner()).clone();
    let shares = (senders.len() as u64 + 1).min(blocks);
    let share = |first_block| Launch {
        first_block,
        block_step: shares,
        ..launch
    };
    let (done_tx, done_rx) = mpsc::channel();
    let mut here = vec![0];
    let mut sent = 0;
    for (first, tx) in (1..shares).zip(&senders) {
        let job = Job {
            entry,
            launch: share(first),
            done: done_tx.clone(),
        };
        match tx.send(job) {
            Ok(()) => sent += 1,
            Err(_) => here.push(first),
        }
    }
    let mut results: Vec<Result<(), String>> = here
        .into_iter()
        .map(|first| run_share(entry, share(first)))
        .collect();
    results.extend((0..sent).map(|_| {
        done_rx
            .recv()
            .unwrap_or_else(|_| Err("a launch thread stopped".into()))
    }));
    results.into_iter().collect()
}

/// Runs a launch of `entry` (the kernel `name`) over `blocks` blocks and
/// checks the buffers' guards; a failure is reported on stderr with the
/// kernel's name and returned as `hipErrorLaunchFailure`.
fn execute(entry: Entry, name: &CStr, launch: Launch, blocks: u64) -> HipResult {
    let outcome = run(entry, launch, blocks).and_then(|()| {
        check_guards().map_err(|damage| format!("kernel `{}`: {damage}", name.to_string_lossy()))
    });
    outcome.map_err(|message| {
        eprintln!("hip-on-cpu: launch failed: {message}");
        hipError_t::hipErrorLaunchFailure
    })
}

/// A launch recorded by a capture: the kernel, its dimensions and a packed
/// copy of its arguments.
struct Recorded {
    entry: Entry,
    name: CString,
    grid: Dim3,
    block: Dim3,
    shared_bytes: u32,
    args: Vec<ArgBlock>,
    args_size: u64,
}

// SAFETY: `Dim3` is plain data; the entry is a function of a module that
// stays loaded for the life of the process.
unsafe impl Send for Recorded {}
// SAFETY: as above; a replay only reads the record.
unsafe impl Sync for Recorded {}

impl Recorded {
    /// Runs the recorded launch with the recorded argument values.
    fn replay(&self) -> HipResult {
        let launch = Launch {
            grid: self.grid,
            block: self.block,
            shared_bytes: u64::from(self.shared_bytes),
            first_block: 0,
            block_step: 1,
            args: std::ptr::null_mut(),
            packed: self.args.as_ptr().cast(),
            packed_size: self.args_size,
            kernel: self.name.as_ptr(),
            error: std::ptr::null_mut(),
            error_len: 0,
            stacks: std::ptr::null(),
            stack_count: 0,
        };
        let blocks = u64::from(self.grid.x) * u64::from(self.grid.y) * u64::from(self.grid.z);
        execute(self.entry, &self.name, launch, blocks)
    }
}

/// A packed copy of a launch's arguments: the values `params` points at,
/// laid out by the kernel's pack entry, or the `extra` buffer's bytes.
///
/// # Safety
/// `params` must be null or point at the kernel's arguments; `packed` must
/// be valid for `packed_size` bytes when `params` is null.
unsafe fn copy_arguments(
    function: &Function,
    params: *mut *mut c_void,
    packed: *const c_char,
    packed_size: u64,
) -> HipResult<(Vec<ArgBlock>, u64)> {
    let block = size_of::<ArgBlock>();
    let blocks_for = |bytes: u64| usize::try_from(bytes).map(|b| b.div_ceil(block).max(1));
    if params.is_null() {
        let mut args = vec![ArgBlock([0; 64]); blocks_for(packed_size).map_err(|_| INVALID)?];
        let len = usize::try_from(packed_size).map_err(|_| INVALID)?;
        // SAFETY: `packed` holds `packed_size` bytes per the contract; the
        // destination has room for them.
        unsafe { std::ptr::copy_nonoverlapping(packed, args.as_mut_ptr().cast(), len) };
        return Ok((args, packed_size));
    }
    let Some(pack) = function.pack else {
        eprintln!(
            "hip-on-cpu: kernel `{}` comes from a module without pack entries (built before              stream capture was supported): its launch cannot be captured",
            function.name.to_string_lossy()
        );
        return Err(hipError_t::hipErrorStreamCaptureUnsupported);
    };
    // SAFETY: with no room, the entry only measures.
    let needed = unsafe { pack(params, std::ptr::null_mut(), 0) };
    if needed == u64::MAX {
        eprintln!(
            "hip-on-cpu: kernel `{}` has an argument aligned to more than 64 bytes: its launch \
             cannot be captured",
            function.name.to_string_lossy()
        );
        return Err(hipError_t::hipErrorStreamCaptureUnsupported);
    }
    let mut args = vec![ArgBlock([0; 64]); blocks_for(needed).map_err(|_| INVALID)?];
    let room = (args.len() * block) as u64;
    // SAFETY: `params` points at the kernel's arguments; `args` has room
    // for `room` bytes, aligned as the entry requires.
    let written = unsafe { pack(params, args.as_mut_ptr().cast(), room) };
    if written != needed || needed > room {
        return Err(INVALID);
    }
    Ok((args, needed))
}

/// `hipModuleLaunchKernel`: runs the kernel to completion. A failure (a
/// divergent or deadlocked block, damaged buffer guards) is reported on
/// stderr with the kernel's name and returned as `hipErrorLaunchFailure`.
/// On a capturing stream the launch is checked and recorded, with a copy
/// of its argument values.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn hipModuleLaunchKernel(
    f: hipFunction_t,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_bytes: c_uint,
    stream: hipStream_t,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> HipResult {
    non_null(f, INVALID_HANDLE)?;
    device()?;
    // SAFETY: the caller passes a function from hipModuleGetFunction.
    let function = unsafe { &*f.cast::<Function>() };
    let threads = u64::from(block_x) * u64::from(block_y) * u64::from(block_z);
    let blocks = u64::from(grid_x) * u64::from(grid_y) * u64::from(grid_z);
    if threads == 0
        || threads > 1024
        || blocks == 0
        || grid_y > 65_535
        || grid_z > 65_535
        || shared_bytes > 65_536
    {
        return Err(INVALID);
    }
    let (packed, packed_size) = if params.is_null() {
        non_null(extra, INVALID)?;
        // SAFETY: the caller's terminated `extra` array.
        unsafe { packed_arguments(extra) }?
    } else {
        (std::ptr::null(), 0)
    };
    let grid = Dim3 {
        x: grid_x,
        y: grid_y,
        z: grid_z,
    };
    let block = Dim3 {
        x: block_x,
        y: block_y,
        z: block_z,
    };
    let recorded = record(stream, || {
        // SAFETY: the caller's arguments, as for a launch.
        let (args, args_size) = unsafe { copy_arguments(function, params, packed, packed_size) }?;
        let launch = Recorded {
            entry: function.entry,
            name: function.name.clone(),
            grid,
            block,
            shared_bytes,
            args,
            args_size,
        };
        Ok(move || launch.replay())
    })?;
    if recorded {
        return Ok(());
    }
    let launch = Launch {
        grid,
        block,
        shared_bytes: u64::from(shared_bytes),
        first_block: 0,
        block_step: 1,
        args: params,
        packed,
        packed_size,
        kernel: function.name.as_ptr(),
        error: std::ptr::null_mut(),
        error_len: 0,
        stacks: std::ptr::null(),
        stack_count: 0,
    };
    execute(function.entry, &function.name, launch, blocks)
}

/// `hipFuncGetAttribute`: the limits every kernel of this platform has.
pub(crate) unsafe fn hipFuncGetAttribute(
    value: *mut c_int,
    attrib: Attr,
    f: hipFunction_t,
) -> HipResult {
    non_null(value, INVALID)?;
    non_null(f, INVALID_HANDLE)?;
    let v = match attrib {
        Attr::HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK => 1024,
        Attr::HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
        | Attr::HIP_FUNC_ATTRIBUTE_CONST_SIZE_BYTES
        | Attr::HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
        | Attr::HIP_FUNC_ATTRIBUTE_NUM_REGS => 0,
        _ => return Err(INVALID),
    };
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(value, v, INVALID) }
}
