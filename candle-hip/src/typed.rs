//! Typed views of a storage's bytes, for the libraries that take typed
//! pointers (rocBLAS through hip-safe's `Blas`): they implement hip-safe's
//! `DevicePtr<T>` / `DevicePtrMut<T>` over a range of elements.

use std::ffi::c_void;
use std::marker::PhantomData;

use candle_core::WithDType;
use hip_safe::{DevicePtr, DevicePtrMut, DeviceRepr, DeviceView, DeviceViewMut, Stream};

use crate::error::{Result, invalid};
use crate::storage::HipStorage;

/// Elements of type `T` of a storage, through the byte view `V`.
pub(crate) struct TypedView<V, T> {
    bytes: V,
    _elem: PhantomData<T>,
}

/// Read access to elements of type `T` of a storage.
pub(crate) type Typed<'a, T> = TypedView<DeviceView<'a, u8>, T>;

/// Write access to elements of type `T` of a storage.
pub(crate) type TypedMut<'a, T> = TypedView<DeviceViewMut<'a, u8>, T>;

/// Errors unless `storage` holds `T`s.
fn check_dtype<T: WithDType>(op: &'static str, storage: &HipStorage) -> Result<()> {
    use candle_core::backend::BackendStorage;
    if storage.dtype() == T::DTYPE {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!("a {:?} storage read as {:?}", storage.dtype(), T::DTYPE),
        ))
    }
}

impl<'a, T: WithDType> Typed<'a, T> {
    /// Elements `start..start + count` of `storage`, which must hold `T`s.
    pub(crate) fn new(
        op: &'static str,
        storage: &'a HipStorage,
        start: usize,
        count: usize,
    ) -> Result<Self> {
        check_dtype::<T>(op, storage)?;
        Ok(Typed {
            bytes: storage.view_range(op, start, count)?,
            _elem: PhantomData,
        })
    }
}

impl<'a, T: WithDType> TypedMut<'a, T> {
    /// Elements `start..start + count` of `storage`, which must hold `T`s.
    pub(crate) fn new(
        op: &'static str,
        storage: &'a mut HipStorage,
        start: usize,
        count: usize,
    ) -> Result<Self> {
        check_dtype::<T>(op, storage)?;
        Ok(TypedMut {
            bytes: storage.view_range_mut(op, start, count)?,
            _elem: PhantomData,
        })
    }
}

// SAFETY: a `TypedView` is only built by `Typed::new` and `TypedMut::new`,
// whose byte view covers exactly `len()` elements of `T` (the storage holds
// `T`s, checked in `new`, and its ranges are whole elements); device
// allocations are aligned far beyond any element type, and element offsets
// keep that alignment; the view borrows the storage, so the memory stays
// allocated, on the stream returned.
unsafe impl<V: DevicePtr<u8>, T: DeviceRepr> DevicePtr<T> for TypedView<V, T> {
    fn device_ptr(&self) -> *mut c_void {
        self.bytes.device_ptr()
    }
    fn len(&self) -> usize {
        self.bytes.len() / std::mem::size_of::<T>()
    }
    fn stream(&self) -> &Stream {
        self.bytes.stream()
    }
}

// SAFETY: the view was obtained through `&mut HipStorage`, so nothing else
// accesses the memory while it is borrowed.
unsafe impl<T: DeviceRepr> DevicePtrMut<T> for TypedMut<'_, T> {
    fn device_ptr_mut(&mut self) -> *mut c_void {
        self.bytes.device_ptr_mut()
    }
}
