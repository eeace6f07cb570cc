//! Typed device memory: the owned [`DeviceBuffer`], borrowed views, and the
//! [`DevicePtr`]/[`DevicePtrMut`] traits that copies and launches accept.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use hip_sys::hipDeviceptr_t;

use crate::error::{Error, Result};
use crate::graph::GraphMemory;
use crate::launch::KernelArg;
use crate::repr::DeviceRepr;
use crate::stream::Stream;

/// Read access to `len()` elements of `T` in device memory.
///
/// Copies and fills compute the byte count themselves from `len()` and the
/// size of `T` (with overflow checks); nothing else of an implementation is
/// trusted for sizes, and there is no byte count to override:
///
/// ```compile_fail,E0407
/// use hip_safe::{DeviceBuffer, DevicePtr, Stream};
/// struct Claims(DeviceBuffer<f32>);
/// // SAFETY: pointer, length and stream of a live buffer.
/// unsafe impl DevicePtr<f32> for Claims {
///     fn device_ptr(&self) -> *mut std::ffi::c_void { self.0.device_ptr() }
///     fn len(&self) -> usize { self.0.len() }
///     fn stream(&self) -> &Stream { self.0.stream() }
///     fn num_bytes(&self) -> usize { 1 << 40 }
/// }
/// ```
///
/// # Safety
/// `device_ptr()` must point to memory on `stream().device()` that holds at
/// least `len()` initialised-or-device-written elements of `T` and stays
/// allocated for as long as `self` is borrowed.
pub unsafe trait DevicePtr<T: DeviceRepr> {
    /// The device address of the first element.
    fn device_ptr(&self) -> hipDeviceptr_t;
    /// The number of elements.
    fn len(&self) -> usize;
    /// The stream that owns the memory (frees it, orders its uses).
    fn stream(&self) -> &Stream;
    /// Whether there are no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Write access to device memory, granted through `&mut`.
///
/// # Safety
/// As for [`DevicePtr`]; in addition, nothing else may access the memory
/// while `self` is mutably borrowed.
pub unsafe trait DevicePtrMut<T: DeviceRepr>: DevicePtr<T> {
    /// The device address of the first element, for writing.
    fn device_ptr_mut(&mut self) -> hipDeviceptr_t;
}

/// An owned, typed allocation of `len` elements on one device.
///
/// Allocated in stream order (`hipMallocAsync`) when the device supports
/// memory pools, with `hipMalloc` otherwise; freed the same way on drop, on
/// the stream that allocated it, or kept for reuse by that stream's
/// allocation cache (see [`Stream::set_allocation_cache_limit`]). Dropping
/// never panics and never leaves an error behind for later calls.
///
/// ```no_run
/// let stream = hip_safe::Device::new(0)?.new_stream()?;
/// let mut buf = stream.alloc_zeros::<f32>(1024)?;
/// let mut head = buf.slice_mut(0..16)?;
/// stream.memcpy_htod(&[1.0f32; 16], &mut head)?;
/// assert_eq!(stream.clone_dtoh(&buf.slice(0..2)?)?, vec![1.0, 1.0]);
/// # Ok::<(), hip_safe::Error>(())
/// ```
pub struct DeviceBuffer<T: DeviceRepr> {
    pub(crate) ptr: hipDeviceptr_t,
    pub(crate) len: usize,
    pub(crate) stream: Stream,
    /// How the memory goes back on drop.
    pub(crate) release: Release,
    pub(crate) _marker: PhantomData<T>,
}

/// How a [`DeviceBuffer`]'s memory goes back when it is dropped.
pub(crate) enum Release {
    /// `hipFree` (allocated with `hipMalloc`).
    Free,
    /// `hipFreeAsync` on the owning stream (allocated with `hipMallocAsync`).
    FreeAsync,
    /// To the owning stream's allocation cache, in this size class
    /// (allocated with `hipMallocAsync` at the class size); freed with
    /// `hipFreeAsync` when the cache is full or off.
    Cache(u8),
    /// To the pool of the graph captured while it was allocated, as a
    /// block of `block` bytes (see [`crate::graph`]).
    Graph {
        memory: Arc<GraphMemory>,
        block: usize,
    },
}

// SAFETY: the buffer uniquely owns its allocation; device memory is not tied
// to a host thread, `T: DeviceRepr` is plain `Send + Sync` data, writes need
// `&mut`, and device-side accesses are ordered by streams.
unsafe impl<T: DeviceRepr> Send for DeviceBuffer<T> {}
// SAFETY: `&DeviceBuffer` only allows reads (copies out, read views).
unsafe impl<T: DeviceRepr> Sync for DeviceBuffer<T> {}

/// A borrowed, read-only range of a device buffer (like `&[T]`).
#[derive(Clone, Copy)]
pub struct DeviceView<'a, T: DeviceRepr> {
    ptr: hipDeviceptr_t,
    len: usize,
    stream: &'a Stream,
    _marker: PhantomData<&'a [T]>,
}

