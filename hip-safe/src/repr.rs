//! Marker traits for element types that may live in device memory.

/// A plain-data type that can be copied bit for bit between host and device
/// and passed by value to a kernel.
///
/// # Safety
/// The type must be `Copy`, contain no pointers to host memory and no
/// padding, have the same layout as the C type the kernels use for it
/// (`#[repr(C)]` or `#[repr(transparent)]` for structs), and every bit
/// pattern must be a valid value: bytes copied back from the device are
/// whatever the kernels wrote (so `bool` and most enums do not qualify).
pub unsafe trait DeviceRepr: Copy + Send + Sync + 'static {}

/// A [`DeviceRepr`] type for which all-zero bytes form a valid value, so a
/// zero-filled buffer can be handed out safely.
///
/// # Safety
/// Every field must be valid when all its bytes are zero.
pub unsafe trait ValidAsZeroBits: DeviceRepr {}

macro_rules! plain_data {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: primitive numeric types are plain data of fixed size,
            // and all-zero bytes are the value zero.
            unsafe impl DeviceRepr for $t {}
            // SAFETY: see above.
            unsafe impl ValidAsZeroBits for $t {}
        )*
    };
}

plain_data!(
    u8,
    i8,
    u16,
    i16,
    u32,
    i32,
    u64,
    i64,
    usize,
    isize,
    f32,
    f64,
    half::f16,
    half::bf16,
);
