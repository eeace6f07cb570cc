//! Allocating and freeing [`DeviceBuffer`]s.

use std::ffi::c_void;
use std::marker::PhantomData;

use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result, discard_drop_error, hip_check};
use crate::repr::{DeviceRepr, ValidAsZeroBits};
use crate::stream::Stream;

impl Stream {
    /// Allocates `len` elements without initialising them.
    ///
    /// Uses `hipMallocAsync` on this stream when the device supports memory
    /// pools (falling back to `hipMalloc` when the runtime lacks the symbol),
    /// `hipMalloc` otherwise. A request the device cannot satisfy returns
    /// [`crate::HipError::OutOfMemory`] and leaves the device usable.
    ///
    /// # Safety
    /// The contents are unspecified until written; reading them (copying
    /// them back, or a kernel reading them) yields arbitrary values.
    pub unsafe fn alloc<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let elem = std::mem::size_of::<T>();
        let dtype = std::any::type_name::<T>();
        let bytes = len.checked_mul(elem).ok_or_else(|| {
            Error::invalid(
                "alloc",
                format_args!("{len} elements of {dtype} ({elem} bytes each) overflow usize"),
            )
        })?;
        let mut buffer = DeviceBuffer {
            ptr: std::ptr::null_mut(),
            len,
            stream: self.clone(),
            stream_ordered: false,
            _marker: PhantomData,
        };
        if bytes == 0 {
            return Ok(buffer);
        }
        self.bind()?;
        let api = self.api();
        let mut ptr: *mut c_void = std::ptr::null_mut();
        if self.stream_ordered_alloc() {
            // SAFETY: valid out-pointer and live stream.
            match unsafe { api.hipMallocAsync(&mut ptr, bytes, self.raw()) } {
                Ok(status) => {
                    hip_check(
                        Ok(status),
                        format_args!("hipMallocAsync of {bytes} bytes ({len} x {dtype})"),
                    )?;
                    buffer.stream_ordered = true;
                }
                Err(_missing) => ptr = std::ptr::null_mut(),
            }
        }
        if !buffer.stream_ordered {
            // SAFETY: valid out-pointer.
            let status = unsafe { api.hipMalloc(&mut ptr, bytes) };
            hip_check(
                status,
                format_args!("hipMalloc of {bytes} bytes ({len} x {dtype})"),
            )?;
        }
        buffer.ptr = ptr;
        Ok(buffer)
    }

    /// Allocates `len` elements set to zero (queued on this stream).
    pub fn alloc_zeros<T: ValidAsZeroBits>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        // SAFETY: the buffer is zero-filled before it is handed out, and
        // all-zero bytes are a valid `T`.
        let mut buffer = unsafe { self.alloc::<T>(len) }?;
        self.memset_zeros(&mut buffer)?;
        Ok(buffer)
    }
}

impl<T: DeviceRepr> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if self.ptr.is_null() {
            return;
        }
        // Drop cannot return errors; see `discard_drop_error`. If the device
        // cannot even be selected the memory is leaked, which is safe.
        if self.stream.bind().is_err() {
            return;
        }
        let api = self.stream.api();
        let status = if self.stream_ordered {
            // SAFETY: allocated by hipMallocAsync; freed once, in order after
            // all work queued on the owning stream (other streams that used
            // the buffer were joined into it by the operations of this crate).
            unsafe { api.hipFreeAsync(self.ptr, self.stream.raw()) }
        } else {
            // SAFETY: allocated by hipMalloc and freed once; hipFree waits
            // for the device, so no queued work still uses the memory.
            unsafe { api.hipFree(self.ptr) }
        };
        discard_drop_error(api, status);
    }
}
