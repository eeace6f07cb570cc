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

/// Primary contexts retained so far, by HIP device ordinal (pointers as `usize`
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

/// Environment variable listing the CUDA ordinals HIP may see, as ROCm's
/// runtime reads it.
pub(crate) const VISIBLE_DEVICES_VAR: &str = "HIP_VISIBLE_DEVICES";

/// The CUDA ordinals of the visible HIP devices, in HIP ordinal order.
///
/// Without `HIP_VISIBLE_DEVICES` every CUDA device is visible. With it,
/// the listed ordinals are visible in the listed order, renumbered from 0;
/// as in ROCm and CUDA, the list ends at its first entry that is not a
/// device (not a number, out of range, or repeated).
fn visible_devices() -> HipResult<&'static [i32]> {
    static VISIBLE: OnceLock<HipResult<Vec<i32>>> = OnceLock::new();
    VISIBLE
        .get_or_init(|| {
            driver()?;
            let mut count = 0;
            // SAFETY: `count` is a valid out-pointer.
            cu(unsafe { cu_sys::cuDeviceGetCount(&mut count) })?;
            let list = std::env::var(VISIBLE_DEVICES_VAR).ok();
            Ok(visible_from(list.as_deref(), count))
        })
        .as_ref()
        .map(Vec::as_slice)
        .map_err(|e| *e)
}

/// [`visible_devices`] for the variable's value `list` and `count` devices.
fn visible_from(list: Option<&str>, count: i32) -> Vec<i32> {
    let Some(list) = list else {
        return (0..count).collect();
    };
    let mut visible = Vec::new();
    for entry in list.split(',') {
        match entry.trim().parse::<i32>() {
            Ok(o) if (0..count).contains(&o) && !visible.contains(&o) => visible.push(o),
            _ => break,
        }
    }
    visible
}

/// Number of visible devices (0 when the driver cannot be initialised).
pub(crate) fn device_count() -> HipResult<i32> {
    Ok(visible_devices()?.len() as i32)
}

/// The CUDA ordinal of a HIP ordinal, or `hipErrorInvalidDevice`.
pub(crate) fn cuda_ordinal(ordinal: i32) -> HipResult<i32> {
    let visible = visible_devices()?;
    if visible.is_empty() {
        return Err(hipError_t::hipErrorNoDevice);
    }
    usize::try_from(ordinal)
        .ok()
        .and_then(|i| visible.get(i).copied())
        .ok_or(hipError_t::hipErrorInvalidDevice)
}

/// The HIP ordinal of a visible CUDA ordinal.
pub(crate) fn hip_ordinal(cuda: i32) -> HipResult<i32> {
    visible_devices()?
        .iter()
        .position(|&o| o == cuda)
        .map(|i| i as i32)
        .ok_or(hipError_t::hipErrorInvalidDevice)
}

/// The CUDA device handle for a HIP ordinal, or `hipErrorInvalidDevice`.
pub(crate) fn cu_device(ordinal: i32) -> HipResult<cu_sys::CUdevice> {
    let cuda = cuda_ordinal(ordinal)?;
    let mut device = 0;
    // SAFETY: `device` is a valid out-pointer and the ordinal is in range.
    cu(unsafe { cu_sys::cuDeviceGet(&mut device, cuda) })?;
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
pub(crate) fn primary_context(ordinal: i32) -> HipResult<cu_sys::CUcontext> {
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

#[cfg(test)]
mod tests {
    use super::visible_from;

    #[test]
    fn visible_devices_follow_rocm_rules() {
        assert_eq!(visible_from(None, 3), [0, 1, 2]);
        assert_eq!(visible_from(Some("1"), 3), [1]);
        assert_eq!(visible_from(Some("2, 0"), 3), [2, 0]);
        assert_eq!(visible_from(Some("0,7,1"), 3), [0]);
        assert_eq!(visible_from(Some("1,1,0"), 3), [1]);
        assert_eq!(visible_from(Some("x,0"), 3), Vec::<i32>::new());
        assert_eq!(visible_from(Some(""), 3), Vec::<i32>::new());
    }
}
