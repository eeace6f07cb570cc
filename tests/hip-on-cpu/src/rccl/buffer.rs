//! The device memory RCCL operations read and write: checked when an
//! operation is issued, accessed when it runs (device memory is host
//! memory on this platform).

use super::comm::Comm;
use super::dtype::DataType;
use super::status::{Failure, NcclResult};
use crate::hip::memory::device_holding;

/// Checks that `elems` elements of `dtype` at `ptr` (the operation's
/// argument `what`) lie inside one buffer of `comm`'s device, as NCCL's
/// pointer checks require; returns their length in bytes. An empty range
/// is not checked.
pub(crate) fn check(
    comm: &Comm,
    what: &str,
    ptr: usize,
    elems: usize,
    dtype: DataType,
) -> NcclResult<usize> {
    let bytes = elems
        .checked_mul(dtype.size())
        .ok_or_else(|| Failure::argument(format_args!("{what}: {elems} elements overflow")))?;
    if bytes == 0 {
        return Ok(0);
    }
    if ptr == 0 {
        return Err(Failure::argument(format_args!(
            "{what} is null with {elems} elements"
        )));
    }
    let device = comm.device();
    if device_holding(ptr, bytes) != Some(device) {
        return Err(Failure::argument(format_args!(
            "{what} ({bytes} bytes at {ptr:#x}) does not lie inside one buffer of device {device}"
        )));
    }
    Ok(bytes)
}

/// A copy of `len` bytes at `ptr`.
///
/// # Safety
/// `[ptr, ptr + len)` must be readable (a range [`check`]ed at issue,
/// whose buffer the issuing thread keeps alive until the operation is done)
/// and not written concurrently.
pub(crate) unsafe fn read(ptr: usize, len: usize) -> Vec<u8> {
    if len == 0 {
        return Vec::new();
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }.to_vec()
}

/// Writes `data` to `ptr`.
///
/// # Safety
/// `[ptr, ptr + data.len())` must be writable (as for [`read`]) and not
/// accessed concurrently.
pub(crate) unsafe fn write(ptr: usize, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    // SAFETY: per the contract; `data` is the caller's own copy, so the
    // ranges do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr as *mut u8, data.len()) };
}
