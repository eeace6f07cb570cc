//! Compile-time checks of the layouts of the structs whose fields this
//! project reads: sizes and field offsets as the real ROCm headers define
//! them, so that bindings generated differently fail to build instead of
//! reading the wrong bytes.

use core::mem::{offset_of, size_of};
use static_assertions::const_assert_eq;

use crate::types::{hipDeviceProp_tR0000, hipDeviceProp_tR0600, hipMemAccessDesc, hipMemLocation};

/// Asserts the size of `$ty` and the offset of each listed field.
macro_rules! assert_layout {
    ($ty:ty, size $size:expr, { $($field:ident: $offset:expr),* $(,)? }) => {
        const_assert_eq!(size_of::<$ty>(), $size);
        $(const_assert_eq!(offset_of!($ty, $field), $offset);)*
    };
}

assert_layout!(hipDeviceProp_tR0600, size 1472, {
    name: 0,
    totalGlobalMem: 288,
    warpSize: 308,
    multiProcessorCount: 388,
    gcnArchName: 1160,
});

assert_layout!(hipDeviceProp_tR0000, size 792, {
    name: 0,
    totalGlobalMem: 256,
    warpSize: 276,
    multiProcessorCount: 336,
    gcnArchName: 396,
});

// `hipMemPoolSetAccess` reads an array of these (hip_runtime_api.h: two
// 4-byte enums and an int, in every release since 5.2).
assert_layout!(hipMemLocation, size 8, { type_: 0, id: 4 });
assert_layout!(hipMemAccessDesc, size 12, { location: 0, flags: 8 });
