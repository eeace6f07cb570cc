//! Peer access and copies between devices: CUDA's peer API on the primary
//! contexts of the two devices.

use std::ffi::{c_int, c_uint, c_void};

use cudarc::driver::sys as cu_sys;
use hip_sys::{hipError_t, hipStream_t};

use super::context::{cu_device, current_device, ensure_current, primary_context};
use super::error::{HipResult, cu};
use super::memory::cu_stream;
use crate::ffi::{non_null, write_out};

/// `hipDeviceCanAccessPeer`: whether `device` can map `peer`'s memory
/// (false for a device and itself, as in HIP).
pub(crate) unsafe fn hipDeviceCanAccessPeer(
    can_access: *mut c_int,
    device: c_int,
    peer: c_int,
) -> HipResult {
    non_null(can_access, hipError_t::hipErrorInvalidValue)?;
    let (dev, peer_dev) = (cu_device(device)?, cu_device(peer)?);
    let mut can = 0;
    if device != peer {
        // SAFETY: valid out-pointer and device handles.
        cu(unsafe { cu_sys::cuDeviceCanAccessPeer(&mut can, dev, peer_dev) })?;
    }
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(can_access, can, hipError_t::hipErrorInvalidValue) }
}

/// `hipDeviceEnablePeerAccess`: lets the current device access `peer`'s
/// memory. Flags must be 0 in both APIs.
pub(crate) unsafe fn hipDeviceEnablePeerAccess(peer: c_int, flags: c_uint) -> HipResult {
    if peer == current_device() {
        return Err(hipError_t::hipErrorInvalidDevice);
    }
    let peer_context = primary_context(peer)?;
    ensure_current()?;
    // SAFETY: `peer_context` is a retained primary context; the current
    // device's context is current on this thread.
    cu(unsafe { cu_sys::cuCtxEnablePeerAccess(peer_context, flags) })
}

/// `hipMemcpyPeerAsync`: copies `bytes` from `src` on `src_device` to `dst`
/// on `dst_device`, queued on `stream`.
pub(crate) unsafe fn hipMemcpyPeerAsync(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    bytes: usize,
    stream: hipStream_t,
) -> HipResult {
    let (dst_context, src_context) = (primary_context(dst_device)?, primary_context(src_device)?);
    if bytes == 0 {
        return Ok(());
    }
    non_null(dst, hipError_t::hipErrorInvalidValue)?;
    non_null(src, hipError_t::hipErrorInvalidValue)?;
    ensure_current()?;
    // SAFETY: the caller guarantees both device ranges; the driver checks
    // that each address belongs to its context.
    cu(unsafe {
        cu_sys::cuMemcpyPeerAsync(
            dst as usize as cu_sys::CUdeviceptr,
            dst_context,
            src as usize as cu_sys::CUdeviceptr,
            src_context,
            bytes,
            cu_stream(stream),
        )
    })
}