// SAFETY: behaves like `&[T]` with `T: Sync`.
unsafe impl<T: DeviceRepr> Send for DeviceView<'_, T> {}
// SAFETY: behaves like `&[T]` with `T: Sync`.
unsafe impl<T: DeviceRepr> Sync for DeviceView<'_, T> {}

/// A borrowed, writable range of a device buffer (like `&mut [T]`).
pub struct DeviceViewMut<'a, T: DeviceRepr> {
    ptr: hipDeviceptr_t,
    len: usize,
    stream: &'a Stream,
    _marker: PhantomData<&'a mut [T]>,
}

// SAFETY: behaves like `&mut [T]` with `T: Send`.
unsafe impl<T: DeviceRepr> Send for DeviceViewMut<'_, T> {}
// SAFETY: shared access to a `DeviceViewMut` only reads.
unsafe impl<T: DeviceRepr> Sync for DeviceViewMut<'_, T> {}

macro_rules! impl_device_ptr {
    ($ty:ident $(<$lt:lifetime>)?) => {
        // SAFETY: the pointer and length describe memory owned by (or
        // borrowed from) a live `DeviceBuffer` on `stream`'s device.
        unsafe impl<$($lt,)? T: DeviceRepr> DevicePtr<T> for $ty<$($lt,)? T> {
            fn device_ptr(&self) -> hipDeviceptr_t {
                self.ptr
            }
            fn len(&self) -> usize {
                self.len
            }
            fn stream(&self) -> &Stream {
                &self.stream
            }
        }

        // SAFETY: the parameter is the address of the stored device pointer,
        // which kernels receive by value as `T*`.
        unsafe impl<$($lt,)? T: DeviceRepr> KernelArg for $ty<$($lt,)? T> {
            fn kernel_param(&self) -> *mut c_void {
                std::ptr::from_ref(&self.ptr).cast_mut().cast()
            }
            fn owning_stream(&self) -> Option<&Stream> {
                Some(&self.stream)
            }
        }

        impl<$($lt,)? T: DeviceRepr> fmt::Debug for $ty<$($lt,)? T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("ptr", &self.ptr)
                    .field("len", &self.len)
                    .field("dtype", &std::any::type_name::<T>())
                    .finish()
            }
        }

        impl<$($lt,)? T: DeviceRepr> $ty<$($lt,)? T> {
            /// The number of elements.
            pub fn len(&self) -> usize {
                self.len
            }

            /// Whether there are no elements.
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }

            /// The size in bytes (exact: the allocation's size fits in
            /// `usize`, and views lie inside an allocation).
            pub fn num_bytes(&self) -> usize {
                self.len.saturating_mul(std::mem::size_of::<T>())
            }

            /// The stream that owns the memory.
            pub fn stream(&self) -> &Stream {
                &self.stream
            }

            /// A read-only view of `range`, or `None` when it is out of bounds.
            pub fn try_slice(&self, range: impl RangeBounds<usize>) -> Option<DeviceView<'_, T>> {
                let (ptr, len) = sub_range::<T>(self.ptr, self.len, &range)?;
                Some(DeviceView::from_raw(ptr, len, &self.stream))
            }

            /// A read-only view of `range`; an error naming the bounds when it
            /// is out of range.
            pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceView<'_, T>> {
                let bounds = bounds_of(&range);
                self.try_slice(range)
                    .ok_or_else(|| out_of_range(bounds, self.len))
            }
        }
    };
}

macro_rules! impl_device_ptr_mut {
    ($ty:ident $(<$lt:lifetime>)?) => {
        // SAFETY: mutable access is only handed out through `&mut self`.
        unsafe impl<$($lt,)? T: DeviceRepr> DevicePtrMut<T> for $ty<$($lt,)? T> {
            fn device_ptr_mut(&mut self) -> hipDeviceptr_t {
                self.ptr
            }
        }

        impl<$($lt,)? T: DeviceRepr> $ty<$($lt,)? T> {
            /// A writable view of `range`, or `None` when it is out of bounds.
            pub fn try_slice_mut(
                &mut self,
                range: impl RangeBounds<usize>,
            ) -> Option<DeviceViewMut<'_, T>> {
                let (ptr, len) = sub_range::<T>(self.ptr, self.len, &range)?;
                Some(DeviceViewMut::from_raw(ptr, len, &self.stream))
            }

            /// A writable view of `range`; an error naming the bounds when it
            /// is out of range.
            pub fn slice_mut(
                &mut self,
                range: impl RangeBounds<usize>,
            ) -> Result<DeviceViewMut<'_, T>> {
                let bounds = bounds_of(&range);
                let len = self.len;
                self.try_slice_mut(range)
                    .ok_or_else(|| out_of_range(bounds, len))
            }
        }
    };
}

