//! Allocating and freeing [`DeviceBuffer`]s.

use std::ffi::c_void;
use std::marker::PhantomData;

use hip_sys::hipError_t;

use crate::alloc_cache;
use crate::buffer::{DeviceBuffer, Release};
use crate::error::{Error, Result};
use crate::graph::GraphMemory;
use crate::repr::{DeviceRepr, ValidAsZeroBits};
use crate::result::{Status, clear_hip_last_error, out_ptr};
use crate::stream::Stream;

impl Stream {
    /// Allocates `len` elements without initialising them.
    ///
    /// Uses `hipMallocAsync` on this stream when the device supports memory
    /// pools (falling back to `hipMalloc` when the runtime lacks the symbol),
    /// `hipMalloc` otherwise; small requests reuse memory from the stream's
    /// allocation cache when it is on ([`Stream::set_allocation_cache_limit`]).
    /// A request the device cannot satisfy returns
    /// [`crate::HipError::OutOfMemory`] and leaves the device usable; before
    /// that, the memory this process keeps for reuse is given back and the
    /// request retried (see `malloc_async`).
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
            release: Release::Free,
            _marker: PhantomData,
        };
        if bytes == 0 {
            return Ok(buffer);
        }
        self.bind()?;
        let what = || format!("{bytes} bytes ({len} x {dtype})");
        if let Some(memory) = self.capture_memory() {
            let block = GraphMemory::block_bytes(bytes).ok_or_else(|| {
                Error::invalid("alloc", format_args!("{} overflows usize", what()))
            })?;
            buffer.ptr = memory.take(block, what())?;
            buffer.release = Release::Graph { memory, block };
            return Ok(buffer);
        }
        if self.stream_ordered_alloc() {
            let mut size = bytes;
            buffer.release = Release::FreeAsync;
            if let Some((class, cached)) = self.allocation_cache().take(bytes) {
                buffer.release = Release::Cache(class);
                if let Some(ptr) = cached {
                    buffer.ptr = ptr;
                    return Ok(buffer);
                }
                size = alloc_cache::class_bytes(class);
            }
            match self.malloc_async(size) {
                Ok(ptr) => {
                    buffer.ptr = ptr;
                    return Ok(buffer);
                }
                Err(AsyncAlloc::Missing) => buffer.release = Release::Free,
                Err(AsyncAlloc::Failed(status)) => {
                    return Err(status.error(format_args!("hipMallocAsync of {}", what())));
                }
            }
        }
        buffer.ptr = out_ptr(format_args!("hipMalloc of {}", what()), |ptr| {
            // SAFETY: valid out-pointer.
            unsafe { self.api().hipMalloc(ptr, bytes) }
        })?;
        Ok(buffer)
    }

    /// `hipMallocAsync` of `bytes` on this stream. When the device is out of
    /// memory, what this process keeps for reuse is given back, each step
    /// followed by one retry: the stream's allocation cache, then the
    /// stream-ordered frees the device's memory pool keeps (a pool may keep
    /// all of them: `Device::set_memory_pool_release_threshold`), which
    /// waits for the device first, as PyTorch's allocator empties its cache
    /// before it reports an allocation failure.
    fn malloc_async(&self, bytes: usize) -> std::result::Result<*mut c_void, AsyncAlloc> {
        let api = self.api();
        let attempt = || {
            let mut ptr: *mut c_void = std::ptr::null_mut();
            // SAFETY: valid out-pointer and live stream.
            match unsafe { api.hipMallocAsync(&mut ptr, bytes, self.raw()) } {
                Ok(hipError_t::hipSuccess) => Ok(ptr),
                Ok(status) => Err(AsyncAlloc::Failed(status)),
                Err(_missing) => Err(AsyncAlloc::Missing),
            }
        };
        let out_of_memory = |result: &std::result::Result<*mut c_void, AsyncAlloc>| {
            matches!(
                result,
                Err(AsyncAlloc::Failed(hipError_t::hipErrorOutOfMemory))
            )
        };
        let mut result = attempt();
        // Each failure is handled here: it must not stay in HIP's
        // last-error slot.
        if out_of_memory(&result) && self.allocation_cache().held() > 0 {
            clear_hip_last_error();
            self.free_cached(self.allocation_cache().drain());
            result = attempt();
        }
        if out_of_memory(&result) {
            clear_hip_last_error();
            let trimmed = self.device().trim_memory_pool();
            clear_hip_last_error();
            if trimmed.is_ok() {
                result = attempt();
            }
        }
        result
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

/// Why a stream-ordered allocation did not happen.
enum AsyncAlloc {
    /// The runtime lacks `hipMallocAsync`.
    Missing,
    /// HIP returned this status.
    Failed(hipError_t),
}

impl<T: DeviceRepr> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if self.ptr.is_null() {
            return;
        }
        if let Release::Graph { memory, block } = &self.release {
            memory.give_back(self.ptr, *block);
            return;
        }
        if let Some(capture) = self.stream.capture_memory() {
            // Recorded work may still use it: kept until the graph is gone.
            let release = std::mem::replace(&mut self.release, Release::Free);
            capture.defer(self.ptr, self.stream.clone(), release);
            return;
        }
        if let Release::Cache(class) = self.release {
            match self.stream.allocation_cache().put(class, self.ptr) {
                Ok(()) => return,
                Err(_full) => self.release = Release::FreeAsync,
            }
        }
        let (ptr, stream) = (self.ptr, self.stream.raw());
        let free_async = !matches!(self.release, Release::Free);
        self.stream.device().release(|api| {
            if free_async {
                // SAFETY: allocated by hipMallocAsync; freed once, in order
                // after all work queued on the owning stream (other streams
                // that used the buffer were joined into it by the operations
                // of this crate).
                unsafe { api.hipFreeAsync(ptr, stream) }
            } else {
                // SAFETY: allocated by hipMalloc and freed once; hipFree
                // waits for the device, so no queued work still uses the
                // memory.
                unsafe { api.hipFree(ptr) }
            }
        });
    }
}
