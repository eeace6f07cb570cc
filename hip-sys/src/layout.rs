//! Compile-time checks of the layouts of the structs whose fields this
//! project reads: sizes and field offsets as the real ROCm headers define
//! them, so that bindings generated differently fail to build instead of
//! reading the wrong bytes.

use core::mem::{offset_of, size_of};
use static_assertions::const_assert_eq;

use crate::types::{hipDeviceProp_tR0000, hipDeviceProp_tR0600};

const_assert_eq!(size_of::<hipDeviceProp_tR0600>(), 1472);
const_assert_eq!(offset_of!(hipDeviceProp_tR0600, name), 0);
const_assert_eq!(offset_of!(hipDeviceProp_tR0600, totalGlobalMem), 288);
const_assert_eq!(offset_of!(hipDeviceProp_tR0600, warpSize), 308);
const_assert_eq!(offset_of!(hipDeviceProp_tR0600, multiProcessorCount), 388);
const_assert_eq!(offset_of!(hipDeviceProp_tR0600, gcnArchName), 1160);

const_assert_eq!(size_of::<hipDeviceProp_tR0000>(), 792);
const_assert_eq!(offset_of!(hipDeviceProp_tR0000, name), 0);
const_assert_eq!(offset_of!(hipDeviceProp_tR0000, totalGlobalMem), 256);
const_assert_eq!(offset_of!(hipDeviceProp_tR0000, warpSize), 276);
const_assert_eq!(offset_of!(hipDeviceProp_tR0000, multiProcessorCount), 336);
const_assert_eq!(offset_of!(hipDeviceProp_tR0000, gcnArchName), 396);
