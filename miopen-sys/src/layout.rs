//! Compile-time checks of the struct layouts this crate's users read
//! (x86-64 / aarch64 LP64 C layout of the MIOpen 3.4 headers).

use core::mem::{offset_of, size_of};
use static_assertions::const_assert_eq;

use crate::types::miopenConvAlgoPerf_t;

// The Find calls fill an array of these; the algorithm union is one enum.
const_assert_eq!(size_of::<miopenConvAlgoPerf_t>(), 16);
const_assert_eq!(offset_of!(miopenConvAlgoPerf_t, time), 4);
const_assert_eq!(offset_of!(miopenConvAlgoPerf_t, memory), 8);
