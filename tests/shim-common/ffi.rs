//! The C boundary: one generic guard that every exported function goes
//! through, and the small helpers the implementations share.
//!
//! An implementation returns either its library's status type directly or
//! `Result<(), Status>`; [`guard`] turns that into the C return value and
//! turns a panic into the library's "internal error" status, so that a panic
//! never unwinds into C.

use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// A C return type of an exported function.
pub(crate) trait FfiReturn: Copy {
    /// The value returned when the implementation panicked.
    fn panicked() -> Self;
}

/// A status type with a success value (`hipError_t`, `rocblas_status`, ...).
pub(crate) trait Status: FfiReturn {
    /// The success value of this library.
    const SUCCESS: Self;

    /// Called with every error status an implementation returns; the HIP
    /// runtime records it for `hipGetLastError`.
    fn observe_error(self) {}
}

/// What an implementation may return for a C return type `R`.
pub(crate) trait IntoFfi<R> {
    /// Converts to the C return value.
    fn into_ffi(self) -> R;
}

impl<R: FfiReturn> IntoFfi<R> for R {
    fn into_ffi(self) -> R {
        self
    }
}

impl<S: Status> IntoFfi<S> for Result<(), S> {
    fn into_ffi(self) -> S {
        match self {
            Ok(()) => S::SUCCESS,
            Err(status) => {
                status.observe_error();
                status
            }
        }
    }
}

impl FfiReturn for *const c_char {
    fn panicked() -> Self {
        c"internal error (panic in the test platform's shim)".as_ptr()
    }
}

/// Runs an implementation, converting its result to the C return value; a
/// panic becomes `R::panicked()` instead of unwinding across the boundary.
pub(crate) fn guard<R: FfiReturn, O: IntoFfi<R>>(body: impl FnOnce() -> O) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(out) => out.into_ffi(),
        Err(_) => R::panicked(),
    }
}

/// Writes `value` through the C out-pointer `out`, or fails with `null_error`
/// when it is null.
///
/// # Safety
/// `out` must be null or valid for a write of one `T`.
pub(crate) unsafe fn write_out<T, E>(out: *mut T, value: T, null_error: E) -> Result<(), E> {
    if out.is_null() {
        return Err(null_error);
    }
    // SAFETY: non-null, and valid for one write per the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Fails with `error` when `ptr` is null.
pub(crate) fn non_null<T, E>(ptr: *const T, error: E) -> Result<(), E> {
    if ptr.is_null() { Err(error) } else { Ok(()) }
}

/// Copies `text` plus a terminating NUL into the C buffer `out`.
///
/// # Safety
/// `out` must be valid for `text.len() + 1` bytes.
pub(crate) unsafe fn copy_c_string(text: &[u8], out: *mut c_char) {
    // SAFETY: the caller guarantees room for the text and its terminator.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), out.cast::<u8>(), text.len());
        out.add(text.len()).write(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Code(u32);

    impl FfiReturn for Code {
        fn panicked() -> Self {
            Code(99)
        }
    }

    impl Status for Code {
        const SUCCESS: Self = Code(0);
    }

    #[test]
    fn results_and_panics_become_codes() {
        assert_eq!(guard(|| Ok::<(), Code>(())), Code(0));
        assert_eq!(guard(|| Err::<(), Code>(Code(7))), Code(7));
        assert_eq!(guard(|| Code(5)), Code(5));
        let panicking = || -> Result<(), Code> { panic!("deliberate") };
        assert_eq!(guard(panicking), Code(99));
    }

    #[test]
    fn out_pointers_are_checked() {
        let mut slot = 0_i32;
        // SAFETY: `slot` is a valid out-pointer; null is rejected.
        unsafe {
            assert_eq!(write_out(&mut slot, 3, "null"), Ok(()));
            assert_eq!(
                write_out(std::ptr::null_mut::<i32>(), 3, "null"),
                Err("null")
            );
        }
        assert_eq!(slot, 3);
    }
}