impl_device_ptr!(DeviceBuffer);
impl_device_ptr!(DeviceView<'a>);
impl_device_ptr!(DeviceViewMut<'a>);
impl_device_ptr_mut!(DeviceBuffer);
impl_device_ptr_mut!(DeviceViewMut<'a>);

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// The whole buffer as a read-only view.
    pub fn as_view(&self) -> DeviceView<'_, T> {
        DeviceView::from_raw(self.ptr, self.len, &self.stream)
    }

    /// The whole buffer as a writable view.
    pub fn as_view_mut(&mut self) -> DeviceViewMut<'_, T> {
        DeviceViewMut::from_raw(self.ptr, self.len, &self.stream)
    }
}

impl<'a, T: DeviceRepr> DeviceView<'a, T> {
    /// A view of `len` elements at `ptr`, memory owned by `stream`'s buffer.
    fn from_raw(ptr: hipDeviceptr_t, len: usize, stream: &'a Stream) -> Self {
        DeviceView {
            ptr,
            len,
            stream,
            _marker: PhantomData,
        }
    }
}

impl<'a, T: DeviceRepr> DeviceViewMut<'a, T> {
    /// A writable view of `len` elements at `ptr`, memory owned by
    /// `stream`'s buffer and borrowed mutably by the caller.
    fn from_raw(ptr: hipDeviceptr_t, len: usize, stream: &'a Stream) -> Self {
        DeviceViewMut {
            ptr,
            len,
            stream,
            _marker: PhantomData,
        }
    }

    /// Splits into two disjoint writable views at element `mid`; `None` when
    /// `mid > len`.
    pub fn split_at_mut(self, mid: usize) -> Option<(DeviceViewMut<'a, T>, DeviceViewMut<'a, T>)> {
        if mid > self.len {
            return None;
        }
        let tail =
            DeviceViewMut::from_raw(offset_ptr::<T>(self.ptr, mid), self.len - mid, self.stream);
        let head = DeviceViewMut { len: mid, ..self };
        Some((head, tail))
    }
}

fn offset_ptr<T>(ptr: hipDeviceptr_t, elems: usize) -> hipDeviceptr_t {
    // Address arithmetic only (never dereferenced on the host); `wrapping_add`
    // keeps a null base of an empty buffer well defined.
    ptr.cast::<u8>()
        .wrapping_add(elems * std::mem::size_of::<T>())
        .cast()
}

/// The address and length of `range` within the `len` elements of `T` at
/// `ptr`, or `None` when it is out of bounds or reversed.
fn sub_range<T>(
    ptr: hipDeviceptr_t,
    len: usize,
    range: &impl RangeBounds<usize>,
) -> Option<(hipDeviceptr_t, usize)> {
    let (start, end) = resolve_range(range, len)?;
    Some((offset_ptr::<T>(ptr, start), end - start))
}

/// `(start, end)` of `range` within `0..len`, or `None` when out of bounds
/// or reversed.
pub(crate) fn resolve_range(range: &impl RangeBounds<usize>, len: usize) -> Option<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1)?,
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    (start <= end && end <= len).then_some((start, end))
}

/// The bounds of `range`, kept for an error message (formatted only then:
/// slicing is on every op's path).
fn bounds_of(range: &impl RangeBounds<usize>) -> (Bound<usize>, Bound<usize>) {
    (range.start_bound().cloned(), range.end_bound().cloned())
}

fn out_of_range((start, end): (Bound<usize>, Bound<usize>), len: usize) -> Error {
    Error::invalid(
        "slice",
        format_args!("range {start:?}..{end:?} is out of bounds for {len} elements"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_within_bounds() {
        assert_eq!(resolve_range(&(..), 10), Some((0, 10)));
        assert_eq!(resolve_range(&(2..5), 10), Some((2, 5)));
        assert_eq!(resolve_range(&(2..=5), 10), Some((2, 6)));
        assert_eq!(resolve_range(&(..=9), 10), Some((0, 10)));
        assert_eq!(resolve_range(&(10..), 10), Some((10, 10)));
    }

    #[test]
    fn out_of_range_or_reversed_is_none() {
        assert_eq!(resolve_range(&(..=10), 10), None);
        assert_eq!(resolve_range(&(11..), 10), None);
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 5..2;
        assert_eq!(resolve_range(&reversed, 10), None);
        assert_eq!(resolve_range(&(..=usize::MAX), 10), None);
    }

    #[test]
    fn offsets_scale_by_element_size() {
        let base = 0x1000usize as hipDeviceptr_t;
        assert_eq!(offset_ptr::<f32>(base, 3) as usize, 0x100c);
        assert_eq!(offset_ptr::<half::f16>(base, 3) as usize, 0x1006);
        assert!(offset_ptr::<f64>(std::ptr::null_mut(), 0).is_null());
    }
}
