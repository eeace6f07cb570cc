//! HIP's implicit device model on CUDA's explicit contexts.
//!
//! HIP has a per-thread current device (0 until `hipSetDevice`) and no
//! contexts. CUDA work needs a current context, so each device's primary
//! context is retained once per process (never released: the shim lives until
//! the process exits) and made current on the calling thread, lazily, by
//! [`ensure_current`] at the start of every call that touches the device.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys as cu_sys;
use hip_sys::hipError_t;

use super::error::{HipResult, cu};

thread_local! {
    /// This thread's current HIP device ordinal.
    static CURRENT_DEVICE: Cell<i32> = const { Cell::new(0) };
    /// The last (ordinal, primary context) this thread looked up, so that the
    /// common case does not take the process-wide lock.
    static CONTEXT_CACHE: Cell<Option<(i32, usize)>> = const { Cell::new(None) };
}

/// Primary contexts retained so far, by device ordinal (pointers as `usize`
/// because `CUcontext` is not `Send`).
static PRIMARY_CONTEXTS: Mutex<Option<HashMap<i32, usize>>> = Mutex::new(None);

/// Initialises the CUDA driver once per process. A machine without a
/// loadable `libcuda` reports `hipErrorNoDevice`, like HIP without a GPU.
pub(crate) fn driver() -> HipResult {
    static INIT: OnceLock<HipResult> = OnceLock::new();
    *INIT.get_or_init(|| {
        // SAFETY: probing for the library has no preconditions.
        if !unsafe { cu_sys::is_culib_present() } {
            return Err(hipError_t::hipErrorNoDevice);
        }
        // SAFETY: cuInit takes flags only; 0 is the only valid value.
        cu(unsafe { cu_sys::cuInit(0) })
    })
}

/// Number of CUDA devices (0 when the driver cannot be initialised).
pub(crate) fn device_count() -> HipResult<i32> {
    driver()?;
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer.
    cu(unsafe { cu_sys::cuDeviceGetCount(&mut count) })?;
    Ok(count)
}

/// The CUDA device handle for a HIP ordinal, or `hipErrorInvalidDevice`.
pub(crate) fn cu_device(ordinal: i32) -> HipResult<cu_sys::CUdevice> {
    let count = device_count()?;
    if count == 0 {
        return Err(hipError_t::hipErrorNoDevice);
    }
    if !(0..count).contains(&ordinal) {
        return Err(hipError_t::hipErrorInvalidDevice);
    }
    let mut device = 0;
    // SAFETY: `device` is a valid out-pointer and the ordinal is in range.
    cu(unsafe { cu_sys::cuDeviceGet(&mut device, ordinal) })?;
    Ok(device)
}

/// This thread's current device ordinal.
pub(crate) fn current_device() -> i32 {
    CURRENT_DEVICE.with(Cell::get)
}

/// Makes `ordinal` this thread's current device (after validating it) and
/// binds its primary context.
pub(crate) fn set_current_device(ordinal: i32) -> HipResult {
    cu_device(ordinal)?;
    CURRENT_DEVICE.with(|d| d.set(ordinal));
    ensure_current()
}

/// The primary context of `ordinal`, retained on first use.
fn primary_context(ordinal: i32) -> HipResult<cu_sys::CUcontext> {
    let mut guard = PRIMARY_CONTEXTS
        .lock()
        .map_err(|_| hipError_t::hipErrorUnknown)?;
    let contexts = guard.get_or_insert_with(HashMap::new);
    if let Some(&ctx) = contexts.get(&ordinal) {
        return Ok(ctx as cu_sys::CUcontext);
    }
    let device = cu_device(ordinal)?;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: `ctx` is a valid out-pointer and `device` a valid handle.
    cu(unsafe { cu_sys::cuDevicePrimaryCtxRetain(&mut ctx, device) })?;
    contexts.insert(ordinal, ctx as usize);
    Ok(ctx)
}

/// Makes the primary context of this thread's current device current on
/// this thread (a no-op when it already is).
pub(crate) fn ensure_current() -> HipResult {
    driver()?;
    let ordinal = current_device();
    let wanted = match CONTEXT_CACHE.with(Cell::get) {
        Some((cached, ctx)) if cached == ordinal => ctx as cu_sys::CUcontext,
        _ => {
            let ctx = primary_context(ordinal)?;
            CONTEXT_CACHE.with(|c| c.set(Some((ordinal, ctx as usize))));
            ctx
        }
    };
    let mut bound = std::ptr::null_mut();
    // SAFETY: `bound` is a valid out-pointer.
    cu(unsafe { cu_sys::cuCtxGetCurrent(&mut bound) })?;
    if bound != wanted {
        // SAFETY: `wanted` is a retained primary context.
        cu(unsafe { cu_sys::cuCtxSetCurrent(wanted) })?;
    }
    Ok(())
}
